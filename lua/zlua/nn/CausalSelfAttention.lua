--[[ zlua.nn.CausalSelfAttention{n_embd =, n_head =, dropout = 0, bias = true}:
  multi-head self-attention in which position t sees positions 1..t only.
  x [B, T, C] -> qkv (one Linear C -> 3C) -> n_head heads of C/n_head ->
  attention -> proj (Linear C -> C) -> dropout. A cache table keeps the keys
  and values of earlier calls, so generation feeds only the new positions. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local Dropout = require 'zlua.nn.Dropout'
local check = require 'zlua.nn.check'

local CausalSelfAttention = Module:extend('CausalSelfAttention')

local known = { n_embd = true, n_head = true, dropout = true, bias = true }

function CausalSelfAttention:__init(cfg)
  local o = check.options('CausalSelfAttention', cfg, known)
  local c = check.positive_int('CausalSelfAttention', 'n_embd', o.n_embd)
  local h = check.positive_int('CausalSelfAttention', 'n_head', o.n_head)
  if c % h ~= 0 then
    check.error(string.format('CausalSelfAttention: n_embd (%d) must be a multiple of n_head (%d)', c, h))
  end
  self.n_embd, self.n_head = c, h
  self.dropout = check.probability('CausalSelfAttention', 'dropout', o.dropout or 0)
  self.qkv = Linear(c, 3 * c, o.bias ~= false)
  self.proj = Linear(c, c, o.bias ~= false)
  self.attn_drop = Dropout(self.dropout)
  self.resid_drop = Dropout(self.dropout)
end

-- [tq, tk], true where key j lies in the future of query i, the queries being
-- the last tq of tk positions. Made on the host (integer comparisons run
-- there) and moved to the scores' device.
local function future_mask(tq, tk)
  return zl.arange(tk):view(1, tk):gt(zl.arange(tk - tq, tk):view(tq, 1))
end

--- attn(x [, cache]): x [B, T, C] -> [B, T, C]. With a cache table (empty {}
--- at first), x holds the positions after those of the earlier calls: their
--- keys and values come from cache.k, cache.v [B, n_head, T_past, C/n_head],
--- which grow by T.
function CausalSelfAttention:forward(x, cache)
  if x:dim() ~= 3 or x:size(3) ~= self.n_embd then
    check.error(string.format('CausalSelfAttention: expected input [B, T, %d], got [%s]', self.n_embd,
                              table.concat(x:shape(), ', ')))
  end
  local b, t, c = x:size(1), x:size(2), self.n_embd
  local h = self.n_head
  local d = c // h
  local qkv = self.qkv(x)
  local function heads(i) return qkv:narrow(3, i * c + 1, c):reshape(b, t, h, d):transpose(2, 3) end
  local q, k, v = heads(0), heads(1), heads(2)
  if cache then
    if cache.k then k, v = zl.cat({ cache.k, k }, 3), zl.cat({ cache.v, v }, 3) end
    cache.k, cache.v = k, v
  end
  local tk = k:size(3)
  local y
  if (self.training and self.dropout > 0) or (t > 1 and tk > t) then
    -- The fused kernel has no dropout on the attention weights and masks
    -- only square scores: spell it out.
    local att = q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(d))
    att = att:masked_fill(future_mask(t, tk):to(att:device()), -math.huge):softmax(-1)
    y = self.attn_drop(att):matmul(v)
  else
    -- One query after cached keys sees them all: no mask.
    y = zl.attention(q, k, v, { causal = tk == t })
  end
  y = y:transpose(2, 3):reshape(b, t, c)
  return self.resid_drop(self.proj(y))
end

function CausalSelfAttention:extra_repr()
  return string.format('n_embd=%d, n_head=%d', self.n_embd, self.n_head)
end

return CausalSelfAttention
