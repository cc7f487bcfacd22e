-- The Lua half of the embed example: main.c runs it through zlua_dofile (it
-- runs under the zlua executable as well). A small MLP (1 -> 32 -> 1) learns
-- y = x^2 / 4 - 1 on [-3, 3] by plain gradient descent, printing the loss.
local zl = require 'zlua'

print(('lua: running %s (arg[1] = %s) on zlua %s'):format(arg[0], tostring(arg[1]), zl.version))
zl.manual_seed(3)
local function target(x) return x * x / 4 - 1 end
local x = zl.arange(-3, 3, 0.1):reshape(-1, 1)             -- [60, 1]
local x_test = zl.arange(-2.95, 2.95, 0.1):reshape(-1, 1)  -- between the training points

local w1 = zl.randn(32, 1):requires_grad(true)
local b1 = (zl.rand(32) * 6 - 3):requires_grad(true)       -- kinks spread over [-3, 3]
local w2 = (zl.randn(1, 32) * 0.1):requires_grad(true)
local b2 = zl.zeros(1):requires_grad(true)
local params = { w1, b1, w2, b2 }
local function forward(v) return zl.linear(zl.linear(v, w1, b1):relu(), w2, b2) end

local lr = 0.02
for step = 0, 1500 do
  local loss = zl.mse_loss(forward(x), target(x))
  loss:backward()
  zl.no_grad(function()
    for _, p in ipairs(params) do
      p:copy_(p - p.grad * lr)
      p:zero_grad()
    end
  end)
  if step % 300 == 0 then print(('lua: step %4d  loss %.5f'):format(step, loss:item())) end
end
local held_out = zl.no_grad(function() return zl.mse_loss(forward(x_test), target(x_test)):item() end)
print(('lua: held-out loss %.5f'):format(held_out))
if held_out > 0.01 then error(('the fit did not converge (held-out loss %.5f)'):format(held_out)) end
