--[[ zlua.nn.LlamaAttention{hidden_size =, num_heads =, num_kv_heads =, head_dim =,
  qkv_bias = false, o_bias = false}: Hugging Face LLaMA's self-attention
  (Qwen2's and Mistral's too): q_proj, k_proj and v_proj, rotary positions on
  queries and keys, causal grouped-query attention (num_kv_heads key/value
  heads serve num_heads query heads), o_proj. A cache table keeps the keys
  and values of earlier calls, num_kv_heads wide. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local check = require 'zlua.nn.check'

local fmt = string.format

local LlamaAttention = Module:extend('LlamaAttention')

local known = { hidden_size = true, num_heads = true, num_kv_heads = true, head_dim = true, qkv_bias = true,
                o_bias = true }

function LlamaAttention:__init(cfg)
  local o = check.options('LlamaAttention', cfg, known)
  local c = check.positive_int('LlamaAttention', 'hidden_size', o.hidden_size)
  local h = check.positive_int('LlamaAttention', 'num_heads', o.num_heads)
  local kv = check.positive_int('LlamaAttention', 'num_kv_heads', o.num_kv_heads or h)
  local d = check.positive_int('LlamaAttention', 'head_dim', o.head_dim or c // h)
  if h % kv ~= 0 then
    check.error(fmt('LlamaAttention: num_heads (%d) must be a multiple of num_kv_heads (%d)', h, kv))
  end
  if d % 2 ~= 0 then check.error(fmt('LlamaAttention: head_dim must be even for rotary positions, got %d', d)) end
  self.num_heads, self.num_kv_heads, self.head_dim = h, kv, d
  self.q_proj = Linear(c, h * d, o.qkv_bias == true)
  self.k_proj = Linear(c, kv * d, o.qkv_bias == true)
  self.v_proj = Linear(c, kv * d, o.qkv_bias == true)
  self.o_proj = Linear(h * d, c, o.o_bias == true)
end

--- attn(x, cos, sin [, cache [, mask]]): x [B, T, C] -> [B, T, C]; cos and
--- sin the rotary tables of x's positions ([B or 1, 1, T, head_dim]); mask
--- (bool, [B, 1, 1, T_past + T], true where a key may be seen) or nil. With
--- a cache table (empty {} at first), x's keys and values join those of the
--- earlier calls (cache.k, cache.v [B, num_kv_heads, T_past, head_dim]).
function LlamaAttention:forward(x, cos, sin, cache, mask)
  local b, t = x:size(1), x:size(2)
  local h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
  local q = zl.rotary(self.q_proj(x):view(b, t, h, d):transpose(2, 3), cos, sin)
  local k = zl.rotary(self.k_proj(x):view(b, t, kv, d):transpose(2, 3), cos, sin)
  local v = self.v_proj(x):view(b, t, kv, d):transpose(2, 3)
  if cache then
    if cache.k then k, v = zl.cat({ cache.k, k }, 3), zl.cat({ cache.v, v }, 3) end
    cache.k, cache.v = k, v
  end
  local y = zl.attention(q, k, v, { causal = true, mask = mask })
  return self.o_proj(y:transpose(2, 3):reshape(b, t, h * d))
end

function LlamaAttention:extra_repr()
  return fmt('num_heads=%d, num_kv_heads=%d, head_dim=%d', self.num_heads, self.num_kv_heads, self.head_dim)
end

return LlamaAttention
