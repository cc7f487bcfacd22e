--[[ zlua.nn.LinearLoRA(linear, dim [, alpha = 1, dropout = 0]): a Linear
  layer with a low-rank update, y = x W^T + b + (alpha/dim) B A dropout(x),
  taking over `linear`'s weight W [out, in] and bias b (frozen) and adding
  A [dim, in] (uniform in +-1/sqrt(in), kaiming_uniform with a = sqrt(5) as
  DeepSpeed-Chat) and B [out, dim] (zeros, so the layer starts as `linear`).
  fuse() folds the update into W (for export or inference), unfuse() takes
  it out again. zlua.lora converts a model's layers. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local Dropout = require 'zlua.nn.Dropout'
local check = require 'zlua.nn.check'
local zero = require 'zlua.zero'

local fmt = string.format

local LinearLoRA = Module:extend('LinearLoRA')

function LinearLoRA:__init(linear, dim, alpha, dropout)
  if type(linear) ~= 'table' or linear.in_features == nil or linear.weight == nil then
    check.error('LinearLoRA: expected a Linear layer to adapt, got ' .. type(linear))
  end
  local r = check.positive_int('LinearLoRA', 'dim', dim)
  alpha = alpha or 1
  if type(alpha) ~= 'number' or alpha <= 0 then
    check.error(fmt('LinearLoRA: alpha must be a positive number, got %s', tostring(alpha)))
  end
  local n_in, n_out = linear.in_features, linear.out_features
  self.in_features, self.out_features, self.dim, self.alpha = n_in, n_out, r, alpha
  self.scaling = alpha / r
  self.fused = false
  self.weight = linear.weight
  if linear.bias then self.bias = linear.bias end
  self.lora_A = zl.empty(r, n_in):uniform_(-1 / math.sqrt(n_in), 1 / math.sqrt(n_in))
  self.lora_B = zl.zeros(n_out, r)
  self.lora_dropout = Dropout(dropout or 0)
  self.weight:requires_grad(false)
  if self.bias then self.bias:requires_grad(false) end
end

function LinearLoRA:forward(x)
  local y = zl.linear(x, self.weight, self.bias)
  if self.fused then return y end
  local update = zl.linear(zl.linear(self.lora_dropout(x), self.lora_A), self.lora_B)
  return y + update * self.scaling
end

-- W += sign * scaling * B A, outside autograd, with W (and A, B) whole when
-- ZeRO-3 partitions them; rank 0's result is kept on every rank.
local function merge(self, sign)
  local params = { self.weight, self.lora_A, self.lora_B }
  zero.GatheredParameters(params, function()
    zl.no_grad(function()
      local delta = self.lora_B:float():matmul(self.lora_A:float()) * (sign * self.scaling)
      self.weight:copy_((self.weight:float() + delta):to(self.weight:dtype()))
    end)
  end, 0)
end

--- lora:fuse(): W gets the update folded in and forward skips the low-rank
--- branch (DeepSpeed-Chat's fuse_lora_weight); a no-op when fused already.
function LinearLoRA:fuse()
  if not self.fused then
    merge(self, 1)
    self.fused = true
  end
  return self
end

--- lora:unfuse(): the inverse of fuse() (to float rounding).
function LinearLoRA:unfuse()
  if self.fused then
    merge(self, -1)
    self.fused = false
  end
  return self
end

function LinearLoRA:extra_repr()
  return fmt('%d -> %d, dim=%d, alpha=%g%s%s', self.in_features, self.out_features, self.dim, self.alpha,
             self.bias and '' or ', bias=false', self.fused and ', fused' or '')
end

return LinearLoRA
