--[[ zlua.optim.Adam: Adam with L2 weight decay (torch.optim.Adam), or with
  decoupled decay when adam_w_mode is true (DeepSpeed's Adam from a config sets
  it). One fused C call per param group: a pass per parameter that reads p,
  g, m, v once and writes p, m, v (on a device, one launch for the group). ]]

local Optimizer = require 'zlua.optim.Optimizer'
local checks = require 'zlua.optim.checks'

local rules = {
  lr = checks.nonneg, betas = checks.betas, eps = checks.nonneg, weight_decay = checks.nonneg,
  adam_w_mode = checks.boolean, bias_correction = checks.boolean, amsgrad = function(where, key, v)
    if v then require('zlua').raise(where .. ': amsgrad is not supported (DeepSpeed\'s CPU Adam has none either)') end
  end,
}

local function make(name, adamw)
  local defaults = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = adamw and 1e-2 or 0,
    adam_w_mode = adamw, bias_correction = true, amsgrad = false }
  local cls = Optimizer.extend(name, defaults, function(where, key, v) rules[key](where, key, v) end)

  function cls:init_state(p)
    return { exp_avg = Optimizer.buffer(p), exp_avg_sq = Optimizer.buffer(p) }
  end

  function cls:update(items, group, scale, step)
    Optimizer.core.optim_adam(Optimizer.sets(items, 'exp_avg', 'exp_avg_sq'), {
      lr = group.lr, beta1 = group.betas[1], beta2 = group.betas[2], eps = group.eps,
      weight_decay = group.weight_decay, adamw_mode = group.adam_w_mode,
      bias_correction = group.bias_correction, step = step, grad_scale = scale })
  end
  return cls
end

return make
