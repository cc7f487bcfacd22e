--[[ zlua.nn.GPT{vocab_size =, block_size =, n_layer =, n_head =, n_embd =,
  dropout = 0, bias = true, activation = 'gelu', layer_norm_epsilon = 1e-5}:
  a GPT-2 style language model ('gelu_new' is GPT-2's tanh GELU). Token and
  position embeddings, n_layer pre-LN TransformerBlocks, a final LayerNorm and a head
  that shares its weight with the token embedding (the tensor appears once in
  parameters()). Initialised as GPT-2: every Linear and Embedding weight
  N(0, 0.02), biases 0, the residual projections N(0, 0.02/sqrt(2 n_layer)).

  local logits = model(idx)                 -- idx [B, T] i64 0-based ids -> [B, T, V]
  local logits, loss = model(idx, targets)  -- mean cross-entropy over B*T
  local out = model:generate(idx, {max_new_tokens = 100, do_sample = true, top_p = 0.9, seed = 1})
  local model = GPT.from_pretrained('gpt2/')  -- Hugging Face files; model:save_pretrained(dir)
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
                dropout = true, bias = true, activation = true, layer_norm_epsilon = true }

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
  local act = o.activation or 'gelu'
  local eps = o.layer_norm_epsilon or 1e-5
  self.config = { vocab_size = v, block_size = t, n_layer = l, n_head = h, n_embd = c,
                  dropout = p, bias = bias, activation = act, layer_norm_epsilon = eps }
  self.wte = Embedding(v, c)
  self.wpe = Embedding(t, c)
  self.drop = Dropout(p)
  local blocks = {}
  for i = 1, l do
    blocks[i] = TransformerBlock{ n_embd = c, n_head = h, dropout = p, bias = bias, activation = act, eps = eps }
  end
  self.blocks = ModuleList(blocks)
  self.ln_f = LayerNorm(c, eps, bias)
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

--- model:forward_cached(idx [B, T] [, cache]): the logits [B, T, vocab_size]
--- of idx placed after the cache.len positions the cache (from new_cache)
--- holds; their keys and values join the cache. Without a cache, model(idx).
function GPT:forward_cached(idx, cache)
  if not zl.is_tensor(idx) or idx:dim() ~= 2 then
    check.error(fmt('GPT: expected token ids [B, T], got %s',
                    zl.is_tensor(idx) and '[' .. table.concat(idx:shape(), ', ') .. ']' or type(idx)))
  end
  local t = idx:size(2)
  local past = cache and cache.len or 0
  if past + t > self.config.block_size then
    check.error(fmt('GPT: sequence length %d is longer than block_size %d', past + t, self.config.block_size))
  end
  local x = self.drop(self.wte(idx) + self.wpe(zl.arange(past, past + t, { device = idx:device() })))
  for i, block in ipairs(self.blocks) do
    -- A cache is for generation, without autograd: nothing to recompute.
    if self.checkpointing and not cache then x = zl.checkpoint(block, x) else x = block(x, cache and cache.layers[i]) end
  end
  if cache then cache.len = past + t end
  return self.lm_head(self.ln_f(x))
end

--- model(idx [, targets]): logits [B, T, vocab_size] for 0-based token ids
--- idx [B, T] (T <= block_size); with targets [B, T], also the mean
--- cross-entropy loss (targets of -100 are ignored), taken in f32 whatever
--- the logits' dtype, as autocast does: a bf16 loss keeps 3 digits.
function GPT:forward(idx, targets)
  local logits = self:forward_cached(idx)
  if targets == nil then return logits end
  return logits, self:loss(logits, targets)
end

-- loss, gradient_checkpointing_enable/_disable, new_cache and generate.
require('zlua.nn.causal_lm').extend(GPT, 'blocks')

--- GPT.from_pretrained(dir): a model from Hugging Face GPT-2 files (config.json
--- and model.safetensors or its sharded index); model:save_pretrained(dir [,
--- {max_shard_size = '5GB'}]) writes them. See zlua.nn.gpt2_hf.
function GPT.from_pretrained(dir) return require('zlua.nn.gpt2_hf').load(GPT, dir) end
function GPT:save_pretrained(dir, opts) return require('zlua.nn.gpt2_hf').save(self, dir, opts) end

function GPT:extra_repr()
  local c = self.config
  return fmt('vocab_size=%d, block_size=%d, n_layer=%d, n_head=%d, n_embd=%d%s', c.vocab_size,
             c.block_size, c.n_layer, c.n_head, c.n_embd,
             c.activation == 'gelu' and '' or ', activation=' .. c.activation)
end

return GPT
