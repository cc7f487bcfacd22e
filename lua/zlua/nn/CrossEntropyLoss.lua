--[[ zlua.nn.CrossEntropyLoss([{ignore_index = -100, reduction = 'mean'}]):
  loss(logits, target) with logits [N, C] and target [N] of 0-based class
  ids, or logits [B, T, C] and target [B, T] (flattened to [B*T, C] and
  [B*T]; reduction 'none' gives [B, T]). Targets equal to ignore_index count
  for nothing and are left out of the mean. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local CrossEntropyLoss = Module:extend('CrossEntropyLoss')

local known = { ignore_index = true, reduction = true }

function CrossEntropyLoss:__init(opts)
  local o = check.options('CrossEntropyLoss', opts, known)
  self.ignore_index = o.ignore_index or -100
  self.reduction = o.reduction or 'mean'
  if self.reduction ~= 'mean' and self.reduction ~= 'sum' and self.reduction ~= 'none' then
    check.error(string.format("CrossEntropyLoss: reduction must be 'mean', 'sum' or 'none', got %s",
                              tostring(self.reduction)))
  end
end

function CrossEntropyLoss:forward(logits, target)
  local o = { ignore_index = self.ignore_index, reduction = self.reduction }
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
  return table.concat(parts, ', ')
end

return CrossEntropyLoss
