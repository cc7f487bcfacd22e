-- Where zlua.initialize trains the model (lua/zlua/engine/accelerator.lua):
-- as DeepSpeed's accelerator, a GPU when there is one, else host memory; the
-- ZLUA_ACCELERATOR and DS_ACCELERATOR settings, read through a stand-in
-- getenv here (CTest pins the suite to the CPU); a model already on a device
-- stays there; the engine keeps the CPU default without a GPU.

local zl = require 'zlua'
local nn = require 'zlua.nn'
local accelerator = require 'zlua.engine.accelerator'
local H = require 'harness'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local ngpu, why = zl.cuda.device_count()

local function env(t) return function(k) return t[k] end end

test('the settings', function()
  local m = nn.Linear(3, 2)
  check_eq(accelerator.choose(m, 0, env { ZLUA_ACCELERATOR = 'cpu' }), 'cpu')
  check_eq(accelerator.choose(m, 0, env { DS_ACCELERATOR = 'cpu' }), 'cpu')
  check_error(function() accelerator.choose(m, 0, env { DS_ACCELERATOR = 'xpu' }) end,
    "zlua.initialize: DS_ACCELERATOR=xpu: zlua's accelerators are 'cuda' and 'cpu'")
  check_error(function() accelerator.choose(m, 0, env { ZLUA_ACCELERATOR = 'gpu', DS_ACCELERATOR = 'cpu' }) end,
    'ZLUA_ACCELERATOR=gpu')
  if ngpu == 0 then
    check_eq(accelerator.choose(m, 0, env {}), 'cpu')
    check_error(function() accelerator.choose(m, 0, env { ZLUA_ACCELERATOR = 'cuda' }) end,
      'zlua.initialize: ZLUA_ACCELERATOR=cuda, but no CUDA device: ')
  else
    check_eq(accelerator.choose(m, 0, env {}), 'cuda:0')
    check_eq(accelerator.choose(m, 0, env { ZLUA_ACCELERATOR = 'cuda' }), 'cuda:0')
    check_error(function() accelerator.choose(m, ngpu, env {}) end,
      string.format('local rank %d has no GPU of its own (%d visible)', ngpu, ngpu))
    m:to('cuda:0')
    check_eq(accelerator.choose(m, 1, env {}), 'cuda:0')   -- placed by the script: it stays
    check_eq(accelerator.choose(m, 0, env { ZLUA_ACCELERATOR = 'cpu' }), 'cpu')
  end
end)

test('the engine trains where the accelerator says', function()
  local m = nn.Sequential(nn.Linear(4, 3))
  local engine = zl.initialize { model = m, config = { train_micro_batch_size_per_gpu = 2,
    optimizer = { type = 'Adam', params = { lr = 0.1 } } } }
  check_eq(engine.device, 'cpu')   -- CTest's ZLUA_ACCELERATOR=cpu, or no GPU
  check_eq(engine.local_rank, 0)
  check_eq(m[1].weight:device(), 'cpu')
  local loss = zl.mse_loss(engine(zl.ones(2, 4)), zl.zeros(2, 3))
  engine:backward(loss)
  engine:step()
  check(engine:was_step_applied())
end)

if ngpu == 0 then print('(no GPU: ' .. why .. ')') end
H.done()
