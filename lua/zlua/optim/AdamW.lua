--[[ zlua.optim.AdamW: torch.optim.AdamW, Adam with decoupled weight decay
  (default 1e-2; adam_w_mode false turns it into Adam's L2). The engine's
  fused pass per parameter, one call per param group. State: exp_avg,
  exp_avg_sq. ]]

local Optimizer = require 'zlua.optim.Optimizer'

return Optimizer.extend('AdamW')
