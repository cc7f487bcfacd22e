--[[ zlua.nn.Dropout([p = 0.5]): in training mode zeroes each element with
  probability p and scales the rest by 1/(1-p); the identity after eval(). ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Dropout = Module:extend('Dropout')

function Dropout:__init(p)
  self.p = check.probability('Dropout', 'p', p or 0.5)
end

function Dropout:forward(x)
  if not self.training or self.p == 0 then return x end
  return zl.dropout(x, self.p, true)
end

function Dropout:extra_repr() return string.format('p=%g', self.p) end

return Dropout
