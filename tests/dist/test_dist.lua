-- zlua.dist across real ranks (run by CTest as `zlua --nprocs 2 test_dist.lua`
-- from tests/lua, for the harness): rank and size, every collective against
-- values each rank computes itself, and zlua.initialize naming what training
-- on several ranks still needs.

local zl = require 'zlua'
local dist = require 'zlua.dist'
local nn = require 'zlua.nn'
local H = require 'harness'
local test, check, check_close, check_error = H.test, H.check, H.check_close, H.check_error

local r, n = dist.rank(), dist.world_size()

test('ranks', function()
  check(n >= 2 and dist.backend() == 'mpi', 'several ranks over MPI')
  check(tostring(r) == os.getenv('RANK') and tostring(n) == os.getenv('WORLD_SIZE'), 'RANK and WORLD_SIZE agree')
  check(dist.get_rank() == r and dist.get_world_size() == n, 'torch.distributed names')
end)

test('collectives', function()
  local t = zl.ones(4) * (r + 1)
  dist.all_reduce(t)
  check_close(t:totable(), { n * (n + 1) / 2, n * (n + 1) / 2, n * (n + 1) / 2, n * (n + 1) / 2 }, 0, 'all_reduce sum')
  local m = dist.all_reduce(zl.full({ 2 }, r), 'max')
  check_close(m:totable(), { n - 1, n - 1 }, 0, 'all_reduce max')
  local g = dist.all_gather(zl.zeros(2 * n), zl.full({ 2 }, r))
  local want = {}
  for k = 0, n - 1 do want[#want + 1] = k; want[#want + 1] = k end
  check_close(g:totable(), want, 0, 'all_gather in rank order')
  local s = dist.reduce_scatter(zl.zeros(2), zl.arange(2 * n):float(), 'sum')
  check_close(s:totable(), { 2 * r * n, (2 * r + 1) * n }, 0, "reduce_scatter gives this rank's slice")
  local b = dist.broadcast(zl.full({ 3 }, r + 10), 1)
  check_close(b:totable(), { 11, 11, 11 }, 0, 'broadcast from rank 1')
  local h = dist.all_reduce(zl.ones(3, 'bf16') * 0.5, 'avg')
  check(h:dtype() == 'bf16' and h:totable()[1] == 0.5, 'bf16 reduced (in f32) and kept bf16')
  check_error(function() dist.all_gather(zl.zeros(3), zl.zeros(2)) end, 'allgather')
  dist.barrier()
end)

test('training_needs_issue_5', function()
  check_error(function() zl.initialize { model = nn.Linear(2, 1), config = { train_micro_batch_size_per_gpu = 1 } } end,
    'training on ' .. n .. ' ranks needs')
end)

H.done()
