--[[ zlua.nn.Flatten(start_dim = 2, end_dim = -1), both optional: merges dims
  start_dim..end_dim (1-based) into one; the default keeps the batch dim. ]]

local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Flatten = Module:extend('Flatten')

function Flatten:__init(start_dim, end_dim)
  self.start_dim = start_dim or 2
  self.end_dim = end_dim or -1
  for what, d in pairs({ start_dim = self.start_dim, end_dim = self.end_dim }) do
    if math.type(d) ~= 'integer' or d == 0 then
      check.error(string.format('Flatten: %s must be a non-zero integer (dims are 1-based), got %s',
                                what, tostring(d)))
    end
  end
end

function Flatten:forward(x)
  return x:flatten(self.start_dim, self.end_dim)
end

function Flatten:extra_repr()
  if self.end_dim == -1 then return 'start_dim=' .. self.start_dim end
  return string.format('start_dim=%d, end_dim=%d', self.start_dim, self.end_dim)
end

return Flatten
