--[[ zlua.nn.AvgPool2d(kernel_size [, {stride = kernel_size, padding = 0,
  count_include_pad = true}]): the mean over each window of x [N, C, H, W];
  sizes are a number or {h, w}. The padding counts as zeros in each mean,
  or is left out of its divisor when count_include_pad is false. As
  MaxPool2d, stride and padding may also come as the second and third
  arguments. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local AvgPool2d = Module:extend('AvgPool2d')

local known = { stride = true, padding = true, count_include_pad = true }

function AvgPool2d:__init(kernel_size, stride, padding)
  local count_include_pad = true
  if type(stride) == 'table' and next(stride) ~= nil and stride[1] == nil then
    local o = check.options('AvgPool2d', stride, known)
    stride, padding = o.stride, o.padding
    if o.count_include_pad ~= nil then count_include_pad = o.count_include_pad and true or false end
  end
  local kh, kw = check.pair('AvgPool2d', 'kernel_size', kernel_size, 1)
  local sh, sw = check.pair('AvgPool2d', 'stride', stride or { kh, kw }, 1)
  local ph, pw = check.pair('AvgPool2d', 'padding', padding or 0, 0)
  if 2 * ph > kh or 2 * pw > kw then
    check.error(string.format('AvgPool2d: padding (%d, %d) must be at most half the kernel size (%d, %d)',
                              ph, pw, kh, kw))
  end
  self.kernel_size, self.stride, self.padding = { kh, kw }, { sh, sw }, { ph, pw }
  self.count_include_pad = count_include_pad
end

function AvgPool2d:forward(x)
  return zl.avg_pool2d(x, self.kernel_size,
                       { stride = self.stride, padding = self.padding, count_include_pad = self.count_include_pad })
end

local function hw(p) return p[1] .. 'x' .. p[2] end

function AvgPool2d:extra_repr()
  local k, s, p = self.kernel_size, self.stride, self.padding
  local out = hw(k)
  if s[1] ~= k[1] or s[2] ~= k[2] then out = out .. ', stride=' .. hw(s) end
  if p[1] ~= 0 or p[2] ~= 0 then out = out .. ', padding=' .. hw(p) end
  if not self.count_include_pad then out = out .. ', count_include_pad=false' end
  return out
end

return AvgPool2d
