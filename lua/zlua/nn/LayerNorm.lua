--[[ zlua.nn.LayerNorm(normalized_shape, eps = 1e-5, bias = true), the last two optional:
  normalises over the trailing dims given by normalized_shape (a size or a
  table of sizes), then scales by weight (ones) and shifts by bias (zeros). ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local LayerNorm = Module:extend('LayerNorm')

function LayerNorm:__init(normalized_shape, eps, bias)
  local shape = type(normalized_shape) == 'table' and normalized_shape or { normalized_shape }
  if #shape == 0 then check.error('LayerNorm: normalized_shape must not be empty') end
  self.normalized_shape = {}
  for i, n in ipairs(shape) do
    self.normalized_shape[i] = check.positive_int('LayerNorm', 'normalized_shape', n)
  end
  if eps ~= nil and (type(eps) ~= 'number' or eps <= 0) then
    check.error(string.format('LayerNorm: eps must be a positive number, got %s', tostring(eps)))
  end
  self.eps = eps or 1e-5
  self.weight = zl.ones(self.normalized_shape)
  if bias ~= false then self.bias = zl.zeros(self.normalized_shape) end
end

function LayerNorm:forward(x)
  return zl.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
end

function LayerNorm:extra_repr()
  local ns = self.normalized_shape
  local s = #ns == 1 and tostring(ns[1]) or '{' .. table.concat(ns, ', ') .. '}'
  s = s .. string.format(', eps=%g', self.eps)
  if not self.bias then s = s .. ', bias=false' end
  return s
end

return LayerNorm
