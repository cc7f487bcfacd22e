--[[ zlua.optim.SGD: torch.optim.SGD (momentum, dampening, nesterov, weight
  decay), the engine's fused pass per parameter, one call per param group
  (on a device one launch). State: momentum_buffer. ]]

local Optimizer = require 'zlua.optim.Optimizer'

return Optimizer.extend('SGD')
