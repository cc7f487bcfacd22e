--[=[ One run for tests/dist/test_infinity.sh: a GPT built partitioned
  (zlua.zero.Init) and trained at stage 3, its parameters and optimizer state
  on NVMe (--nvme DIR) or in memory (no --nvme), with DeepSpeed's offload
  defaults but for a sub_group_size that splits the partition and buffers of
  the largest parameter; prints each step's loss to the last bit, then the
  training state's size (16 bytes a parameter) and the memory limit found.
    zlua infinity_run.lua [--nvme DIR] [--n_layer 15] [--n_embd 512] [--steps 3] ]=]
local zl = require 'zlua'
local nn = require 'zlua.nn'
local zero = require 'zlua.zero'

local args = zl.args(nil, { nvme = '', n_layer = 15, n_embd = 512, steps = 3, block = 32 })
local V, T, E = 64, args.block, args.n_embd
local z = { stage = 3, sub_group_size = 4 * E * E, stage3_param_persistence_threshold = 1e4,
  stage3_max_reuse_distance = 0, reduce_bucket_size = 4 * E * E, stage3_prefetch_bucket_size = 4 * E * E }
if args.nvme ~= '' then
  z.offload_optimizer = { device = 'nvme', nvme_path = args.nvme }
  z.offload_param = { device = 'nvme', nvme_path = args.nvme, buffer_size = 4 * E * E, max_in_cpu = 0 }
end
local cfg = { train_batch_size = 1, gradient_clipping = 1.0, zero_optimization = z, steps_per_print = 1e9,
  optimizer = { type = 'AdamW', params = { lr = 1e-3, weight_decay = 0.1 } } }

zl.manual_seed(1)
local model = zero.Init(cfg, function()
  return nn.GPT { vocab_size = V, block_size = T, n_layer = args.n_layer, n_head = E // 64, n_embd = E }
end)
local engine = zl.initialize { model = model, config = cfg }
engine:set_progress(false)
local psi = 0
for _, e in ipairs(engine.zero.entries) do psi = psi + e.n end

local g = zl.Generator(7)
for s = 1, args.steps do
  local ids = {}
  for i = 1, T + 1 do ids[i] = g:randint(V) - 1 end
  local x = zl.tensor({ table.unpack(ids, 1, T) }, 'i64'):view(1, T)
  local y = zl.tensor({ table.unpack(ids, 2, T + 1) }, 'i64'):view(1, T)
  local _, loss = engine(x, y)
  engine:backward(loss)
  engine:step()
  print(string.format('step %d loss %a', s, loss:float():item()))
end
print(string.format('state %d bytes, limit %d bytes', 16 * psi, zl.memory_limit()))
