--[[ zlua.nn.MaxPool2d(kernel_size, stride = kernel_size, padding = 0), the last two optional:
  the maximum over each window of x [N, C, H, W]; sizes are a number or
  {h, w}, and the second argument may be an options table {stride =, padding =}. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local MaxPool2d = Module:extend('MaxPool2d')

function MaxPool2d:__init(kernel_size, stride, padding)
  if type(stride) == 'table' and (stride.stride ~= nil or stride.padding ~= nil) then
    local o = check.options('MaxPool2d', stride, { stride = true, padding = true })
    stride, padding = o.stride, o.padding
  end
  local kh, kw = check.pair('MaxPool2d', 'kernel_size', kernel_size, 1)
  local sh, sw = check.pair('MaxPool2d', 'stride', stride or { kh, kw }, 1)
  local ph, pw = check.pair('MaxPool2d', 'padding', padding or 0, 0)
  self.kernel_size, self.stride, self.padding = { kh, kw }, { sh, sw }, { ph, pw }
end

function MaxPool2d:forward(x)
  return zl.max_pool2d(x, self.kernel_size, { stride = self.stride, padding = self.padding })
end

local function hw(p) return p[1] .. 'x' .. p[2] end

function MaxPool2d:extra_repr()
  local k, s, p = self.kernel_size, self.stride, self.padding
  local out = hw(k)
  if s[1] ~= k[1] or s[2] ~= k[2] then out = out .. ', stride=' .. hw(s) end
  if p[1] ~= 0 or p[2] ~= 0 then out = out .. ', padding=' .. hw(p) end
  return out
end

return MaxPool2d
