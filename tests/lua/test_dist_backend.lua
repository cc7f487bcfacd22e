-- zlua.dist.init_process_group choosing the backend by name, without a GPU:
-- 'nccl' refused with the engine's reason, an unknown name listing the known
-- ones, and a second, different backend refused once one is open.
local zl = require 'zlua'
local H = require 'harness'
local dist = require 'zlua.dist'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

test('nccl_without_a_gpu', function()
  if zl.cuda.is_available() then return print('note: a GPU is visible; tests/gpu covers nccl') end
  local err = check_error(function() dist.init_process_group('nccl') end, 'CUDA') or ''
  check(err:find('comm nccl: rank 0: no CUDA device: ', 1, true) or err:find('built without NCCL', 1, true),
    'the reason: ' .. err)
end)

test('unknown_backend', function()
  check_error(function() dist.init_process_group('gloo') end,
    [[unknown backend 'gloo' (expected "self", "mpi" or "nccl")]])
  check_error(function() dist.init_process_group(3) end, 'backend must be a string, got number')
end)

test('one_backend_per_state', function()
  dist.init_process_group{ backend = 'self' }
  check_eq(dist.backend(), 'self', 'backend')
  dist.init_process_group('self')
  dist.init_process_group()
  check_error(function() dist.init_process_group('nccl') end,
    "dist: the communicator is already open with backend 'self'; cannot open 'nccl' as well")
end)

H.done()
