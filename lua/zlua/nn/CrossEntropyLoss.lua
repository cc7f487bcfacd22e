--[[ zlua.nn.CrossEntropyLoss([{ignore_index = -100, reduction = 'mean',
  weight = nil, label_smoothing = 0}]): loss(logits, target) with logits
  [N, C] and target [N] of 0-based class ids, or logits [B, T, C] and target
  [B, T] (flattened to [B*T, C] and [B*T]; reduction 'none' gives [B, T]).
  Targets equal to ignore_index count for nothing and are left out of the
  mean. weight [C] (a buffer: saved with the model, moved with it, never
  trained) scales each class's loss, and the mean divides by the targets'
  weights summed; label_smoothing in [0, 1] mixes each target with the
  uniform distribution, as PyTorch's. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local CrossEntropyLoss = Module:extend('CrossEntropyLoss')

local known = { ignore_index = true, reduction = true, weight = true, label_smoothing = true }

function CrossEntropyLoss:__init(opts)
  local o = check.options('CrossEntropyLoss', opts, known)
  self.ignore_index = o.ignore_index or -100
  self.reduction = o.reduction or 'mean'
  if self.reduction ~= 'mean' and self.reduction ~= 'sum' and self.reduction ~= 'none' then
    check.error(string.format("CrossEntropyLoss: reduction must be 'mean', 'sum' or 'none', got %s",
                              tostring(self.reduction)))
  end
  self.label_smoothing = check.probability('CrossEntropyLoss', 'label_smoothing', o.label_smoothing or 0)
  if o.weight ~= nil then
    if not zl.is_tensor(o.weight) or o.weight:dim() ~= 1 then
      check.error('CrossEntropyLoss: weight must be a 1-d tensor of one weight per class, got '
                  .. (zl.is_tensor(o.weight) and 'shape {' .. table.concat(o.weight:shape(), ', ') .. '}'
                      or type(o.weight)))
    end
    self:register_buffer('weight', o.weight)
  end
end

function CrossEntropyLoss:forward(logits, target)
  local o = { ignore_index = self.ignore_index, reduction = self.reduction, weight = self.weight,
              label_smoothing = self.label_smoothing }
  if logits:dim() <= 2 then return zl.cross_entropy(logits, target, o) end
  local shape = target:shape()
  local loss = zl.cross_entropy(logits:reshape(-1, logits:size(-1)), target:reshape(-1), o)
  if self.reduction == 'none' then return loss:reshape(shape) end
  return loss
end

function CrossEntropyLoss:extra_repr()
  local parts = {}
  if self.ignore_index ~= -100 then parts[#parts + 1] = 'ignore_index=' .. self.ignore_index end
  if self.reduction ~= 'mean' then parts[#parts + 1] = "reduction='" .. self.reduction .. "'" end
  if self.label_smoothing ~= 0 then parts[#parts + 1] = 'label_smoothing=' .. self.label_smoothing end
  return table.concat(parts, ', ')
end

return CrossEntropyLoss
