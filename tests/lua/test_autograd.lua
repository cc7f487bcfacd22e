-- Autograd from Lua: backward and .grad against hand-derived gradients, grad
-- mode (no_grad restoring it on errors), and Lua hooks: a grad-ready hook firing
-- once with the complete gradient, use hooks around forward and backward, and
-- errors raised inside hooks surfacing as the op's or the backward's error.
local zl = require 'zlua'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

test('backward_and_grad', function()
  local x = zl.tensor{1, -2, 3}:float():requires_grad(true)
  check(x:requires_grad(), 'requires_grad(true) sets the flag and returns the tensor')
  check(x.is_leaf, 'a user tensor is a leaf')
  check_eq(x.grad_fn, nil, 'a leaf has no grad_fn')
  check_eq(x.grad, nil, 'no gradient before backward')
  local y = (x * x * 3 + x):sum()
  check(not y.is_leaf, 'an op result is not a leaf')
  check_eq(y.grad_fn, 'sum')
  y:backward()
  check_close(x.grad, {7, -11, 19}, 1e-6, 'd/dx (3x^2 + x) = 6x + 1')
  check(x.grad == x.grad, 'two reads of .grad are the same tensor')
  -- A second graph accumulates into .grad.
  local z = (x * 2):sum()
  z:backward()
  check_close(x.grad, {9, -9, 21}, 1e-6, 'gradients accumulate')
  x.grad = nil
  check_eq(x.grad, nil, '.grad can be cleared')
  x.grad = zl.ones(3)
  check_close(x.grad, {1, 1, 1}, 0, '.grad can be assigned')
  x:zero_grad()
  check_eq(x.grad, nil, 'zero_grad clears the gradient')
  check_error(function() x.grad = zl.ones(2) end,
              'set_grad: gradient of shape [2] for a tensor of shape [3]')
end)

test('matmul_gradient_against_finite_differences', function()
  zl.manual_seed(11)
  local a = zl.randn(3, 4):requires_grad(true)
  local b = zl.randn(4, 2)
  local function f() return (a:matmul(b):tanh() ^ 2):sum() end
  f():backward()
  local grad = a.grad:totable()
  local eps = 1e-2
  for i = 1, 3 do
    for j = 1, 4 do
      local v = a:get(i, j)
      local fp, fm
      zl.no_grad(function()
        a:set(i, j, v + eps); fp = f():item()
        a:set(i, j, v - eps); fm = f():item()
        a:set(i, j, v)
      end)
      check_close(grad[i][j], (fp - fm) / (2 * eps), 2e-2, string.format('d/da[%d][%d]', i, j))
    end
  end
end)

test('backward_options', function()
  local x = zl.tensor{1, 2}:float():requires_grad(true)
  local y = x * x
  check_error(function() y:backward() end, 'a gradient can be implied only for a one-element tensor')
  y:backward(zl.tensor{1, 10}:float(), true)
  check_close(x.grad, {2, 40}, 1e-6, 'backward with a seed gradient')
  y:backward(zl.tensor{1, 0}:float())
  check_close(x.grad, {4, 40}, 1e-6, 'retain_graph allowed a second backward')
  check_error(function() y:backward(zl.tensor{1, 0}:float()) end, 'backward through the graph a second time')
  check_error(function() zl.ones(2):sum():backward() end, 'does not require grad')
  check_error(function() zl.tensor{1, 2}:requires_grad(true) end,
              'only float tensors can require gradients, got i64')
  local w = x * 2
  check_error(function() w:requires_grad(false) end, 'cannot turn off requires_grad on a non-leaf tensor')
  local d = w:detach()
  check(not d:requires_grad() and d.is_leaf, 'detach gives a leaf without history')
end)

test('grad_mode', function()
  local x = zl.ones(2):requires_grad(true)
  local y, extra = zl.no_grad(function(a) return x * a, 'second' end, 3)
  check_eq(extra, 'second', 'no_grad returns every result of fn')
  check_close(y, {3, 3}, 0)
  check(not y:requires_grad(), 'no history is recorded under no_grad')
  check(zl.is_grad_enabled(), 'grad mode is restored')
  check_error(function() zl.no_grad(function() error('inner failure') end) end, 'inner failure')
  check(zl.is_grad_enabled(), 'grad mode is restored when fn raises')
  local prev = zl.set_grad_enabled(false)
  check(prev == true and not zl.is_grad_enabled(), 'set_grad_enabled returns the previous mode')
  check((x * 2).grad_fn == nil, 'no history with grad mode off')
  zl.set_grad_enabled(true)
  check_error(function() x:fill_(1) end, 'cannot modify a leaf tensor that requires grad in place')
  zl.no_grad(function() x:fill_(2) end)
  check_close(x, {2, 2}, 0, 'in-place on a leaf is allowed under no_grad')
end)

test('grad_ready_hook', function()
  local x = zl.tensor{1, 2, 3}:float():requires_grad(true)
  local calls, seen, same = 0, nil, nil
  local h = x:register_hook(function(leaf)
    calls = calls + 1
    seen = leaf.grad:totable()
    same = leaf == x
  end)
  check(math.type(h) == 'integer' and h > 0, 'register_hook returns a handle')
  -- x is used by three ops: the hook must wait for all three contributions.
  local y = (x * 2 + x * 3 + x:exp() * 0):sum()
  y:backward()
  check_eq(calls, 1, 'the hook fires once per backward')
  check_close(seen or {}, {5, 5, 5}, 1e-6, 'the hook sees the complete gradient')
  check(same, 'the hook receives the leaf itself')
  x.grad = nil
  x:remove_hook(h)
  ;(x * 2):sum():backward()
  check_eq(calls, 1, 'a removed hook no longer fires')
  check_error(function() (x * 2):register_hook(function() end) end, 'register_hook: the tensor is not a leaf')
  check_error(function() x:register_hook(3) end, "bad argument #2 to 'register_hook' (function expected, got number)")
end)

test('use_hooks', function()
  local w = zl.tensor{{1, 2}, {3, 4}}:float():requires_grad(true)
  local log = {}
  local h = w:register_use_hook(function(t, event, op)
    log[#log + 1] = event .. ':' .. op
    check(t == w, 'the use hook receives the tensor it was registered on')
  end)
  local x = zl.ones(1, 2)
  local y = zl.linear(x, w)
  check_eq(table.concat(log, ' '), 'before_forward:linear after_forward:linear', 'forward events')
  log = {}
  y:sum():backward()
  check_eq(table.concat(log, ' '), 'before_backward:linear after_backward:linear', 'backward events')
  w:remove_hook(h)
  log = {}
  local _ = zl.linear(x, w)
  check_eq(#log, 0, 'a removed use hook no longer fires')
end)

test('errors_in_hooks', function()
  local x = zl.ones(3):requires_grad(true)
  x:register_hook(function() error('boom in grad hook') end)
  local err = check_error(function() (x * 2):sum():backward() end, 'boom in grad hook')
  check(err and err:find('backward: grad-ready hook failed:', 1, true) ~= nil,
        'the backward error names the hook: ' .. tostring(err))
  local w = zl.ones(2, 2)
  w:register_use_hook(function(_, event)
    if event == 'before_forward' then error({}) end
  end)
  check_error(function() return w:matmul(w) end, 'matmul: before_forward hook failed: (error object is not a string)')
  local v = zl.ones(2)
  v:register_use_hook(function() error('use hook says no', 0) end)
  check_error(function() return v + v end, 'add: before_forward hook failed: use hook says no')
  -- The state is intact afterwards: ops and backward still work.
  local z = zl.ones(2):requires_grad(true)
  ;(z * 3):sum():backward()
  check_close(z.grad, {3, 3}, 0, 'autograd works after hook errors')
end)

test('hooks_are_released_with_their_tensor', function()
  local collected = false
  do
    local x = zl.ones(2)
    local marker = setmetatable({}, { __gc = function() collected = true end })
    x:register_use_hook(function() return marker end)
  end
  collectgarbage()
  collectgarbage()
  check(collected, "a hook's function is released when its tensor is freed")
end)

H.done()
