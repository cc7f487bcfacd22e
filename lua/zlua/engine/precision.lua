--[[ zlua.engine.precision: what bf16 and fp16 change in a training step
  besides the working dtype of the ZeRO buffers (zlua.zero.state): inputs
  cast to the working dtype (bf16), the fp16 loss scale and its dynamic
  scaler, and the parameters outside the optimizer (frozen ones, or all of
  them without an optimizer) turned into half-precision copies. On a CPU
  without bf16 dot products a bf16 matmul widens both operands to f32, so
  there bf16 keeps the weights and gradients in bf16 and the activations in
  f32: inputs are not cast and embeddings give f32, which costs one widening
  per weight use instead of a rounding and a widening per activation. ]]

local zl = require 'zlua'
local Embedding = require 'zlua.nn.Embedding'
local Module = require 'zlua.nn.Module'
local notices = require 'zlua.engine.notices'
local core = zl.core

local precision = {}
local P = {}
P.__index = P

--- precision.half(cfg): the working dtype of the checked config's bf16 and fp16 blocks,
--- 'bf16' or 'f16', or nil for f32 (zlua/ds_config.h reads it for C hosts too).
function precision.half(cfg)
  return cfg.bf16.enabled and 'bf16' or cfg.fp16.enabled and 'f16' or nil
end

--- precision.new(cfg, module, device, rank): device as zlua.engine.accelerator chose it.
function precision.new(cfg, module, device, rank)
  local self = setmetatable({}, P)
  self.mode = cfg.bf16.enabled and 'bf16' or cfg.fp16.enabled and 'fp16' or 'f32'
  self.half = precision.half(cfg)
  self.module = module
  if self.mode == 'fp16' then self.scaler = core.loss_scaler_new(cfg.fp16) end
  self.cast = self.mode == 'bf16'
  if self.mode == 'bf16' and device == 'cpu' and not core.bf16_dot_products() then
    self.cast = false
    for _, m in ipairs(module:modules()) do
      if Module.is_instance(m, Embedding) then m.output_dtype = 'f32' end
    end
    notices.once(rank, 'bf16: this CPU has no bf16 dot products (AVX512-BF16 or AMX), so weights and gradients '
      .. 'are bf16 and activations f32 (bf16 ones would only add conversions here)')
  end
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
