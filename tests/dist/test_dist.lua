-- zlua.dist across real ranks (run by CTest as `zlua --nprocs 2 test_dist.lua`
-- from tests/lua, for the harness): rank and size, every collective against
-- values each rank computes itself, blocking and async_op, and an engine on
-- two ranks.

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

test('async_op', function()
  -- Five collectives in flight at once, waited on in reverse order.
  local a = zl.ones(300, 'bf16') * (r + 1)
  local g = zl.zeros(3 * n)
  local s = zl.zeros(2)
  local b = zl.full({ 4 }, r + 10)
  local w1 = dist.all_reduce(a, 'avg', true)
  local w2 = dist.all_gather(g, zl.full({ 3 }, r), true)
  local w3 = dist.reduce_scatter(s, zl.arange(2 * n):float(), 'max', true)
  local w4 = dist.broadcast(b, 1, true)
  local w5 = dist.barrier(true)
  check(tostring(w1) == 'allreduce request (not waited on)', 'a work object names its collective')
  for _, w in ipairs { w5, w4, w3, w2, w1 } do check(w:wait() == true, 'wait returns true') end
  check(tostring(w1) == 'allreduce request (waited on)', 'and says when it was waited on')
  check(a:dtype() == 'bf16' and a:totable()[300] == (n + 1) / 2, 'all_reduce avg in bf16')
  local want = {}
  for k = 0, n - 1 do for _ = 1, 3 do want[#want + 1] = k end end
  check_close(g:totable(), want, 0, 'all_gather in rank order')
  check_close(s:totable(), { 2 * r, 2 * r + 1 }, 0, "reduce_scatter max gives this rank's slice")
  check_close(b:totable(), { 11, 11, 11, 11 }, 0, 'broadcast from rank 1')

  check_error(function() w3:wait() end, 'reduce_scatter request was already waited on')
  check_error(function() dist.all_reduce(a, 'sum', {}) end, 'dist.all_reduce: async_op (argument 3) must be a boolean, got table')
  check_error(function() dist.all_gather(zl.zeros(3), zl.zeros(2), true) end, 'allgather on rank ' .. r)
  check(dist.all_reduce(zl.ones(2), 'sum', false):totable()[1] == n, 'async_op false blocks')

  -- Work objects dropped unwaited, with or without their tensors: the
  -- collector waits on them, and the ranks stay matched.
  local kept = zl.full({ 1000 }, r)
  dist.all_reduce(kept, 'sum', true)
  dist.all_reduce(zl.ones(1000), 'max', true)
  dist.barrier(true)
  collectgarbage()
  collectgarbage()
  check_close(kept:totable()[1000], n * (n - 1) / 2, 0, 'a collected work was waited on')
  check(dist.all_reduce(zl.ones(3), 'sum'):totable()[3] == n, 'collectives still match afterwards')
end)

test('engine_on_two_ranks', function()
  -- Each rank's DistributedSampler share, and memory_report naming this rank's stage.
  local e = zl.initialize { model = nn.Linear(2, 1), config = { train_micro_batch_size_per_gpu = 1,
    optimizer = { type = 'SGD', params = { lr = 0.1 } }, zero_optimization = { stage = 2 } } }
  local rep = e:memory_report()
  check(rep.world_size == n and rep.rank == r and rep.stage == 2, 'memory_report names rank, world size and stage')
  check(rep.grads == 2 * 16 * 4, "stage 2 keeps one 16-element chunk of each parameter's gradient (f32)")
  check_error(function() zl.initialize { model = nn.Linear(2, 1), config = { train_micro_batch_size_per_gpu = 1,
    optimizer = { type = 'Lamb' }, zero_optimization = { stage = 1 } } } end, 'Lamb scales each parameter')
end)

test('training_data_shares', function()
  -- zlua.initialize{training_data=} gives each rank its own samples; together they are all of them.
  local data = require 'zlua.data'
  local ds = data.TensorDataset(zl.arange(12):float():view(12, 1), zl.arange(12):float())
  local _, _, loader = zl.initialize { model = nn.Linear(1, 1), training_data = ds,
    config = { train_micro_batch_size_per_gpu = 2, optimizer = { type = 'SGD', params = { lr = 0.1 } } } }
  local mine = {}
  for x in loader() do
    for _, v in ipairs(H.flat(x)) do mine[#mine + 1] = v end
  end
  check(#mine == 12 // n, 'each rank gets 12 / world size samples')
  local all = dist.all_gather(zl.zeros(#mine * n), zl.tensor(mine))
  local seen = {}
  for _, v in ipairs(all:totable()) do seen[v] = (seen[v] or 0) + 1 end
  for v = 0, 11 do check(seen[v] == 1, 'sample ' .. v .. ' reaches exactly one rank') end
end)

H.done()
