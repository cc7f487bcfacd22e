--[[ zlua.optim.Adam: torch.optim.Adam, L2 weight decay (default 0), or
  decoupled decay when adam_w_mode is true (DeepSpeed's Adam from a config
  sets it). The engine's fused pass per parameter reads p, g, m, v once and
  writes p, m, v (on a device, one launch per param group). State: exp_avg,
  exp_avg_sq. ]]

local Optimizer = require 'zlua.optim.Optimizer'

return Optimizer.extend('Adam')
