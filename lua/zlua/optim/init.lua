--[[ zlua.optim: SGD, Adam, AdamW and Lamb over param groups, the engine's
  optimizer objects (zlua/optimizer.h): each step one fused C pass per
  parameter (engine/optim: AVX-512 / AVX2 / scalar chosen at run time,
  threaded).

  local optim = require 'zlua.optim'
  local opt = optim.AdamW(model:parameters(), {lr = 1e-3, betas = {0.9, 0.95}, weight_decay = 0.1})
  -- or groups: optim.AdamW({{params = decay, weight_decay = 0.1}, {params = no_decay, weight_decay = 0}}, {lr = 1e-3})
  opt:zero_grad(); loss:backward(); opt:step()

  optim.kernel() names the kernel that runs; optim.kernel('scalar') forces one. ]]

local Optimizer = require 'zlua.optim.Optimizer'

local optim = {
  Optimizer = Optimizer,
  SGD = require 'zlua.optim.SGD',
  Adam = require 'zlua.optim.Adam',
  AdamW = require 'zlua.optim.AdamW',
  Lamb = require 'zlua.optim.Lamb',
}

function optim.kernel(name) return Optimizer.core.optim_kernel(name) end

return optim
