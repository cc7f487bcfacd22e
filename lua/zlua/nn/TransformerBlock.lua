--[[ zlua.nn.TransformerBlock{n_embd =, n_head =, dropout = 0, bias = true,
  activation = 'gelu', eps = 1e-5}: a pre-LayerNorm transformer block,
    x = x + attn(ln1(x));  x = x + mlp(ln2(x))
  with causal self-attention and an MLP C -> 4C -> GELU -> C -> dropout; the
  GELU is exact ('gelu') or GPT-2's tanh approximation ('gelu_new'). ]]

local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local LayerNorm = require 'zlua.nn.LayerNorm'
local GELU = require 'zlua.nn.GELU'
local Dropout = require 'zlua.nn.Dropout'
local Sequential = require 'zlua.nn.Sequential'
local CausalSelfAttention = require 'zlua.nn.CausalSelfAttention'
local check = require 'zlua.nn.check'

local TransformerBlock = Module:extend('TransformerBlock')

local known = { n_embd = true, n_head = true, dropout = true, bias = true, activation = true, eps = true }
local activations = { gelu = 'none', gelu_new = 'tanh' }

function TransformerBlock:__init(cfg)
  local o = check.options('TransformerBlock', cfg, known)
  local c = check.positive_int('TransformerBlock', 'n_embd', o.n_embd)
  local bias = o.bias ~= false
  local act = activations[o.activation or 'gelu']
  if not act then
    check.error(string.format("TransformerBlock: activation must be 'gelu' or 'gelu_new', got %s",
                              tostring(o.activation)))
  end
  local eps = o.eps or 1e-5
  self.ln1 = LayerNorm(c, eps, bias)
  self.attn = CausalSelfAttention{ n_embd = o.n_embd, n_head = o.n_head, dropout = o.dropout, bias = o.bias }
  self.ln2 = LayerNorm(c, eps, bias)
  self.mlp = Sequential(Linear(c, 4 * c, bias), GELU(act), Linear(4 * c, c, bias), Dropout(o.dropout or 0))
end

--- block(x [, cache]): x [B, T, C] -> [B, T, C]; cache as CausalSelfAttention's.
function TransformerBlock:forward(x, cache)
  x = x + self.attn(self.ln1(x), cache)
  return x + self.mlp(self.ln2(x))
end

--- The Linear layers whose output is added to the residual stream (GPT-2
--- initialises them with a smaller spread).
function TransformerBlock:residual_projections()
  return { self.attn.proj, self.mlp[3] }
end

return TransformerBlock
