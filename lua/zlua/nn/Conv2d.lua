--[[ zlua.nn.Conv2d(in_channels, out_channels, kernel_size [, {stride = 1,
  padding = 0, dilation = 1, groups = 1, bias = true}]): a 2-d convolution
  over x [N, C, H, W] with w [out, in / groups, kh, kw]; sizes are a number
  or {h, w}. groups splits the channels into that many independent
  convolutions (groups = in_channels: depthwise); both channel counts must
  be multiples of it. Initialised as PyTorch does: weight and bias uniform
  in +-1/sqrt(in / groups * kh * kw). ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Conv2d = Module:extend('Conv2d')

local known = { stride = true, padding = true, dilation = true, groups = true, bias = true }

function Conv2d:__init(in_channels, out_channels, kernel_size, opts)
  local o = check.options('Conv2d', opts, known)
  self.in_channels = check.positive_int('Conv2d', 'in_channels', in_channels)
  self.out_channels = check.positive_int('Conv2d', 'out_channels', out_channels)
  local kh, kw = check.pair('Conv2d', 'kernel_size', kernel_size, 1)
  local sh, sw = check.pair('Conv2d', 'stride', o.stride or 1, 1)
  local ph, pw = check.pair('Conv2d', 'padding', o.padding or 0, 0)
  local dh, dw = check.pair('Conv2d', 'dilation', o.dilation or 1, 1)
  local groups = check.positive_int('Conv2d', 'groups', o.groups or 1)
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    check.error(string.format('Conv2d: in_channels (%d) and out_channels (%d) must be multiples of groups (%d)',
                              in_channels, out_channels, groups))
  end
  self.kernel_size, self.stride, self.padding, self.dilation = { kh, kw }, { sh, sw }, { ph, pw }, { dh, dw }
  self.groups = groups
  local bound = 1 / math.sqrt(in_channels // groups * kh * kw)
  self.weight = zl.empty(out_channels, in_channels // groups, kh, kw):uniform_(-bound, bound)
  if o.bias ~= false then self.bias = zl.empty(out_channels):uniform_(-bound, bound) end
end

function Conv2d:forward(x)
  return zl.conv2d(x, self.weight, self.bias,
                   { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups })
end

local function hw(p) return p[1] == p[2] and tostring(p[1]) or p[1] .. 'x' .. p[2] end

function Conv2d:extra_repr()
  local s = string.format('%d -> %d, %dx%d', self.in_channels, self.out_channels,
                          self.kernel_size[1], self.kernel_size[2])
  if self.stride[1] ~= 1 or self.stride[2] ~= 1 then s = s .. ', stride=' .. hw(self.stride) end
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then s = s .. ', padding=' .. hw(self.padding) end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then s = s .. ', dilation=' .. hw(self.dilation) end
  if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
  if not self.bias then s = s .. ', bias=false' end
  return s
end

return Conv2d
