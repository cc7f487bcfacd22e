--[[ zlua.optim.Lamb: DeepSpeed's FusedLamb (trust ratio |p| / |u| clamped to
  [min_coeff, max_coeff]), two fused C passes per parameter, one call per
  param group. The last trust ratio of each parameter is kept in its state
  as `lamb_coeff`. ]]

local Optimizer = require 'zlua.optim.Optimizer'
local checks = require 'zlua.optim.checks'

local rules = { lr = checks.nonneg, betas = checks.betas, eps = checks.nonneg, weight_decay = checks.nonneg,
  max_coeff = checks.nonneg, min_coeff = checks.nonneg, bias_correction = checks.boolean }

local Lamb = Optimizer.extend('Lamb', { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0,
  max_coeff = 10.0, min_coeff = 0.01, bias_correction = true }, function(where, key, v) rules[key](where, key, v) end)

function Lamb:init_state(p)
  return { exp_avg = Optimizer.buffer(p), exp_avg_sq = Optimizer.buffer(p) }
end

function Lamb:update(items, group, scale, step)
  local ratios = Optimizer.core.optim_lamb(Optimizer.sets(items, 'exp_avg', 'exp_avg_sq'), {
    lr = group.lr, beta1 = group.betas[1], beta2 = group.betas[2], eps = group.eps,
    weight_decay = group.weight_decay, max_coeff = group.max_coeff, min_coeff = group.min_coeff,
    bias_correction = group.bias_correction, step = step, grad_scale = scale })
  for i, it in ipairs(items) do it.st.lamb_coeff = ratios[i] end
end

return Lamb
