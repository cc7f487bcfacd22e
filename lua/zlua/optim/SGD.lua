--[[ zlua.optim.SGD: torch.optim.SGD (momentum, dampening, nesterov, weight
  decay), one fused C call per param group (a pass per parameter; on a
  device one launch). ]]

local zl = require 'zlua'
local Optimizer = require 'zlua.optim.Optimizer'
local checks = require 'zlua.optim.checks'

local rules = { lr = checks.nonneg, momentum = checks.nonneg, dampening = checks.finite,
  weight_decay = checks.nonneg, nesterov = checks.boolean }

local SGD = Optimizer.extend('SGD', { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false },
  function(where, key, v) rules[key](where, key, v) end)

function SGD:add_param_group(g)
  Optimizer.add_param_group(self, g)
  local group = self.param_groups[#self.param_groups]
  if group.nesterov and (group.momentum <= 0 or group.dampening ~= 0) then
    zl.raise(string.format('SGD: nesterov needs momentum > 0 and dampening 0 (param group %d has momentum %s, dampening %s)',
      #self.param_groups, tostring(group.momentum), tostring(group.dampening)))
  end
end

function SGD:init_state(p)
  return { momentum_buffer = Optimizer.buffer(p) }
end

function SGD:update(items, group, scale, step)
  Optimizer.core.optim_sgd(Optimizer.sets(items, 'momentum_buffer', nil), {
    lr = group.lr, momentum = group.momentum, dampening = group.dampening,
    weight_decay = group.weight_decay, nesterov = group.nesterov, step = step, grad_scale = scale })
end

return SGD
