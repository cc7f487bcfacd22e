--[=[ The job of tests/dist/test_two_hosts.sh: ZeRO stage 3 fitting a small
  regression for the steps it is given, on whatever ranks it is started with,
  every parameter partitioned so that each forward gathers them from the other
  rank. Each rank says where
  it runs, "where rank R host H local L of S"; rank 0 prints "params P", the
  model's size, and "step N loss L", L the global mean loss as a hex float,
  so that two runs compare bit for bit. ]=]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'

local N, rank = dist.world_size(), dist.rank()
-- The hostname of this process's UTS namespace, which the test sets per "host".
local f = assert(io.open('/proc/sys/kernel/hostname'))
print(string.format('where rank %d host %s local %s of %s', rank, f:read('l'), os.getenv('LOCAL_RANK'),
  os.getenv('LOCAL_SIZE')))
f:close()

local ROWS, STEPS = 8, assert(tonumber(arg[1]), 'usage: two_hosts.lua <steps>')
local mine = ROWS // N
zl.manual_seed(99)
local model = nn.Sequential(nn.Linear(5, 24), nn.LayerNorm(24), nn.GELU(), nn.Linear(24, 24), nn.GELU(),
  nn.Linear(24, 2))
if rank == 0 then print(string.format('params %d', model:num_parameters())) end
local engine = zl.initialize { model = model, config = {
  train_batch_size = ROWS, train_micro_batch_size_per_gpu = mine,
  optimizer = { type = 'Adam', params = { lr = 3e-3 } },
  zero_optimization = { stage = 3, stage3_param_persistence_threshold = 0, reduce_bucket_size = 100,
    allgather_bucket_size = 200, stage3_prefetch_bucket_size = 100 },
  steps_per_print = 1000000,
} }
engine:set_progress(false)

for s = 1, STEPS do
  local g = zl.Generator(500 + s)
  local x = zl.randn({ ROWS, 5 }, 'f32', g)
  local y = zl.randn({ ROWS, 2 }, 'f32', g)
  local from = rank * mine + 1
  local loss = zl.mse_loss(engine(x:narrow(1, from, mine)), y:narrow(1, from, mine))
  engine:backward(loss)
  engine:step()
  local sum = zl.full({ 1 }, loss:item())
  dist.all_reduce(sum)
  if rank == 0 then print(string.format('step %d loss %a', s, sum:item() / N)) end
end
