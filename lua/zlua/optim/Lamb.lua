--[[ zlua.optim.Lamb: DeepSpeed's FusedLamb (trust ratio |p| / |u| clamped to
  [min_coeff, max_coeff]), the engine's two fused passes per parameter, one
  call per param group. State: exp_avg, exp_avg_sq, and the last trust ratio
  of each parameter as `lamb_coeff`. ]]

local Optimizer = require 'zlua.optim.Optimizer'

return Optimizer.extend('Lamb')
