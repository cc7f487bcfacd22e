-- The Lua forms of silu, sin, cos, log1p, softplus, leaky_relu, clamp, ne,
-- le, ge, min, argmin, sum and mean over several dims, var, std, cumsum,
-- gather, scatter and scatter_add, and nn.SiLU: defaults, option tables,
-- 1-based dims, numbers in place of tensors, and errors in the script's terms.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error
local same_list = H.same_list

local nan = 0 / 0

test('unary_ops_and_their_defaults', function()
  local x = zl.tensor{ -2, -0.5, 0, 1, 30 }
  check_close(x:silu(), { -2 / (1 + math.exp(2)), -0.5 / (1 + math.exp(0.5)), 0, 1 / (1 + math.exp(-1)), 30 }, 1e-6)
  check_close(zl.sin(x), { math.sin(-2), math.sin(-0.5), 0, math.sin(1), math.sin(30) }, 1e-6)
  check_close(x:cos(), { math.cos(-2), math.cos(-0.5), 1, math.cos(1), math.cos(30) }, 1e-6)
  check_close(zl.tensor{ 1e-7, 1 }:log1p(), { 1e-7 - 5e-15, math.log(2) }, 1e-6)
  -- softplus: beta 1, threshold 20 (30 passes as itself).
  check_close(x:softplus(), { math.log(1 + math.exp(-2)), math.log(1 + math.exp(-0.5)), math.log(2),
                              math.log(1 + math.exp(1)), 30 }, 1e-6)
  check_close(zl.softplus(x, 2, 1), { math.log(1 + math.exp(-4)) / 2, math.log(1 + math.exp(-1)) / 2,
                                      math.log(2) / 2, 1, 30 }, 1e-6)
  check_close(x:leaky_relu(), { -0.02, -0.005, 0, 1, 30 }, 1e-6)
  check_close(x:leaky_relu(0.5), { -1, -0.25, 0, 1, 30 }, 1e-6)
  check_error(function() return x:softplus('a') end, 'softplus: beta must be a number, got string')
  check_error(function() return zl.tensor{ 1, 2 }:silu() end, 'silu: x must be a float tensor')
  check_eq(zl.tensor{ 1, 2 }:sin():dtype(), 'f32', 'sin of an integer is a float')
  local y = zl.tensor{ nan, 1 }:silu()
  check(y:get(1) ~= y:get(1), 'silu(NaN) is NaN')
end)

test('clamp_forms', function()
  local x = zl.tensor{ -3, -1, 0.5, 2, nan }
  check_close(x:clamp(-1, 1):narrow(1, 1, 4), { -1, -1, 0.5, 1 })
  check_close(x:clamp(0):narrow(1, 1, 4), { 0, 0, 0.5, 2 }, 0, 'min only')
  check_close(x:clamp(nil, 0):narrow(1, 1, 4), { -3, -1, 0, 0 }, 0, 'max only')
  check_close(x:clamp{ min = -2, max = 1 }:narrow(1, 1, 4), { -2, -1, 0.5, 1 }, 0, 'an options table')
  check_close(zl.clamp(x, { max = 1 }):narrow(1, 1, 4), { -3, -1, 0.5, 1 }, 0, 'functional form')
  local c = x:clamp(-1, 1)
  check(c:get(5) ~= c:get(5), 'NaN stays NaN')
  local i = zl.tensor{ -5, 0, 7 }
  check_eq(i:clamp(-1, 3):dtype(), 'i64', 'whole bounds keep integers')
  check_close(i:clamp(-1, 3), { -1, 0, 3 })
  check_eq(i:clamp(-1.5):dtype(), 'f32', 'a fractional bound makes a float')
  check_error(function() return x:clamp() end, 'clamp: at least one of min and max must be given')
  check_error(function() return x:clamp('a', 1) end, 'clamp: min must be a number, got string')
  -- The gradient passes strictly inside the bounds.
  local l = zl.tensor{ -1, 0, 1, 2 }:float():requires_grad(true)
  l:clamp(-1, 1):sum():backward()
  check_close(l.grad, { 0, 1, 0, 0 })
end)

test('comparisons_with_tensors_and_numbers', function()
  local a = zl.tensor{ 1, 2, 3 }
  local b = zl.tensor{ 3, 2, 1 }
  check_close(a:ne(b), { true, false, true })
  check_close(a:le(b), { true, true, false })
  check_close(zl.ge(a, b), { false, true, true })
  check_close(a:ne(2), { true, false, true }, 0, 'a number')
  check_close(a:float():le(2.5), { true, true, false }, 0, 'a fractional number')
  check_close(zl.tensor{ nan }:ne(nan), { true }, 0, 'NaN is unequal to itself')
  check_eq(a:ge(1):dtype(), 'bool')
end)

test('min_and_argmin', function()
  local x = zl.tensor({ { 3, 1, 1 }, { 0, 5, 0 } }, 'f32')
  check_close(x:min(), { 0 })
  check_close(x:min(2), { 1, 0 })
  check(same_list(x:min(-1, true):shape(), { 2, 1 }), 'keepdim')
  check_close(x:argmin(2), { 1, 0 }, 0, 'the first of ties, 0-based')
  check_close(zl.argmin(x, 1), { 1, 0, 1 })
  check_eq(x:argmin():item(), 3, 'over everything: the flat position')
  local i = zl.tensor{ 2 ^ 40 | 0, -(2 ^ 40 | 0) }
  check_eq(i:min():item(), -(2 ^ 40 | 0), 'integers exactly')
  check_error(function() return x:min(3) end, 'min: dimension 3 is out of range for a 2-d tensor')
  check_error(function() return x:argmin(0) end, 'argmin: dimension 0 is invalid: dimensions are 1-based')
end)

test('sum_and_mean_over_a_list_of_dims', function()
  local x = zl.arange(24):float():reshape(2, 3, 4)
  check_close(x:sum{ 1, 3 }, { 60, 92, 124 })
  check(same_list(x:sum({ 1, 3 }, true):shape(), { 1, 3, 1 }), 'keepdim')
  check_close(x:mean{ 1, 2 }, { 10, 11, 12, 13 })
  check_close(zl.mean(x, { -1, 1 }), { 7.5, 11.5, 15.5 })
  check_close(x:sum{}, { 276 }, 0, 'an empty list reduces everything')
  check_eq(zl.tensor{ { 1, 2 }, { 3, 4 } }:sum{ 1, 2 }:dtype(), 'i64')
  check_error(function() return x:sum{ 1, -3 } end, 'sum: dimension 1 appears more than once in the list of dims')
  check_error(function() return x:mean{ 4 } end, 'mean: dimension 4 is out of range for a 3-d tensor')
  local l = zl.randn(2, 3):requires_grad(true)
  l:mean{ 1, 2 }:backward()
  check_close(l.grad, { 1 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6 })
end)

test('var_and_std_forms', function()
  local x = zl.tensor{ { 1, 2, 3, 4 }, { 2, 2, 2, 2 } }:float()
  check_close(x:var(), { 5.5 / 7 }, 1e-6)
  check_close(x:var(2), { 5 / 3, 0 })
  check_close(x:var(2, { correction = 0 }), { 1.25, 0 })
  check_close(x:var(2, { unbiased = false }), { 1.25, 0 })
  check_close(x:var{ correction = 0 }, { 5.5 / 8 }, 1e-6, 'options without dims')
  check(same_list(x:var({ 1, 2 }, { keepdim = true }):shape(), { 1, 1 }), 'a list of dims, keepdim')
  check_close(x:std(2), { math.sqrt(5 / 3), 0 }, 1e-6)
  check_close(zl.std(x, -1, { correction = 0 }), { math.sqrt(1.25), 0 }, 1e-6)
  check_eq(zl.tensor{ 1, 2 }:float():var(1, { correction = 2 }):item(), math.huge, 'count - correction 0 gives inf')
  check_error(function() return x:var(2, { correction = 1, unbiased = true }) end,
              'var: give correction or unbiased, not both')
  check_error(function() return zl.tensor{ 1, 2 }:std() end, 'std: x must be a float tensor')
  local l = zl.tensor{ { 1, 1, 1 }, { 1, 2, 4 } }:float():requires_grad(true)
  l:std(2):sum():backward()
  check_close(l.grad:narrow(1, 1, 1), { 0, 0, 0 }, 0, "std's gradient is 0 where std is 0")
end)

test('cumsum', function()
  local x = zl.tensor{ { 1, 2, 3 }, { 4, 5, 6 } }
  local c = x:cumsum(2)
  check_eq(c:dtype(), 'i64')
  check_close(c, { 1, 3, 6, 4, 9, 15 })
  check_close(zl.cumsum(x:float(), 1), { 1, 2, 3, 5, 7, 9 })
  check_eq(zl.tensor{ true, true }:cumsum(1):dtype(), 'i64')
  check_error(function() return x:cumsum() end, 'cumsum: dimension must be an integer, got nil')
  local l = zl.tensor{ 1, 2, 3 }:float():requires_grad(true)
  local loss = (l:cumsum(1) * zl.tensor{ 1, 10, 100 }):sum()
  loss:backward()
  check_close(l.grad, { 111, 110, 100 })
end)

test('gather_and_scatter', function()
  local x = zl.tensor{ { 1, 2, 3 }, { 4, 5, 6 } }:float()
  local idx = zl.tensor{ { 2, 0 }, { 1, 1 } }
  check_close(x:gather(2, idx), { 3, 1, 5, 5 })
  check_close(zl.gather(x, 1, zl.tensor{ { 1, 0, 1 } }), { 4, 2, 6 })
  check_close(x:scatter(2, idx, zl.tensor{ { 10, 20 }, { 30, 40 } }:float()), { 20, 2, 10, 4, 40, 6 })
  check_close(x:scatter(2, idx, -1), { -1, 2, -1, 4, -1, 6 }, 0, 'a number in place of src')
  check_close(x:scatter_add(2, idx, zl.ones(2, 2)), { 2, 2, 4, 4, 7, 6 })
  check_close(zl.scatter_add(x, 1, zl.tensor{ { 1, 1, 0 } }, zl.ones(1, 3)), { 1, 2, 4, 5, 6, 6 })
  check_error(function() return x:gather(2, zl.tensor{ { 3 } }) end,
              'gather: index 3 is out of range for dimension 2 of size 3 (input [2, 3])')
  check_error(function() return x:gather(1, zl.tensor{ { 0, 0, 0, 0 } }) end,
              'gather: index is larger than the input in dimension 2 (index [1, 4], input [2, 3])')
  check_error(function() return x:scatter(2, idx, zl.ones(2, 2, 'i64')) end,
              "scatter: src must have the input's dtype (src i64, input f32)")
  check_error(function() return x:gather(0, idx) end, 'gather: dimension 0 is invalid')
  local l = x:clone():requires_grad(true)
  l:gather(2, idx):sum():backward()
  check_close(l.grad, { 1, 0, 1, 0, 2, 0 })
end)

test('silu_module', function()
  local m = nn.SiLU()
  check_eq(tostring(m), 'SiLU()')
  check_eq(#m:parameters(), 0, 'no parameters')
  local x = zl.randn(3, 4)
  check_close(m(x), x:silu())
  local seq = nn.Sequential(nn.Linear(4, 8), nn.SiLU(), nn.Linear(8, 2))
  check(same_list(seq(x):shape(), { 3, 2 }), 'inside a Sequential')
end)

test('misspelt_options_are_refused', function()
  local x, y = zl.randn(2, 3), zl.tensor({ 0, 1 }, 'i64')
  H.check_error(function() zl.cross_entropy(x, y, { label_smooting = 0.1 }) end,
                'cross_entropy: unknown option label_smooting')
  H.check_error(function() x:var(2, { corection = 0 }) end, 'var: unknown option corection')
  H.check_error(function() zl.attention(x, x, x, { casual = true }) end, 'attention: unknown option casual')
  H.check_error(function() zl.conv2d(zl.randn(1, 1, 3, 3), zl.randn(1, 1, 2, 2), nil, { strides = 2 }) end,
                'conv2d: unknown option strides')
end)

H.done()
