-- A rank of tests/gpu/test_zero_nccl.lua. 'nccl': one of two ranks (RANK,
-- WORLD_SIZE, LOCAL_RANK and ZLUA_NCCL_ID_FILE set by the test), the model
-- on cuda:<local rank>, each rank training on its half of the batch. 'cpu':
-- one rank in host memory training on the whole batch, which averages the
-- same gradients. After each step every rank evaluates the whole batch and
-- rank 0 prints the losses, for ZeRO stages 0-3.

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'

local mode = arg[1]
if mode == 'nccl' then dist.init_process_group('nccl') end
local rank, world = dist.rank(), dist.world_size()

local Net = nn.Module:extend('GpuTestNet')
function Net:__init()
  self.w1, self.b1 = zl.randn(8, 16) * 0.3, zl.zeros(16)
  self.w2, self.b2 = zl.randn(16, 5) * 0.3, zl.zeros(5)
end
function Net:forward(x) return (x:matmul(self.w1) + self.b1):gelu():matmul(self.w2) + self.b2 end

local labels = {}
for i = 1, 32 do labels[i] = (i * 3) % 5 end

for stage = 0, 3 do
  zl.manual_seed(5)
  local m = Net()
  local x, y = zl.randn(32, 8), zl.tensor(labels, 'i64')
  local rows = 32 // world
  local engine = zl.initialize { model = m, config = { train_micro_batch_size_per_gpu = rows,
    gradient_clipping = 1.0, optimizer = { type = 'AdamW', params = { lr = 0.01, weight_decay = 0.01 } },
    zero_optimization = { stage = stage, reduce_bucket_size = 100, stage3_param_persistence_threshold = 10 } } }
  x, y = x:to(engine.device), y:to(engine.device)
  local xs, ys = x:narrow(1, rank * rows + 1, rows), y:narrow(1, rank * rows + 1, rows)
  local out = {}
  for s = 1, 5 do
    engine:backward(zl.cross_entropy(engine(xs), ys))
    engine:step()
    out[s] = string.format('%.9g', zl.no_grad(function() return zl.cross_entropy(engine(x), y):item() end))
  end
  if rank == 0 then print(string.format('stage %d %s %s', stage, engine.device, table.concat(out, ' '))) end
end
