-- GPT-2 124M's shape (12 layers, 768 channels, 12 heads, vocabulary 50257)
-- trained 20 steps through the engine on the GPU and on the CPU from the same
-- initial weights and batch: the GPU's losses follow the CPU's (1e-4
-- relative in f32, 1e-2 in bf16), and ZeRO stage 3 with the optimizer
-- offloaded to the CPU trains it on one GPU along the CPU's f32 losses. A
-- small learning rate takes the loss from 11 to about 2.7: at 3e-4 the batch
-- is learnt by heart, and losses near 0 differ by more than 1e-2 relative
-- between any two orders of summation. A short sequence (1 x 64) keeps the
-- CPU's side to seconds. Skips (CTest's skip) without a CUDA device.
local zl = require 'zlua'
local H = require 'harness'
local nn = require 'zlua.nn'
local test, check = H.test, H.check

local n, why = zl.cuda.device_count()
if n == 0 then H.skip(why) end

local CFG = { vocab_size = 50257, block_size = 64, n_layer = 12, n_head = 12, n_embd = 768 }
local B, T, STEPS = 1, 64, 20
local cores = tonumber(io.popen('nproc'):read('l')) or 2
zl.set_num_threads(cores)

local xs, ys = {}, {}
for i = 1, B * T do xs[i], ys[i] = (i * 7919 + 13) % CFG.vocab_size, (i * 104729 + 7) % CFG.vocab_size end
local X, Y = zl.tensor(xs, 'i64'):view(B, T), zl.tensor(ys, 'i64'):view(B, T)

-- Losses of STEPS engine steps on `device` ('cpu' or 'cuda').
local function train(device, precision, zero)
  zl.manual_seed(7)
  local model = nn.GPT(CFG)
  local engine = H.with_accelerator(device, zl.initialize, { model = model, config = {
    train_micro_batch_size_per_gpu = B, gradient_clipping = 1.0, steps_per_print = 1000000,
    bf16 = { enabled = precision == 'bf16' }, zero_optimization = zero or { stage = 0 },
    optimizer = { type = 'AdamW', params = { lr = 5e-6, weight_decay = 0.01 } } } })
  engine:set_progress(false)
  local losses = {}
  for s = 1, STEPS do
    local _, loss = engine(X, Y)
    engine:backward(loss)
    engine:step()
    losses[s] = loss:float():item()
  end
  return losses
end

local function follows(got, want, rtol, what)
  local worst, at = 0, 0
  for s = 1, STEPS do
    local r = math.abs(got[s] - want[s]) / math.abs(want[s])
    if r > worst then worst, at = r, s end
  end
  print(string.format('%s: first loss %.6f, last %.6f (cpu %.6f); worst relative difference %.2e at step %d',
    what, got[1], got[STEPS], want[STEPS], worst, at))
  check(worst <= rtol, string.format('%s: step %d loss %.7g vs %.7g (relative %.2e > %.0e)', what, at, got[at],
    want[at], worst, rtol))
  check(got[STEPS] < got[1], what .. ': the loss went down')
  check(got[STEPS] > 1, what .. ': the loss stays where relative differences mean something')
end

local cpu32
test('f32: 20 GPU steps follow the CPU to 1e-4', function()
  cpu32 = train('cpu', 'f32')
  follows(train('cuda', 'f32'), cpu32, 1e-4, 'f32 cuda')
end)

test('bf16: 20 GPU steps follow the CPU to 1e-2', function()
  follows(train('cuda', 'bf16'), train('cpu', 'bf16'), 1e-2, 'bf16 cuda')
end)

test('ZeRO stage 3 with offload_optimizer cpu trains it on one GPU', function()
  local got = train('cuda', 'f32', { stage = 3, offload_optimizer = { device = 'cpu', pin_memory = true } })
  follows(got, cpu32 or train('cpu', 'f32'), 1e-4, 'stage 3 offload cuda')
end)

H.done()
