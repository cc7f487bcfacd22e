--[[ zlua.nn.Llama{vocab_size =, hidden_size =, intermediate_size =, num_hidden_layers =,
  num_attention_heads =, num_key_value_heads = num_attention_heads, head_dim = hidden_size /
  num_attention_heads, max_position_embeddings = 2048, rms_norm_eps = 1e-6, rope_theta = 10000,
  tie_word_embeddings = false, attention_bias = false, qkv_bias = attention_bias, mlp_bias = false,
  sliding_window = nil, model_type = 'llama'}:
  Hugging Face's LlamaForCausalLM (and Qwen2's: qkv_bias = true; Mistral's), with
  its names: embed_tokens, layers (LlamaDecoderLayer), norm, lm_head (the token
  embedding itself when tie_word_embeddings). Initialised as Hugging Face does:
  every Linear and Embedding weight N(0, 0.02), biases 0, norms 1.

  local logits = model(ids)                   -- ids [B, T] i64 0-based -> [B, T, V]
  local logits, loss = model(ids, targets)    -- mean cross-entropy (targets of -100 ignored)
  local logits = model(ids, {attention_mask = m, position_ids = p})
  local out = model:generate(ids, {max_new_tokens = 20, attention_mask = m})
  local model = nn.Llama.from_pretrained(dir) -- or nn.AutoModelForCausalLM.from_pretrained(dir)
]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local Embedding = require 'zlua.nn.Embedding'
local RMSNorm = require 'zlua.nn.RMSNorm'
local ModuleList = require 'zlua.nn.ModuleList'
local LlamaDecoderLayer = require 'zlua.nn.LlamaDecoderLayer'
local rope = require 'zlua.nn.rope'
local check = require 'zlua.nn.check'
local zero = require 'zlua.zero'

local fmt = string.format

local Llama = Module:extend('Llama')

local known = { vocab_size = true, hidden_size = true, intermediate_size = true, num_hidden_layers = true,
                num_attention_heads = true, num_key_value_heads = true, head_dim = true,
                max_position_embeddings = true, rms_norm_eps = true, rope_theta = true,
                tie_word_embeddings = true, attention_bias = true, qkv_bias = true, mlp_bias = true,
                sliding_window = true, model_type = true }

local function positive(what, v)
  if type(v) ~= 'number' or not (v > 0) or v == math.huge then
    check.error(fmt('Llama: %s must be a positive number, got %s', what, tostring(v)))
  end
  return v
end

function Llama:__init(cfg)
  local o = check.options('Llama', cfg, known)
  local c = {
    vocab_size = check.positive_int('Llama', 'vocab_size', o.vocab_size),
    hidden_size = check.positive_int('Llama', 'hidden_size', o.hidden_size),
    intermediate_size = check.positive_int('Llama', 'intermediate_size', o.intermediate_size),
    num_hidden_layers = check.positive_int('Llama', 'num_hidden_layers', o.num_hidden_layers),
    num_attention_heads = check.positive_int('Llama', 'num_attention_heads', o.num_attention_heads),
    max_position_embeddings = check.positive_int('Llama', 'max_position_embeddings',
                                                 o.max_position_embeddings or 2048),
    rms_norm_eps = positive('rms_norm_eps', o.rms_norm_eps or 1e-6),
    rope_theta = positive('rope_theta', o.rope_theta or 10000.0),
    tie_word_embeddings = o.tie_word_embeddings == true,
    attention_bias = o.attention_bias == true,
    mlp_bias = o.mlp_bias == true,
    model_type = o.model_type or 'llama',
  }
  c.num_key_value_heads = check.positive_int('Llama', 'num_key_value_heads',
                                             o.num_key_value_heads or c.num_attention_heads)
  if o.head_dim == nil and c.hidden_size % c.num_attention_heads ~= 0 then
    check.error(fmt('Llama: hidden_size (%d) must be a multiple of num_attention_heads (%d), or give head_dim',
                    c.hidden_size, c.num_attention_heads))
  end
  c.head_dim = check.positive_int('Llama', 'head_dim', o.head_dim or c.hidden_size // c.num_attention_heads)
  c.qkv_bias = o.qkv_bias
  if c.qkv_bias == nil then c.qkv_bias = c.attention_bias end
  if o.sliding_window ~= nil then c.sliding_window = check.positive_int('Llama', 'sliding_window', o.sliding_window) end
  -- generate reads these two as it reads GPT's.
  c.block_size = c.max_position_embeddings
  self.config = c
  self.supports_attention_mask = true
  self.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
  local layers = {}
  for i = 1, c.num_hidden_layers do layers[i] = LlamaDecoderLayer(c) end
  self.layers = ModuleList(layers)
  self.norm = RMSNorm(c.hidden_size, { eps = c.rms_norm_eps })
  self.lm_head = Linear(c.hidden_size, c.vocab_size, false)
  if c.tie_word_embeddings then self.lm_head.weight = self.embed_tokens.weight end
  rawset(self, 'rope', rope.new(c.head_dim, c.rope_theta))

  local function init(p, fn) zero.GatheredParameters({ p }, function() zl.no_grad(fn) end, 0) end
  self:apply(function(m)
    if Module.is_instance(m, Linear) then
      init(m.weight, function() m.weight:normal_(0, 0.02) end)
      if m.bias then init(m.bias, function() m.bias:zero_() end) end
    elseif Module.is_instance(m, Embedding) then
      init(m.weight, function() m.weight:normal_(0, 0.02) end)
    end
  end)
end

local function shape_of(t) return zl.is_tensor(t) and '[' .. table.concat(t:shape(), ', ') .. ']' or type(t) end

local forward_known = { attention_mask = true, position_ids = true }

--- model:forward_cached(ids [B, T] [, cache [, {attention_mask =, position_ids =}]]):
--- the logits [B, T, vocab_size] of ids placed after the cache.len positions
--- the cache (from new_cache) holds, whose keys and values they join.
--- attention_mask [B, cache.len + T] (1 for a token, 0 for padding; bool or
--- integer) hides padding; position_ids [B, T] (i64) default to
--- cache.len, cache.len + 1, ... in every row, as Hugging Face's.
function Llama:forward_cached(idx, cache, opts)
  local o = check.options('Llama', opts, forward_known)
  if not zl.is_tensor(idx) or idx:dim() ~= 2 then
    check.error(fmt('Llama: expected token ids [B, T], got %s', shape_of(idx)))
  end
  local c = self.config
  local b, t = idx:size(1), idx:size(2)
  local past = cache and cache.len or 0
  if c.sliding_window and past + t > c.sliding_window then
    check.error(fmt('Llama: sequence length %d is longer than sliding_window %d (zlua attends to whole sequences)',
                    past + t, c.sliding_window))
  end
  local mask
  if o.attention_mask ~= nil then
    local m = o.attention_mask
    if not zl.is_tensor(m) or m:dim() ~= 2 or m:size(1) ~= b or m:size(2) ~= past + t then
      check.error(fmt('Llama: attention_mask must be [%d, %d] (batch, cached + new positions), got %s', b,
                      past + t, shape_of(m)))
    end
    mask = m:gt(0):view(b, 1, 1, past + t):to(idx:device())
  end
  local pos = past
  if o.position_ids ~= nil then
    pos = o.position_ids
    if not zl.is_tensor(pos) or pos:dim() ~= 2 or pos:size(1) ~= b or pos:size(2) ~= t then
      check.error(fmt('Llama: position_ids must be [%d, %d], got %s', b, t, shape_of(pos)))
    end
  end
  local x = self.embed_tokens(idx)
  local cos, sin = self.rope:tables(pos, t, x:device(), x:dtype())
  for i, layer in ipairs(self.layers) do
    if self.checkpointing and not cache then x = zl.checkpoint(layer, x, cos, sin, nil, mask)
    else x = layer(x, cos, sin, cache and cache.layers[i], mask) end
  end
  if cache then cache.len = past + t end
  return self.lm_head(self.norm(x))
end

--- model(ids [, targets]) or model(ids, {attention_mask =, position_ids =}):
--- logits [B, T, vocab_size]; with targets [B, T] (aligned with the logits,
--- -100 ignored), also the mean cross-entropy, taken in f32 whatever the
--- logits' dtype.
function Llama:forward(idx, targets)
  if targets == nil or not zl.is_tensor(targets) then return self:forward_cached(idx, nil, targets) end
  local logits = self:forward_cached(idx)
  return logits, self:loss(logits, targets)
end

-- loss, gradient_checkpointing_enable/_disable, new_cache and generate.
require('zlua.nn.causal_lm').extend(Llama, 'layers')

--- Llama.from_pretrained(dir) reads Hugging Face files (config.json with
--- model_type llama, qwen2 or mistral; model.safetensors or its sharded
--- index); model:save_pretrained(dir [, {max_shard_size =}]) writes them.
--- See zlua.nn.llama_hf.
function Llama.from_pretrained(dir) return require('zlua.nn.llama_hf').load(Llama, dir) end
function Llama:save_pretrained(dir, opts) return require('zlua.nn.llama_hf').save(self, dir, opts) end

function Llama:extra_repr()
  local c = self.config
  return fmt('%s: vocab_size=%d, hidden_size=%d, layers=%d, heads=%d, kv_heads=%d%s', c.model_type,
             c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
             c.tie_word_embeddings and ', tied' or '')
end

return Llama
