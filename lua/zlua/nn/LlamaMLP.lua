--[[ zlua.nn.LlamaMLP(hidden_size, intermediate_size [, bias = false]): the
  gated feed-forward of LLaMA, Qwen2 and Mistral (SwiGLU):
  down_proj(silu(gate_proj(x)) * up_proj(x)). ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local check = require 'zlua.nn.check'

local LlamaMLP = Module:extend('LlamaMLP')

function LlamaMLP:__init(hidden_size, intermediate_size, bias)
  local c = check.positive_int('LlamaMLP', 'hidden_size', hidden_size)
  local m = check.positive_int('LlamaMLP', 'intermediate_size', intermediate_size)
  self.gate_proj = Linear(c, m, bias == true)
  self.up_proj = Linear(c, m, bias == true)
  self.down_proj = Linear(m, c, bias == true)
end

function LlamaMLP:forward(x)
  return self.down_proj(zl.silu(self.gate_proj(x)) * self.up_proj(x))
end

return LlamaMLP
