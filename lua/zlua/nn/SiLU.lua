--[[ zlua.nn.SiLU(): x * sigmoid(x), the "swish" of LLaMA's feed-forward
  layers (torch.nn.SiLU). No parameters. ]]

local Module = require 'zlua.nn.Module'

local SiLU = Module:extend('SiLU')

function SiLU:forward(x) return x:silu() end

return SiLU
