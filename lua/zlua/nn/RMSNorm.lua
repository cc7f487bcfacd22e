--[[ zlua.nn.RMSNorm(normalized_shape [, {eps =, dtype =}]): root-mean-square
  norm over the trailing dims given by normalized_shape (a size or a table of
  sizes), times weight (ones, of dtype: f32 unless given), as torch's
  nn.RMSNorm and Hugging Face's LlamaRMSNorm; eps nil is f32's machine
  epsilon, as torch takes it. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local RMSNorm = Module:extend('RMSNorm')

local known = { eps = true, dtype = true }

function RMSNorm:__init(normalized_shape, opts)
  local o = check.options('RMSNorm', opts, known)
  local shape = type(normalized_shape) == 'table' and normalized_shape or { normalized_shape }
  if #shape == 0 then check.error('RMSNorm: normalized_shape must not be empty') end
  self.normalized_shape = {}
  for i, n in ipairs(shape) do
    self.normalized_shape[i] = check.positive_int('RMSNorm', 'normalized_shape', n)
  end
  if o.eps ~= nil and (type(o.eps) ~= 'number' or not (o.eps >= 0)) then
    check.error(string.format('RMSNorm: eps must be a number >= 0, got %s', tostring(o.eps)))
  end
  self.eps = o.eps
  self.weight = zl.ones(self.normalized_shape, o.dtype)
end

function RMSNorm:forward(x)
  return zl.rms_norm(x, self.normalized_shape, self.weight, self.eps)
end

function RMSNorm:extra_repr()
  local ns = self.normalized_shape
  local s = #ns == 1 and tostring(ns[1]) or '{' .. table.concat(ns, ', ') .. '}'
  if self.eps then s = s .. string.format(', eps=%g', self.eps) end
  return s
end

return RMSNorm
