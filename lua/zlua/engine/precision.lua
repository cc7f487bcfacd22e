--[[ zlua.engine.precision: what bf16 and fp16 change in a training step.
  Under mixed precision the model's parameters become half-precision working
  copies (same tensor objects: modules keep their references) and the
  optimizer updates f32 master copies, writing the rounded result back into
  the working copy in the same fused pass. Each backward's gradient of a
  working parameter is added into an f32 accumulator as soon as it is complete
  (a gradient-ready hook), so accumulation across micro-steps is in f32, as
  DeepSpeed's BF16_Optimizer does. fp16 also scales the loss by the dynamic
  loss scaler and skips a step whose gradients overflowed. In f32 nothing of
  this happens: the optimizer steps the parameters and their own gradients. ]]

local zl = require 'zlua'
local core = zl.core

local precision = {}
local P = {}
P.__index = P

function precision.new(cfg, module)
  local self = setmetatable({}, P)
  self.mode = cfg.bf16.enabled and 'bf16' or cfg.fp16.enabled and 'fp16' or 'f32'
  self.half = self.mode ~= 'f32' and self.mode or nil
  self.module = module
  self.masters, self.accs = {}, {}          -- by working parameter id
  self.pairs = {}                           -- {param, master} in optimizer order
  if self.mode == 'fp16' then self.scaler = core.loss_scaler_new(cfg.fp16) end
  self.cast = self.mode == 'bf16'
  if self.half then
    -- Parameters outside any optimizer (frozen, or no optimizer at all) still
    -- become working copies; attach() makes masters of the trained ones first.
    self.pending = module:parameters()
  end
  return self
end

-- One working parameter: its f32 master for the optimizer, its half data, and
-- the hook moving each backward's gradient into the f32 accumulator.
function P:make_master(p)
  local id = p:id()
  if self.masters[id] then return self.masters[id] end
  if p:dtype() ~= 'f32' then
    zl.raise(string.format('zlua.initialize: %s needs f32 parameters to make its f32 masters from, got %s',
      self.mode, p:dtype()))
  end
  local master = p:detach():clone()
  master:set_category('optimizer')
  zl.no_grad(function() p:set_data(p:to(self.half)) end)
  p:set_category('params')
  local accs = self.accs
  p:register_hook(function(t)
    local acc = accs[id]
    if not acc then
      acc = zl.zeros(t:shape())
      acc:set_category('grads')
      accs[id] = acc
    end
    acc:add_(t.grad)
    t.grad = nil
  end)
  self.masters[id] = master
  self.pairs[#self.pairs + 1] = { p, master }
  return master
end

--- Point the optimizer at the f32 masters of its parameters (mixed precision).
function P:attach(opt)
  if not self.half then return end
  for _, group in ipairs(opt.param_groups) do
    for i, p in ipairs(group.params) do
      local master = self:make_master(p)
      group.params[i] = master
      opt:set_half(master, p)
    end
  end
  self:convert_rest()
end

function P:convert_rest()
  for _, p in ipairs(self.pending or {}) do
    if p:dtype() == 'f32' then zl.no_grad(function() p:set_data(p:to(self.half)) end) end
  end
  self.pending = nil
end

function P:cast_inputs(...)
  if self.pending then self:convert_rest() end
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

-- The gradients the optimizer will read: the f32 accumulators under mixed
-- precision, the parameters' own otherwise.
function P:grads(opt)
  local out = {}
  if self.half then
    for _, pm in ipairs(self.pairs) do
      local acc = self.accs[pm[1]:id()]
      if acc then out[#out + 1] = acc end
    end
  else
    for _, g in ipairs(opt.param_groups) do
      for _, p in ipairs(g.params) do
        local gr = p.grad
        if gr then out[#out + 1] = gr end
      end
    end
  end
  return out
end

--- Overflow (fp16 only: inf or NaN anywhere) and the unscaled global L2 norm.
function P:check_grads(opt)
  local grads = self:grads(opt)
  local overflow = self.scaler ~= nil and core.grad_nonfinite(grads)
  if overflow then return true, math.huge end
  return false, math.sqrt(core.grad_norm_sq(grads)) / self:loss_scale_value()
end

function P:before_step()
  for _, pm in ipairs(self.pairs) do pm[2].grad = self.accs[pm[1]:id()] end
end

function P:update_scale(overflow)
  if self.scaler then self.scaler:update(overflow) end
end

function P:zero_grads(opt)
  if self.half then
    for _, pm in ipairs(self.pairs) do
      pm[2].grad = nil
      local acc = self.accs[pm[1]:id()]
      if acc then acc:zero_() end
    end
  end
  if opt then opt:zero_grad() end
end

--- After the masters were loaded: the working copies take their rounded values.
function P:sync_working()
  for _, pm in ipairs(self.pairs) do
    zl.no_grad(function() pm[1]:copy_(pm[2]) end)
  end
end

--- After only the working weights were loaded: the masters take their values.
function P:sync_masters()
  for _, pm in ipairs(self.pairs) do
    zl.no_grad(function() pm[2]:copy_(pm[1]) end)
  end
end

--- The f32 master of a working parameter (the parameter itself in f32).
function P:master_of(p)
  return self.masters[p:id()] or p
end

return precision
