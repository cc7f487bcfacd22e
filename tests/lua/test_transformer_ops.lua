-- zl.rms_norm, zl.rotary, zl.apply_rotary_pos_emb, zl.attention's grouped
-- heads, masks and causal cut, and nn.RMSNorm: against the same math spelt
-- out with elementary ops (values and gradients), defaults and every error.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

-- HF's LlamaRMSNorm in elementary ops.
local function rms_ref(x, w, eps)
  local xf = x:float()
  local y = xf * (xf * xf):mean(-1, true):add(eps):pow(-0.5)
  return w * y:to(x:dtype())
end

local function rotate_half(x)
  local d = x:size(-1) // 2
  return zl.cat({ -x:narrow(-1, d + 1, d), x:narrow(-1, 1, d) }, -1)
end

local function leaf(...) return zl.randn(...):requires_grad(true) end

test('rms_norm_matches_hf', function()
  local x, w = leaf(3, 5, 8), leaf(8)
  local y = zl.rms_norm(x, 8, w, 1e-6)
  local g = zl.randn(3, 5, 8)
  y:backward(g)
  local gx, gw = x.grad, w.grad
  x.grad, w.grad = nil, nil
  local r = rms_ref(x, w, 1e-6)
  r:backward(g)
  check_close(y, r, 1e-5, 'forward')
  check_close(gx, x.grad, 1e-4, 'gradient of x')
  check_close(gw, w.grad, 1e-4, 'gradient of the weight')
  -- Two normalised dims, given as a table; no weight.
  local x2 = zl.randn(2, 3, 4)
  local want = x2 * (x2 * x2):mean({ 2, 3 }, true):add(1e-5):pow(-0.5)
  check_close(zl.rms_norm(x2, { 3, 4 }, nil, 1e-5), want, 1e-5, 'over two dims')
  -- eps nil: f32's machine epsilon.
  check_close(zl.rms_norm(x2, 4), zl.rms_norm(x2, 4, nil, 2 ^ -23), 0, 'default eps')
  -- bf16 x and f32 weight: the normalised x rounded to bf16, the result f32.
  local xb, wf = zl.randn(4, 8):to('bf16'), zl.randn(8)
  local yb = zl.rms_norm(xb, 8, wf, 1e-6)
  check_eq(yb:dtype(), 'f32', 'promoted dtype')
  check_close(yb, rms_ref(xb, wf, 1e-6), 1e-6, 'bf16 against HF')
  check_eq(zl.rms_norm(xb, 8, wf:to('bf16'), 1e-6):dtype(), 'bf16', 'bf16 weight')
end)

test('rms_norm_errors', function()
  local x = zl.randn(3, 4)
  check_error(function() zl.rms_norm(x, 5) end,
              'rms_norm: normalized_shape {5} does not match the trailing dims of a tensor of shape {3, 4}')
  check_error(function() zl.rms_norm(x, { 2, 3, 4 }) end, 'rms_norm: normalized_shape must name 1 to 2 trailing dims')
  check_error(function() zl.rms_norm(x, 4, zl.randn(5)) end, 'rms_norm: weight must have shape [4]')
  check_error(function() zl.rms_norm(x, 4, nil, 'tiny') end, 'rms_norm: eps must be a number, got string')
  check_error(function() zl.rms_norm(x, 4, nil, -1) end, 'rms_norm: eps must be finite and >= 0, got -1')
end)

test('rms_norm_module', function()
  local m = nn.RMSNorm(8, { eps = 1e-6 })
  local names = {}
  for name, p in m:named_parameters() do names[#names + 1] = name; check_close(p, zl.ones(8), 0, 'ones') end
  check(H.same_list(names, { 'weight' }), 'one parameter, weight')
  check_eq(tostring(m), 'RMSNorm(8, eps=1e-06)', 'printed')
  local x = zl.randn(2, 3, 8)
  zl.no_grad(function() m.weight:copy_(zl.randn(8)) end)
  check_close(m(x), zl.rms_norm(x, 8, m.weight, 1e-6), 0, 'forward')
  local m2 = nn.RMSNorm({ 3, 8 }, { dtype = 'bf16' })
  check_eq(m2.weight:dtype(), 'bf16', 'dtype option')
  check_eq(m2.eps, nil, 'eps nil: torch default')
  check_eq(tostring(m2), 'RMSNorm({3, 8})', 'printed without eps')
  check_error(function() nn.RMSNorm(8, { epsilon = 1 }) end, "RMSNorm: unknown option \"epsilon\"")
  check_error(function() nn.RMSNorm(0) end, 'RMSNorm: normalized_shape must be a positive integer, got 0')
  check_error(function() nn.RMSNorm(8, { eps = -1 }) end, 'RMSNorm: eps must be a number >= 0, got -1')
  -- An RMSNorm's weight goes to the no-decay group, whatever the model calls it.
  local net = nn.Sequential(nn.Linear(8, 8, false), nn.RMSNorm(8))
  local groups = nn.get_optimizer_grouped_parameters(net, 0.1)
  check_eq(#groups[1].params, 1, 'the Linear weight decays')
  check_eq(#groups[2].params, 1, 'the RMSNorm weight does not')
end)

test('rotary_matches_rotate_half', function()
  -- x [B, H, T, D] as a strided view of [B, T, H, D]; cos, sin [B, 1, T, D] and [T, D].
  local b, h, t, d = 2, 3, 5, 8
  for _, shape in ipairs({ { b, 1, t, d }, { t, d } }) do
    local base = leaf(b, t, h, d)
    local cos, sin = zl.randn(shape), zl.randn(shape)
    local x = base:transpose(2, 3)
    check(not x:is_contiguous(), 'x is a strided view')
    local g = zl.randn(b, h, t, d)
    local y = zl.rotary(x, cos, sin)
    y:backward(g)
    local gx = base.grad
    base.grad = nil
    x = base:transpose(2, 3)
    local r = x * cos + rotate_half(x) * sin
    r:backward(g)
    check_close(y, r, 1e-6, 'forward')
    check_close(gx, base.grad, 1e-5, 'gradient of x')
  end
  -- Hugging Face's name: cos and sin [B, T, D] get their heads dim at 2.
  local q, k = zl.randn(b, h, t, d), zl.randn(b, 1, t, d)
  local cos, sin = zl.randn(b, t, d), zl.randn(b, t, d)
  local qr, kr = zl.apply_rotary_pos_emb(q, k, cos, sin)
  check_close(qr, zl.rotary(q, cos:unsqueeze(2), sin:unsqueeze(2)), 0, 'q rotated')
  check_close(kr, zl.rotary(k, cos:unsqueeze(2), sin:unsqueeze(2)), 0, 'k rotated')
  check_error(function() zl.rotary(zl.randn(2, 5), zl.randn(2, 5), zl.randn(2, 5)) end,
              "rotary: x's last dimension must be even")
  check_error(function() zl.rotary(q, zl.randn(4, d), sin) end, 'rotary: cos of shape [4, 8] does not broadcast')
end)

-- softmax(q k^T * scale, hidden keys at -inf) v spelt out, k and v
-- repeated to q's heads; hide: bool, true where a query may not see a key.
local function attention_ref(q, k, v, hide, scale)
  local rep = q:size(2) // k:size(2)
  local idx = {}
  for i = 0, q:size(2) - 1 do idx[#idx + 1] = i // rep end
  local ids = zl.tensor(idx)
  local kk, vv = k:index_select(2, ids), v:index_select(2, ids)
  local s = q:matmul(kk:transpose(3, 4)) * scale
  s = s:masked_fill(hide, -math.huge)
  return zl.softmax(s, -1):matmul(vv)
end

test('attention_gqa_mask_and_causal', function()
  local b, h, hkv, tq, tk, d = 2, 4, 2, 3, 5, 8
  local q, k, v = leaf(b, h, tq, d), leaf(b, hkv, tk, d), leaf(b, hkv, tk, d)
  -- Padding hides the first sequence's last two keys; causal with fewer
  -- queries than keys lets query i see keys up to i + tk - tq.
  local pad = zl.ones(b, 1, 1, tk, 'bool')
  pad[1][1][1][4], pad[1][1][1][5] = false, false
  local hide = zl.zeros(b, 1, tq, tk, 'bool')
  for i = 1, tq do
    for j = 1, tk do hide[1][1][i][j] = j > i + tk - tq or j >= 4; hide[2][1][i][j] = j > i + tk - tq end
  end
  local g = zl.randn(b, h, tq, d)
  local y = zl.attention(q, k, v, { is_causal = true, attn_mask = pad })
  y:backward(g)
  local grads = { q.grad, k.grad, v.grad }
  q.grad, k.grad, v.grad = nil, nil, nil
  local r = attention_ref(q, k, v, hide, d ^ -0.5)
  r:backward(g)
  check_close(y, r, 1e-5, 'forward')
  for i, t in ipairs({ q, k, v }) do check_close(grads[i], t.grad, 1e-4, 'gradient ' .. i) end
  -- A query that sees no key gets zeros.
  local none, hidden = zl.ones(tq, tk, 'bool'), zl.zeros(tq, tk, 'bool')
  for j = 1, tk do none[2][j], hidden[2][j] = false, true end
  local z = zl.attention(q, k, v, { mask = none, scale = 0.5 })
  check_close(z:narrow(3, 2, 1), zl.zeros(b, h, 1, d), 0, 'masked row')
  check_close(z:narrow(3, 1, 1), attention_ref(q, k, v, hidden, 0.5):narrow(3, 1, 1), 1e-5, 'other rows, scale 0.5')
end)

test('attention_option_errors', function()
  local q = zl.randn(1, 4, 3, 8)
  local k = zl.randn(1, 2, 3, 8)
  for _, s in ipairs({ -1, 0, 0 / 0, math.huge }) do
    check_error(function() zl.attention(q, k, k, { scale = s }) end, 'attention: scale must be a positive number, got')
  end
  check_error(function() zl.attention(q, k, k, { scale = 'big' }) end,
              'attention: scale must be a positive number, got big')
  check_error(function() zl.attention(q, k, k, { mask = true }) end, 'attention: mask must be a bool tensor, got a boolean')
  check_error(function() zl.attention(q, k, k, { mask = zl.ones(3, 3) }) end, 'attention: mask must be bool')
  check_error(function() zl.attention(q, zl.randn(1, 3, 3, 8), zl.randn(1, 3, 3, 8)) end,
              "attention: the query's 4 heads (dimension -3) must be a positive multiple of the key's 3")
  check_error(function() zl.attention(zl.randn(1, 4, 5, 8), k, k, { causal = true }) end,
              'attention: causal attention needs at most as many queries as keys')
end)

H.done()
