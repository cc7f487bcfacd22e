-- zlua.initialize with the model on a GPU against the same run on the CPU:
-- the engine puts the model on cuda:0 (DeepSpeed's accelerator), ZeRO stages
-- 0-3 keep its states there, or in host memory or on NVMe with the optimizer
-- and the parameters offloaded; the losses agree to 1e-5 in f32, and a
-- checkpoint saved from the GPU resumes on it. Exits 77 (CTest's skip)
-- without a GPU. The model is built from ops that run on a device (matmul,
-- add, gelu, cross_entropy).

local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local test, check, check_eq, check_close = H.test, H.check, H.check_eq, H.check_close

local n, why = zl.cuda.device_count()
if n == 0 then H.skip(why) end

local Net = nn.Module:extend('GpuTestNet')
function Net:__init()
  self.w1, self.b1 = zl.randn(8, 16) * 0.3, zl.zeros(16)
  self.w2, self.b2 = zl.randn(16, 5) * 0.3, zl.zeros(5)
end
function Net:forward(x) return (x:matmul(self.w1) + self.b1):gelu():matmul(self.w2) + self.b2 end

local TMP = os.tmpname()
os.remove(TMP)

-- The losses of `steps` steps with the accelerator `acc` and the ZeRO block `zc`.
local function losses(acc, zc, steps, save)
  zl.manual_seed(5)
  local m = Net()
  local labels = {}
  for i = 1, 32 do labels[i] = (i * 7) % 5 end
  local x, y = zl.randn(32, 8), zl.tensor(labels, 'i64')
  local engine = zl.initialize { model = m, config = { train_micro_batch_size_per_gpu = 32,
    gradient_clipping = 1.0, optimizer = { type = 'AdamW', params = { lr = 0.01, weight_decay = 0.01 } },
    zero_optimization = zc } }
  check_eq(engine.device, acc)
  x, y = x:to(engine.device), y:to(engine.device)
  local out = {}
  for s = 1, steps do
    local loss = zl.cross_entropy(engine(x), y)
    engine:backward(loss)
    engine:step()
    out[s] = loss:item()
  end
  if save then engine:save_checkpoint(TMP, 'gpu') end
  return out, engine
end

local with_accelerator = H.with_accelerator

-- NVMe offload where this build has libaio.
local OFFLOADS = zl.core.aio_unavailable() and { 'none', 'cpu' } or { 'none', 'cpu', 'nvme' }

test('ZeRO stages 0-3 on the GPU step as on the CPU', function()
  for stage = 0, 3 do
    for _, off in ipairs(OFFLOADS) do
      if not (stage == 0 and off ~= 'none') then
        local zc = { stage = stage, reduce_bucket_size = 100, stage3_param_persistence_threshold = 10 }
        if off == 'cpu' then
          zc.offload_optimizer = { device = 'cpu', pin_memory = true }
          if stage == 3 then zc.offload_param = { device = 'cpu', pin_memory = true } end
        elseif off == 'nvme' then
          zc.offload_optimizer = { device = 'nvme', nvme_path = TMP .. '/nvme', pin_memory = true }
          if stage == 3 then
            zc.offload_param = { device = 'nvme', nvme_path = TMP .. '/nvme', max_in_cpu = 0, buffer_size = 1000 }
          end
        end
        local cpu = with_accelerator('cpu', function() return losses('cpu', zc, 6) end)
        local gpu = with_accelerator('cuda', function() return losses('cuda:0', zc, 6) end)
        check_close(gpu, cpu, 1e-5, string.format('stage %d, offload %s', stage, off))
        check(gpu[6] < gpu[1], 'the loss falls')
      end
    end
  end
end)

test('the optimizers step parameters on the GPU, their state beside them', function()
  local optim = require 'zlua.optim'
  for _, make in ipairs { optim.AdamW, optim.Lamb, function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9 }) end } do
    zl.manual_seed(3)
    local host = { zl.randn(40, 7), zl.randn(9) }
    local dev = { host[1]:cuda(), host[2]:cuda() }
    local oh, od = make(host), make(dev)
    local before = zl.cuda.memory_allocated(0, 'optimizer')
    for _ = 1, 3 do
      for i = 1, 2 do
        local g = zl.randn(table.unpack(host[i]:shape()))
        host[i].grad, dev[i].grad = g, g:cuda()
      end
      oh:step()
      od:step()
    end
    check(zl.cuda.memory_allocated(0, 'optimizer') > before, 'the moments are on the GPU, charged to optimizer state')
    for i = 1, 2 do check_close(dev[i]:cpu():totable(), host[i]:totable(), 1e-6, 'parameter ' .. i) end
  end
end)

test('a checkpoint saved from the GPU resumes there', function()
  local zc = { stage = 2 }
  local first = with_accelerator('cuda', function() return losses('cuda:0', zc, 3, true) end)
  check_eq(#first, 3)
  with_accelerator('cuda', function()
    zl.manual_seed(5)
    local m = Net()
    local engine = zl.initialize { model = m, config = { train_micro_batch_size_per_gpu = 32,
      optimizer = { type = 'AdamW', params = { lr = 0.01 } }, zero_optimization = zc } }
    engine:load_checkpoint(TMP, 'gpu')
    check_eq(m.w1:device(), 'cuda:0')
    check_eq(engine.global_steps, 3)
  end)
end)

os.execute('rm -rf ' .. H.quote(TMP))
H.done()
