-- The elementwise group of tests/interop/check_ops_torch.py (torch's side in
-- elementwise.py): unary math, comparisons, reductions, running sums, gather
-- and scatter, and a few edges of older ops.
local zl = require 'zlua'

local nan, inf = 0 / 0, math.huge
local cases = {}
local function case(name, inputs, grad, fn)
  cases[#cases + 1] = { name = name, inputs = inputs, grad = grad, fn = fn }
end

-- Values over several scales with the edges: zeros, large magnitudes.
local wide = zl.randn(4, 6) * 3
wide:set(1, 1, 0)
wide:set(1, 2, 40)
wide:set(1, 3, -40)
local with_nan = zl.tensor({ { -1, nan, 2, -30 }, { 30, 0.5, -0.25, 0 } })

-- Unary.
case('silu', { x = wide }, { 'x' }, function(t) return t.x:silu() end)
case('silu_nan', { x = with_nan }, { 'x' }, function(t) return zl.silu(t.x) end)
case('silu_bf16', { x = wide:bf16() }, { 'x' }, function(t) return t.x:silu() end)
case('sin', { x = wide }, { 'x' }, function(t) return t.x:sin() end)
case('cos', { x = wide }, { 'x' }, function(t) return t.x:cos() end)
case('sin_i64', { x = zl.tensor({ -3, 0, 1, 7 }) }, {}, function(t) return t.x:sin() end)
case('log1p', { x = zl.rand(3, 5) * 4 - 0.99 }, { 'x' }, function(t) return t.x:log1p() end)
case('log1p_tiny', { x = zl.tensor({ 1e-7, -1e-7, 1e-30, 0 }) }, { 'x' }, function(t) return t.x:log1p() end)
case('softplus', { x = wide }, { 'x' }, function(t) return t.x:softplus() end)
case('softplus_beta', { x = wide }, { 'x' }, function(t) return zl.softplus(t.x, 2, 5) end)
case('leaky_relu', { x = with_nan }, { 'x' }, function(t) return t.x:leaky_relu() end)
case('leaky_relu_slope', { x = wide }, { 'x' }, function(t) return t.x:leaky_relu(0.2) end)
case('clamp', { x = wide }, { 'x' }, function(t) return t.x:clamp(-0.55, 0.73) end)
case('clamp_nan', { x = with_nan }, { 'x' }, function(t) return t.x:clamp(-0.6, 0.7) end)
case('clamp_min', { x = wide }, { 'x' }, function(t) return t.x:clamp{ min = -0.55 } end)
case('clamp_max', { x = wide }, { 'x' }, function(t) return t.x:clamp(nil, 0.73) end)
case('clamp_bf16', { x = wide:bf16() }, { 'x' }, function(t) return t.x:clamp(-0.55, 0.73) end)
case('clamp_i64', { x = zl.tensor({ -5, -1, 0, 3, 9 }) }, {}, function(t) return t.x:clamp(-1, 3) end)
case('clamp_i64_fraction', { x = zl.tensor({ -5, -1, 0, 3, 9 }) }, {}, function(t) return t.x:clamp(-1.5, 2.5) end)

-- Comparisons, with ties, NaN and numbers.
local a = zl.tensor({ { 1, 2, nan, 4 }, { -1, 0, 3, nan } })
local b = zl.tensor({ 1, 3, nan, 2 })
case('ne', { a = a, b = b }, {}, function(t) return t.a:ne(t.b) end)
case('le', { a = a, b = b }, {}, function(t) return t.a:le(t.b) end)
case('ge', { a = a, b = b }, {}, function(t) return zl.ge(t.a, t.b) end)
case('ne_number', { a = a }, {}, function(t) return t.a:ne(2) end)
case('le_number', { a = a }, {}, function(t) return t.a:le(2) end)
case('ge_i64', { a = zl.tensor({ 1, 5, -3 }) }, {}, function(t) return t.a:ge(1) end)

-- Reductions.
local ties = zl.tensor({ { 3, 1, 1, 2 }, { 0, 5, 0, -1 }, { 2, 2, 2, 2 } }, 'f32')
local distinct = zl.randn(3, 4, 5)
case('min_dim', { x = distinct }, { 'x' }, function(t) return t.x:min(2) end)
case('min_dim_keep', { x = distinct }, { 'x' }, function(t) return t.x:min(-1, true) end)
case('min_all', { x = distinct }, { 'x' }, function(t) return t.x:min() end)
case('min_ties', { x = ties }, { 'x' }, function(t) return t.x:min(2) end)
case('argmin_ties', { x = ties }, {}, function(t) return t.x:argmin(2) end)
case('argmin_all', { x = ties }, {}, function(t) return t.x:argmin() end)
case('min_nan', { x = with_nan }, {}, function(t) return t.x:min(2) end)
case('argmin_nan', { x = with_nan }, {}, function(t) return t.x:argmin(2) end)
case('min_i64', { x = zl.tensor({ { 2 ^ 40 | 0, -(2 ^ 41 | 0) }, { 7, 7 } }) }, {}, function(t) return t.x:min(2) end)
case('sum_dims', { x = distinct }, { 'x' }, function(t) return t.x:sum({ 1, 3 }) end)
case('sum_dims_keep', { x = distinct }, { 'x' }, function(t) return t.x:sum({ 3, -2 }, true) end)
case('mean_dims', { x = distinct }, { 'x' }, function(t) return t.x:mean({ 1, 2 }) end)
case('mean_dims_keep', { x = distinct }, { 'x' }, function(t) return t.x:mean({ 1, 3 }, true) end)
case('sum_dims_i64', { x = zl.tensor({ { 1, 2 }, { 3, 4 } }) }, {}, function(t) return t.x:sum({ 1, 2 }) end)
case('var', { x = distinct }, { 'x' }, function(t) return t.x:var() end)
case('var_dim', { x = distinct }, { 'x' }, function(t) return t.x:var(2) end)
case('var_dims_keep', { x = distinct }, { 'x' }, function(t) return t.x:var({ 1, 3 }, { keepdim = true }) end)
case('var_correction0', { x = distinct }, { 'x' }, function(t) return t.x:var(3, { correction = 0 }) end)
case('var_biased', { x = distinct }, { 'x' }, function(t) return t.x:var({ unbiased = false }) end)
case('var_one', { x = zl.randn(3, 1) }, {}, function(t) return t.x:var(2) end)
case('var_overcorrected', { x = zl.randn(3, 2) }, {}, function(t) return t.x:var(2, { correction = 3 }) end)
case('var_bf16', { x = distinct:bf16() }, { 'x' }, function(t) return t.x:var(3) end)
case('std', { x = distinct }, { 'x' }, function(t) return t.x:std() end)
case('std_dims', { x = distinct }, { 'x' }, function(t) return zl.std(t.x, { 2, 3 }, { correction = 0 }) end)
case('std_constant', { x = zl.tensor({ { 0.1, 0.1, 0.1 }, { 1, 2, 4 } }) }, { 'x' }, function(t) return t.x:std(2) end)
case('cumsum', { x = distinct }, { 'x' }, function(t) return t.x:cumsum(2) end)
case('cumsum_last', { x = distinct }, { 'x' }, function(t) return zl.cumsum(t.x, -1) end)
case('cumsum_bf16', { x = distinct:bf16() }, { 'x' }, function(t) return t.x:cumsum(3) end)
case('cumsum_i32', { x = zl.tensor({ { 1, -2, 3 }, { 4, 5, 6 } }, 'i32') }, {}, function(t) return t.x:cumsum(2) end)
case('cumsum_bool', { x = zl.tensor({ true, false, true, true }) }, {}, function(t) return t.x:cumsum(1) end)

-- Gather and scatter (index values 0-based).
local idx = zl.tensor({ { 0, 3, 3 }, { 1, 0, 2 }, { 2, 2, 1 } })
local perm = zl.tensor({ { 3, 0, 1, 2 }, { 0, 2, 3, 1 } })
case('gather_dim2', { x = zl.randn(3, 4), i = idx }, { 'x' }, function(t) return t.x:gather(2, t.i) end)
case('gather_dim1', { x = zl.randn(4, 5), i = idx }, { 'x' }, function(t) return t.x:gather(1, t.i) end)
case('gather_i64', { x = zl.tensor({ { 10, 20, 30, 40 }, { 50, 60, 70, 80 } }), i = perm }, {},
  function(t) return t.x:gather(2, t.i) end)
case('scatter', { x = zl.randn(3, 4), i = perm, s = zl.randn(2, 4) }, { 'x', 's' },
  function(t) return t.x:scatter(2, t.i, t.s) end)
case('scatter_dim1', { x = zl.randn(4, 4), i = perm, s = zl.randn(2, 4) }, { 'x', 's' },
  function(t) return t.x:scatter(1, t.i, t.s) end)
case('scatter_value', { x = zl.randn(3, 4), i = perm }, { 'x' }, function(t) return t.x:scatter(2, t.i, 2.5) end)
case('scatter_add', { x = zl.randn(3, 4), i = idx, s = zl.randn(3, 3) }, { 'x', 's' },
  function(t) return t.x:scatter_add(2, t.i, t.s) end)
case('scatter_add_dim1', { x = zl.randn(4, 3), i = idx, s = zl.randn(3, 3) }, { 'x', 's' },
  function(t) return zl.scatter_add(t.x, 1, t.i, t.s) end)
local counts = zl.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } })
case('scatter_add_i64', { x = zl.zeros({ 2, 4 }, 'i64'), i = perm, s = counts }, {},
  function(t) return t.x:scatter_add(2, t.i, t.s) end)

-- Edges of older ops.
case('narrow_empty_end', { x = zl.randn(4, 3) }, { 'x' }, function(t) return t.x:narrow(1, 5, 0) end)
case('relu_nan', { x = zl.tensor({ -1, nan, 2, 0 }) }, { 'x' }, function(t) return t.x:relu() end)
case('sum_i64', { x = zl.tensor({ { 2 ^ 40 | 0, 3 }, { -7, 1 } }, 'i64') }, {}, function(t) return t.x:sum() end)

return cases
