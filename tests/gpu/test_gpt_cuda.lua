-- The GPT model trained on a GPU against the same training on the CPU: the
-- bare loop (AdamW) and the engine (zl.initialize, ZeRO stage 0, clipping),
-- with dropout off and on (the device draws the CPU's masks), step by step
-- losses and the final weights. Kernels sum in other orders than the CPU and
-- cuBLASLt tiles its GEMMs, so the figures agree to float tolerance, not bits.
-- Skips (CTest's skip) without a CUDA device.
local zl = require 'zlua'
local H = require 'harness'
local nn = require 'zlua.nn'
local optim = require 'zlua.optim'
local test, check, check_close = H.test, H.check, H.check_close

local n, why = zl.cuda.device_count()
if n == 0 then H.skip(why) end

local CFG = { vocab_size = 37, block_size = 16, n_layer = 2, n_head = 2, n_embd = 32 }
local B, T, STEPS = 4, 16, 4

local function batch(device)
  local xs, ys = {}, {}
  for i = 1, B * T do xs[i], ys[i] = (i * 7 + 3) % CFG.vocab_size, (i * 11 + 5) % CFG.vocab_size end
  return zl.tensor(xs, 'i64'):view(B, T):to(device), zl.tensor(ys, 'i64'):view(B, T):to(device)
end

-- Losses per step and the final parameters (on the host) of STEPS steps.
local function train(device, how, dropout)
  zl.manual_seed(3)
  local cfg = setmetatable({ dropout = dropout }, { __index = CFG })
  local model = nn.GPT(cfg)
  local losses = {}
  if how == 'bare' then
    model:to(device)
    local x, y = batch(device)
    local opt = optim.AdamW(model:parameters(), { lr = 1e-3, weight_decay = 0.1 })
    for s = 1, STEPS do
      local _, loss = model(x, y)
      loss:backward()
      opt:step()
      opt:zero_grad()
      losses[s] = loss:float():item()
    end
  else
    -- The engine places the model itself (ZLUA_ACCELERATOR, read through
    -- os.getenv when it is made) and moves the host batches to it.
    local x, y = batch('cpu')
    local engine = H.with_accelerator(device, zl.initialize, { model = model, config = {
      train_micro_batch_size_per_gpu = B, gradient_clipping = 0.5, steps_per_print = 1000000,
      zero_optimization = { stage = 0 }, optimizer = { type = 'AdamW', params = { lr = 1e-3, weight_decay = 0.1 } } } })
    check(engine.device == (device == 'cpu' and 'cpu' or 'cuda:0'), 'the engine is on ' .. engine.device)
    engine:set_progress(false)
    for s = 1, STEPS do
      local _, loss = engine(x, y)
      engine:backward(loss)
      engine:step()
      losses[s] = loss:float():item()
    end
  end
  local params = {}
  for name, p in model:named_parameters() do params[name] = p:cpu() end
  return losses, params
end

for _, how in ipairs({ 'bare', 'engine' }) do
  for _, dropout in ipairs({ 0, 0.1 }) do
    test(string.format('%s loop, dropout %g: cuda matches cpu', how, dropout), function()
      local lc, pc = train('cpu', how, dropout)
      local lg, pg = train('cuda', how, dropout)
      for s = 1, STEPS do check_close(lg[s], lc[s], 1e-5, 'loss at step ' .. s) end
      -- Adam steps an element with a near-zero gradient by about lr whatever
      -- its sign, so single elements may differ by 2 lr; the norm of the
      -- difference still shows a parameter trained wrongly or not at all.
      for name, p in pairs(pc) do
        check(pg[name] ~= nil, name)
        local d = pg[name] - p
        local rel = math.sqrt((d * d):sum():item() / math.max((p * p):sum():item(), 1e-24))
        check(rel <= 1e-2, string.format('%s: relative difference %g', name, rel))
      end
    end)
  end
end

H.done()
