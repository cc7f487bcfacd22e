--[[ zlua.nn.GELU([approximate = 'none']): x * Phi(x) with the exact erf,
  or the tanh approximation when approximate is 'tanh' (or true). ]]

local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local GELU = Module:extend('GELU')

function GELU:__init(approximate)
  if approximate == true then approximate = 'tanh' end
  if approximate == nil or approximate == false then approximate = 'none' end
  if approximate ~= 'none' and approximate ~= 'tanh' then
    check.error(string.format("GELU: approximate must be 'none' or 'tanh', got %s", tostring(approximate)))
  end
  self.approximate = approximate
end

function GELU:forward(x) return x:gelu(self.approximate == 'tanh') end

function GELU:extra_repr()
  return self.approximate == 'tanh' and "approximate='tanh'" or ''
end

return GELU
