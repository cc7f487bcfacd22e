--[[ zlua.nn.Linear(in_features, out_features [, bias = true]): y = x w^T + b
  with w [out, in] and b [out], initialised as PyTorch does: both uniform in
  +-1/sqrt(in_features) (kaiming_uniform with a = sqrt(5)). ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Linear = Module:extend('Linear')

function Linear:__init(in_features, out_features, bias)
  self.in_features = check.positive_int('Linear', 'in_features', in_features)
  self.out_features = check.positive_int('Linear', 'out_features', out_features)
  local bound = 1 / math.sqrt(in_features)
  self.weight = zl.empty(out_features, in_features):uniform_(-bound, bound)
  if bias ~= false then self.bias = zl.empty(out_features):uniform_(-bound, bound) end
end

function Linear:forward(x)
  return zl.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return string.format('%d -> %d%s', self.in_features, self.out_features,
                       self.bias and '' or ', bias=false')
end

return Linear
