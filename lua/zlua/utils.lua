--[[ zlua.utils: DeepSpeed's accessors of a parameter's partitioned state
  (deepspeed.utils): its gradient, f32 master and optimizer state, whole
  (safe_get_full_*, safe_set_full_*) or this rank's part (safe_get_local_*,
  safe_set_local_*), wherever the engine keeps them (partitioned over the
  ranks, on the device, on NVMe). The engine's C calls do the work
  (zl_zero_full_grad and the rest, zlua/zero.h).

  local utils = require 'zlua.utils'
  engine:backward(loss)
  local g = utils.safe_get_full_grad(model.fc.weight)       -- before engine:step()
  engine:step()
  local m = utils.safe_get_full_optimizer_state(model.fc.weight, 'exp_avg')

  The full forms and every setter are collective: every rank calls them. ]]

local zl = require 'zlua'
local registry = require 'zlua.zero.registry'

local fmt = string.format

local utils = {}

-- The ZeRO state owning p, or an error naming why there is none.
local function owner(fn, p)
  if not zl.is_tensor(p) then zl.raise(fmt('%s: expected a parameter tensor, got %s', fn, type(p))) end
  local r = registry.get(p)
  if r and r.state then return r.state end
  if not p:requires_grad() then
    zl.raise(fmt('%s: the parameter is frozen (requires_grad false): no engine keeps a gradient, master or '
      .. 'optimizer state for it', fn))
  end
  zl.raise(fmt('%s: the tensor is not a parameter of an engine with an optimizer (zlua.initialize)', fn))
end

local function key_of(fn, key)
  if type(key) ~= 'string' then
    zl.raise(fmt("%s: the state key must be a string such as 'exp_avg', got %s", fn, type(key)))
  end
  return key
end

local function value_of(fn, t)
  if not zl.is_tensor(t) then zl.raise(fmt('%s: the value must be a tensor, got %s', fn, type(t))) end
  return t
end

--- utils.safe_get_full_grad(p): p's whole gradient as the step will use it:
--- reduced over the ranks (their mean), accumulated over the micro-steps,
--- divided by the loss scale, not clipped. It exists from the end of
--- engine:backward until engine:step.
function utils.safe_get_full_grad(p) return owner('safe_get_full_grad', p):get(p, 'grad', true) end

--- utils.safe_get_full_fp32_param(p): p's whole f32 master weight.
function utils.safe_get_full_fp32_param(p) return owner('safe_get_full_fp32_param', p):get(p, 'fp32', true) end

--- utils.safe_get_full_optimizer_state(p, key): p's whole optimizer state
--- key ('exp_avg', 'exp_avg_sq' for Adam and AdamW; 'momentum_buffer' for SGD).
function utils.safe_get_full_optimizer_state(p, key)
  local fn = 'safe_get_full_optimizer_state'
  return owner(fn, p):get(p, key_of(fn, key), true)
end

--- utils.safe_set_full_fp32_param(p, t): p's master becomes t (p's shape);
--- the working weights (half precision too) follow on every rank.
function utils.safe_set_full_fp32_param(p, t)
  local fn = 'safe_set_full_fp32_param'
  owner(fn, p):set(p, 'fp32', value_of(fn, t), true)
end

--- utils.safe_set_full_optimizer_state(p, t, key): p's state key becomes t.
function utils.safe_set_full_optimizer_state(p, t, key)
  local fn = 'safe_set_full_optimizer_state'
  owner(fn, p):set(p, key_of(fn, key), value_of(fn, t), true)
end

--- utils.safe_get_local_grad(p): this rank's part of p's gradient: the
--- elements of the flattened parameter it owns (1-d, maybe empty).
function utils.safe_get_local_grad(p) return owner('safe_get_local_grad', p):get(p, 'grad', false) end

--- utils.safe_get_local_fp32_param(p): this rank's part of p's master.
function utils.safe_get_local_fp32_param(p) return owner('safe_get_local_fp32_param', p):get(p, 'fp32', false) end

--- utils.safe_get_local_optimizer_state(p, key): this rank's part of p's state key.
function utils.safe_get_local_optimizer_state(p, key)
  local fn = 'safe_get_local_optimizer_state'
  return owner(fn, p):get(p, key_of(fn, key), false)
end

--- utils.safe_set_local_fp32_param(p, t): this rank's part of p's master
--- becomes t (1-d, that part's length); every rank calls it with its part.
function utils.safe_set_local_fp32_param(p, t)
  local fn = 'safe_set_local_fp32_param'
  owner(fn, p):set(p, 'fp32', value_of(fn, t), false)
end

--- utils.safe_set_local_optimizer_state(p, t, key): this rank's part of p's state key becomes t.
function utils.safe_set_local_optimizer_state(p, t, key)
  local fn = 'safe_set_local_optimizer_state'
  owner(fn, p):set(p, key_of(fn, key), value_of(fn, t), false)
end

return utils
