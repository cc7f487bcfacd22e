--[[ zlua.engine.precision: what bf16 and fp16 change in a training step
  besides the working dtype of the ZeRO buffers (zlua.zero.state): inputs
  cast to the working dtype (bf16), the fp16 loss scale and its dynamic
  scaler, and the parameters outside the optimizer (frozen ones, or all of
  them without an optimizer) turned into half-precision copies. ]]

local zl = require 'zlua'
local core = zl.core

local precision = {}
local P = {}
P.__index = P

function precision.new(cfg, module)
  local self = setmetatable({}, P)
  self.mode = cfg.bf16.enabled and 'bf16' or cfg.fp16.enabled and 'fp16' or 'f32'
  self.half = self.mode == 'bf16' and 'bf16' or self.mode == 'fp16' and 'f16' or nil
  self.module = module
  if self.mode == 'fp16' then self.scaler = core.loss_scaler_new(cfg.fp16) end
  self.cast = self.mode == 'bf16'
  return self
end

--- Parameters the ZeRO state does not own become half-precision copies.
function P:convert_rest()
  if not self.half then return end
  for _, p in ipairs(self.module:parameters()) do
    if p:dtype() == 'f32' and p:numel() > 0 then
      zl.no_grad(function() p:set_data(p:to(self.half)) end)
      p:set_category('params')
    end
  end
end

function P:cast_inputs(...)
  if not self.cast then return ... end
  local args = table.pack(...)
  for i = 1, args.n do
    local a = args[i]
    if zl.is_tensor(a) and a:dtype() == 'f32' then args[i] = a:to(self.half) end
  end
  return table.unpack(args, 1, args.n)
end

function P:loss_scale_value() return self.scaler and self.scaler:scale() or 1.0 end

function P:scale_loss(loss)
  if not self.scaler then return loss end
  return loss:float() * self:loss_scale_value()
end

function P:update_scale(overflow)
  if self.scaler then self.scaler:update(overflow) end
end

return precision
