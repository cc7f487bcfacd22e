--[[ zlua.nn.GPT{vocab_size =, block_size =, n_layer =, n_head =, n_embd =,
  dropout = 0, bias = true}: a GPT-2 style language model. Token and position
  embeddings, n_layer pre-LN TransformerBlocks, a final LayerNorm and a head
  that shares its weight with the token embedding (the tensor appears once in
  parameters()). Initialised as GPT-2: every Linear and Embedding weight
  N(0, 0.02), biases 0, the residual projections N(0, 0.02/sqrt(2 n_layer)).

  local logits = model(idx)                 -- idx [B, T] i64 0-based ids -> [B, T, V]
  local logits, loss = model(idx, targets)  -- mean cross-entropy over B*T
  local out = model:generate(idx, 100, {temperature = 0.8, top_k = 10, seed = 1})
]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local Embedding = require 'zlua.nn.Embedding'
local LayerNorm = require 'zlua.nn.LayerNorm'
local Dropout = require 'zlua.nn.Dropout'
local ModuleList = require 'zlua.nn.ModuleList'
local TransformerBlock = require 'zlua.nn.TransformerBlock'
local check = require 'zlua.nn.check'
local zero = require 'zlua.zero'

local fmt = string.format

local GPT = Module:extend('GPT')

local known = { vocab_size = true, block_size = true, n_layer = true, n_head = true, n_embd = true,
                dropout = true, bias = true }

function GPT:__init(cfg)
  local o = check.options('GPT', cfg, known)
  local v = check.positive_int('GPT', 'vocab_size', o.vocab_size)
  local t = check.positive_int('GPT', 'block_size', o.block_size)
  local l = check.positive_int('GPT', 'n_layer', o.n_layer)
  local h = check.positive_int('GPT', 'n_head', o.n_head)
  local c = check.positive_int('GPT', 'n_embd', o.n_embd)
  local p = check.probability('GPT', 'dropout', o.dropout or 0)
  local bias = o.bias ~= false
  if c % h ~= 0 then check.error(fmt('GPT: n_embd (%d) must be a multiple of n_head (%d)', c, h)) end
  self.config = { vocab_size = v, block_size = t, n_layer = l, n_head = h, n_embd = c,
                  dropout = p, bias = bias }
  self.wte = Embedding(v, c)
  self.wpe = Embedding(t, c)
  self.drop = Dropout(p)
  local blocks = {}
  for i = 1, l do blocks[i] = TransformerBlock{ n_embd = c, n_head = h, dropout = p, bias = bias } end
  self.blocks = ModuleList(blocks)
  self.ln_f = LayerNorm(c, 1e-5, bias)
  self.lm_head = Linear(c, v, false)
  self.lm_head.weight = self.wte.weight

  -- In place on parameters, outside autograd; one parameter whole at a time
  -- when zlua.zero.Init has partitioned them.
  local function init(p, fn) zero.GatheredParameters({ p }, function() zl.no_grad(fn) end, 0) end
  self:apply(function(m)
    if Module.is_instance(m, Linear) then
      init(m.weight, function() m.weight:normal_(0, 0.02) end)
      if m.bias then init(m.bias, function() m.bias:zero_() end) end
    elseif Module.is_instance(m, Embedding) then
      init(m.weight, function() m.weight:normal_(0, 0.02) end)
    end
  end)
  local std = 0.02 / math.sqrt(2 * l)
  for _, block in ipairs(self.blocks) do
    for _, proj in ipairs(block:residual_projections()) do
      init(proj.weight, function() proj.weight:normal_(0, std) end)
    end
  end
end

--- model(idx [, targets]): logits [B, T, vocab_size] for 0-based token ids
--- idx [B, T] (T <= block_size); with targets [B, T], also the mean
--- cross-entropy loss (targets of -100 are ignored), taken in f32 whatever
--- the logits' dtype, as autocast does: a bf16 loss keeps 3 digits.
function GPT:forward(idx, targets)
  if not zl.is_tensor(idx) or idx:dim() ~= 2 then
    check.error(fmt('GPT: expected token ids [B, T], got %s',
                    zl.is_tensor(idx) and '[' .. table.concat(idx:shape(), ', ') .. ']' or type(idx)))
  end
  local b, t = idx:size(1), idx:size(2)
  if t > self.config.block_size then
    check.error(fmt('GPT: sequence length %d is longer than block_size %d', t, self.config.block_size))
  end
  local x = self.drop(self.wte(idx) + self.wpe(zl.arange(t, { device = idx:device() })))
  for _, block in ipairs(self.blocks) do
    if self.checkpointing then x = zl.checkpoint(block, x) else x = block(x) end
  end
  local logits = self.lm_head(self.ln_f(x))
  if targets == nil then return logits end
  local v = self.config.vocab_size
  local flat = logits:reshape(b * t, v)
  if flat:dtype() ~= 'f32' then flat = flat:float() end
  local loss = zl.cross_entropy(flat, targets:reshape(b * t))
  return logits, loss
end

--- model:gradient_checkpointing_enable() / _disable(): each TransformerBlock
--- computed again in backward (zl.checkpoint) instead of keeping its
--- activations; the gradients are the same bits. Returns the model.
function GPT:gradient_checkpointing_enable()
  self.checkpointing = true
  return self
end

function GPT:gradient_checkpointing_disable()
  self.checkpointing = false
  return self
end

-- One id (0-based) drawn from softmax(row) restricted to its top_k largest
-- entries; u is uniform in [0, 1).
local function sample(row, top_k, u)
  local cut = -math.huge
  if top_k and top_k < #row then
    local sorted = table.move(row, 1, #row, 1, {})
    table.sort(sorted, function(a, c) return a > c end)
    cut = sorted[top_k]
  end
  local hi = -math.huge
  for i = 1, #row do if row[i] > hi then hi = row[i] end end
  local w, total = {}, 0
  for i = 1, #row do
    w[i] = row[i] >= cut and math.exp(row[i] - hi) or 0
    total = total + w[i]
  end
  local target, acc = u * total, 0
  for i = 1, #row do
    acc = acc + w[i]
    if acc > target and w[i] > 0 then return i - 1 end
  end
  for i = #row, 1, -1 do if w[i] > 0 then return i - 1 end end
end

local gen_known = { temperature = true, top_k = true, seed = true, generator = true }

--- model:generate(idx [B, T], max_new_tokens [, {temperature = 1, top_k =,
--- seed =, generator =}]): idx with max_new_tokens sampled ids appended
--- ([B, T + max_new_tokens]). Each step sees the last block_size ids. Runs
--- without autograd and in eval mode (the modes are restored after); the
--- draws come from `generator`, else a zl.Generator(seed), else the global one.
function GPT:generate(idx, max_new_tokens, opts)
  local o = check.options('GPT.generate', opts, gen_known)
  local n = math.tointeger(max_new_tokens)
  if not n or n < 0 then
    check.error(fmt('GPT.generate: max_new_tokens must be a non-negative integer, got %s',
                    tostring(max_new_tokens)))
  end
  local temperature = o.temperature or 1
  if type(temperature) ~= 'number' or temperature <= 0 then
    check.error(fmt('GPT.generate: temperature must be a positive number, got %s', tostring(temperature)))
  end
  local top_k = o.top_k and math.tointeger(o.top_k)
  if o.top_k ~= nil and (not top_k or top_k < 1) then
    check.error(fmt('GPT.generate: top_k must be a positive integer, got %s', tostring(o.top_k)))
  end
  local gen = o.generator or (o.seed and zl.Generator(o.seed))
  local modes = {}
  for _, m in self:named_modules() do modes[m] = m.training end
  self:eval()
  local ok, res = pcall(zl.no_grad, function()
    local bs = self.config.block_size
    for _ = 1, n do
      local t = idx:size(2)
      local window = t > bs and idx:narrow(2, t - bs + 1, bs) or idx
      local last = self(window):select(2, -1)
      local rows = (last / temperature):float():totable()
      local u = zl.rand(#rows, gen):totable()
      local ids = {}
      for r = 1, #rows do ids[r] = { sample(rows[r], top_k, u[r]) } end
      idx = zl.cat({ idx, zl.tensor(ids, 'i64') }, 2)
    end
    return idx
  end)
  for m, mode in pairs(modes) do rawset(m, 'training', mode) end
  if not ok then error(res, 0) end
  return res
end

function GPT:extra_repr()
  local c = self.config
  return fmt('vocab_size=%d, block_size=%d, n_layer=%d, n_head=%d, n_embd=%d', c.vocab_size,
             c.block_size, c.n_layer, c.n_head, c.n_embd)
end

return GPT
