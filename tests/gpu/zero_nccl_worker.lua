-- A rank of tests/gpu/test_zero_nccl.lua (started by zlua --nprocs 2): the
-- engine over nccl with the model on cuda:<local rank> (arg 'nccl'), or over
-- mpi in host memory (arg 'cpu', with ZLUA_ACCELERATOR=cpu), for ZeRO stages
-- 0-3; rank 0 prints each stage's losses, every rank trains on its own batch.

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'

if arg[1] == 'nccl' then dist.init_process_group('nccl') end
local rank = dist.rank()

local Net = nn.Module:extend('GpuTestNet')
function Net:__init()
  self.w1, self.b1 = zl.randn(8, 16) * 0.3, zl.zeros(16)
  self.w2, self.b2 = zl.randn(16, 5) * 0.3, zl.zeros(5)
end
function Net:forward(x) return (x:matmul(self.w1) + self.b1):gelu():matmul(self.w2) + self.b2 end

for stage = 0, 3 do
  zl.manual_seed(5)
  local m = Net()
  zl.manual_seed(100 + rank)
  local labels = {}
  for i = 1, 16 do labels[i] = (i * 3 + rank) % 5 end
  local x, y = zl.randn(16, 8), zl.tensor(labels, 'i64')
  local engine = zl.initialize { model = m, config = { train_micro_batch_size_per_gpu = 16,
    gradient_clipping = 1.0, optimizer = { type = 'AdamW', params = { lr = 0.01, weight_decay = 0.01 } },
    zero_optimization = { stage = stage, reduce_bucket_size = 100, stage3_param_persistence_threshold = 10 } } }
  x, y = x:to(engine.device), y:to(engine.device)
  local out = {}
  for s = 1, 5 do
    local loss = zl.cross_entropy(engine(x), y)
    engine:backward(loss)
    engine:step()
    out[s] = string.format('%.9g', loss:item())
  end
  if rank == 0 then print(string.format('stage %d %s %s', stage, engine.device, table.concat(out, ' '))) end
end
