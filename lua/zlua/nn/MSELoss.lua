--[[ zlua.nn.MSELoss([{reduction = 'mean'}] or the reduction name):
  loss(input, target) = (input - target)^2, averaged, summed or kept. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local MSELoss = Module:extend('MSELoss')

function MSELoss:__init(opts)
  if type(opts) == 'string' then opts = { reduction = opts } end
  local o = check.options('MSELoss', opts, { reduction = true })
  self.reduction = o.reduction or 'mean'
  if self.reduction ~= 'mean' and self.reduction ~= 'sum' and self.reduction ~= 'none' then
    check.error(string.format("MSELoss: reduction must be 'mean', 'sum' or 'none', got %s",
                              tostring(self.reduction)))
  end
end

function MSELoss:forward(input, target)
  return zl.mse_loss(input, target, { reduction = self.reduction })
end

function MSELoss:extra_repr()
  return self.reduction ~= 'mean' and "reduction='" .. self.reduction .. "'" or ''
end

return MSELoss
