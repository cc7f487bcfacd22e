-- zlua.nn.llama_activations against the allocator: a step's activations after
-- the forward and at their peak in backward, for shapes that move each term
-- (layers, vocabulary, intermediate size, heads, key/value heads, sequence
-- length), in f32 and bf16, with and without checkpointing, within 20%.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local act = require 'zlua.nn.llama_activations'
local H = require 'harness'
local test, check = H.test, H.check

local function measure(c, B, T, dtype, ckpt)
  zl.manual_seed(1)
  local model = nn.Llama(c)
  if dtype ~= 'f32' then model:to(dtype) end
  if ckpt then model:gradient_checkpointing_enable() end
  local ids = {}
  for i = 1, B * T do ids[i] = (i * 7919) % c.vocab_size end
  local idx = zl.tensor(ids, 'i64'):view(B, T)
  collectgarbage()
  collectgarbage()
  zl.reset_peak_memory()
  local base = zl.memory().activations.current
  local _, loss = model(idx, idx)
  collectgarbage()
  local after = zl.memory().activations.current - base
  loss:backward()
  return after, zl.memory().activations.peak - base
end

local function shape(over)
  local c = { vocab_size = 1000, hidden_size = 128, intermediate_size = 384, num_hidden_layers = 2,
              num_attention_heads = 4, num_key_value_heads = 2, max_position_embeddings = 256 }
  for k, v in pairs(over) do c[k] = v end
  return c
end

test('estimate_within_20_percent', function()
  for _, case in ipairs({
    { shape {}, 2, 64 }, { shape { num_hidden_layers = 4 }, 2, 64 }, { shape { vocab_size = 8000 }, 2, 64 },
    { shape { intermediate_size = 768 }, 2, 64 }, { shape { num_attention_heads = 8 }, 1, 128 },
    { shape { num_key_value_heads = 4 }, 2, 64 },
  }) do
    local c, B, T = case[1], case[2], case[3]
    for _, dt in ipairs({ 'f32', 'bf16' }) do
      for _, ckpt in ipairs({ false, true }) do
        local after, peak = measure(c, B, T, dt, ckpt)
        local e = act.estimate(c, { batch = B, seq = T, precision = dt, checkpointing = ckpt })
        local what = string.format('V=%d L=%d M=%d H=%d KV=%d %dx%d %s%s', c.vocab_size, c.num_hidden_layers,
          c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, B, T, dt, ckpt and ' ckpt' or '')
        check(math.abs(e.peak - peak) <= 0.2 * peak, string.format('%s: peak %.2f MiB estimated, %.2f measured',
          what, e.peak / 2 ^ 20, peak / 2 ^ 20))
        check(math.abs(e.after_forward - after) <= 0.2 * after, string.format(
          '%s: after forward %.2f MiB estimated, %.2f measured', what, e.after_forward / 2 ^ 20, after / 2 ^ 20))
      end
    end
  end
end)

H.done()
