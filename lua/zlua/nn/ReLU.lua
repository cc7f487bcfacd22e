--[[ zlua.nn.ReLU(): max(x, 0) elementwise. ]]

local Module = require 'zlua.nn.Module'

local ReLU = Module:extend('ReLU')

function ReLU:forward(x) return x:relu() end

return ReLU
