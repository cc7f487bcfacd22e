-- torch's options of the nn ops from Lua: cross_entropy's weight and
-- label_smoothing, embedding's padding_idx, avg_pool2d, conv2d's dilation and
-- groups, and the modules that carry them, against plain-Lua references.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

-- torch's cross_entropy of rows (tables) against 0-based targets.
local function ce_ref(rows, targets, w, eps, ignore, reduction)
  local total, denom, out = 0, 0, {}
  for i, row in ipairs(rows) do
    local t = targets[i]
    out[i] = 0
    if t ~= ignore then
      local m = -math.huge
      for _, v in ipairs(row) do m = math.max(m, v) end
      local s = 0
      for _, v in ipairs(row) do s = s + math.exp(v - m) end
      local lse, smooth = m + math.log(s), 0
      for c, v in ipairs(row) do smooth = smooth + (w and w[c] or 1) * (lse - v) end
      local wt = w and w[t + 1] or 1
      out[i] = (1 - eps) * wt * (lse - row[t + 1]) + eps / #row * smooth
      total, denom = total + out[i], denom + wt
    end
  end
  if reduction == 'none' then return out end
  return reduction == 'sum' and total or total / denom
end

test('cross_entropy_weight_and_label_smoothing', function()
  local x, t = zl.randn(5, 4), zl.tensor{ 0, 3, -100, 1, 3 }
  local wl = { 0.5, 2.0, 1.0, 3.0 }
  local w = zl.tensor(wl)
  for _, red in ipairs({ 'mean', 'sum', 'none' }) do
    for _, eps in ipairs({ 0, 0.1, 1 }) do
      local got = zl.cross_entropy(x, t, { weight = w, label_smoothing = eps, reduction = red })
      check_close(got:totable(), ce_ref(x:totable(), t:totable(), wl, eps, -100, red), 1e-5,
                  'weight, smoothing ' .. eps .. ', ' .. red)
      got = zl.cross_entropy(x, t, { label_smoothing = eps, reduction = red })
      check_close(got:totable(), ce_ref(x:totable(), t:totable(), nil, eps, -100, red), 1e-5,
                  'smoothing ' .. eps .. ', ' .. red)
    end
  end
  local xg = zl.randn(5, 4):requires_grad(true)
  zl.cross_entropy(xg, t, { weight = w, label_smoothing = 0.2 }):backward()
  local row3 = xg.grad:totable()[3]
  check(row3[1] == 0 and row3[2] == 0 and row3[3] == 0 and row3[4] == 0, 'the ignored row gets no gradient')
  check_error(function() zl.cross_entropy(x, t, { label_smoothing = 1.5 }) end,
              'cross_entropy: label_smoothing must be a number in [0, 1], got 1.5')
  check_error(function() zl.cross_entropy(x, t, { label_smoothing = -0.1 }) end,
              'cross_entropy: label_smoothing must be a number in [0, 1], got -0.1')
  check_error(function() zl.cross_entropy(x, t, { label_smoothing = 'a' }) end,
              'cross_entropy: label_smoothing must be a number in [0, 1], got a')
  check_error(function() zl.cross_entropy(x, t, { weight = zl.ones(5) }) end,
              'cross_entropy: weight must be 1-d with one entry per class ({4}), got shape {5}')
  check_error(function() zl.cross_entropy(x, t, { weight = zl.ones(1, 4) }) end,
              'cross_entropy: weight must be 1-d with one entry per class ({4}), got shape {1, 4}')
  check_error(function() zl.cross_entropy(x, t, { weight = { 1, 2, 3, 4 } }) end,
              'cross_entropy: weight must be a tensor, got table')
end)

test('CrossEntropyLoss_options', function()
  local w = zl.tensor{ 1.0, 0.5, 2.0 }
  local crit = nn.CrossEntropyLoss{ weight = w, label_smoothing = 0.1, ignore_index = 2 }
  local logits, target = zl.randn(2, 3, 3), zl.tensor{ { 0, 2, 1 }, { 1, 0, 0 } }
  local want = zl.cross_entropy(logits:reshape(6, 3), target:reshape(6),
                                { weight = w, label_smoothing = 0.1, ignore_index = 2 })
  check_close(crit(logits, target):item(), want:item(), 1e-6, '[B, T, C] flattened')
  check_eq(#crit:parameters(), 0, 'the weight is not a parameter')
  local bufs = {}
  for name in crit:named_buffers() do bufs[#bufs + 1] = name end
  check(H.same_list(bufs, { 'weight' }), 'the weight is a buffer')
  check_eq(tostring(crit), 'CrossEntropyLoss(ignore_index=2, label_smoothing=0.1)')
  check_error(function() nn.CrossEntropyLoss{ label_smoothing = 2 } end,
              'CrossEntropyLoss: label_smoothing must be a number in [0, 1], got 2')
  check_error(function() nn.CrossEntropyLoss{ weight = zl.ones(2, 2) } end,
              'CrossEntropyLoss: weight must be a 1-d tensor of one weight per class, got shape {2, 2}')
end)

test('embedding_padding_idx', function()
  local w = zl.randn(5, 3):requires_grad(true)
  local idx = zl.tensor{ { 4, 0, 4 }, { 2, 4, 1 } }
  local y = zl.embedding(idx, w, { padding_idx = -1 })
  check_close(y:totable(), zl.embedding(idx, w):totable(), 0, 'the forward is the plain one')
  y:sum():backward()
  local g = w.grad:totable()
  check(g[5][1] == 0 and g[5][2] == 0 and g[5][3] == 0, 'padding_idx -1 is row 4 and gets no gradient')
  check_close(g[1], { 1, 1, 1 }, 0, 'the other rows count their uses')
  check_error(function() zl.embedding(idx, w, { padding_idx = 5 }) end,
              'embedding: padding_idx 5 is out of range for a weight of 5 rows (expected -5..4)')
  check_error(function() zl.embedding(idx, w, { padding_idx = -6 }) end,
              'embedding: padding_idx -6 is out of range for a weight of 5 rows (expected -5..4)')
  check_error(function() zl.embedding(idx, w, { padding_idx = 1.5 }) end,
              'embedding: padding_idx must be an integer, got 1.5')
end)

test('Embedding_padding_idx', function()
  local emb = nn.Embedding(6, 4, { padding_idx = -2 })
  check_eq(emb.padding_idx, 4, 'negative padding_idx counts from the end')
  check_close(emb.weight:totable()[5], { 0, 0, 0, 0 }, 0, 'the padding row starts at zeros')
  check(emb.weight:requires_grad(), 'the weight is trained')
  emb(zl.tensor{ 4, 1, 4 }):sum():backward()
  check_close(emb.weight.grad:totable()[5], { 0, 0, 0, 0 }, 0, 'the padding row gets no gradient')
  check_close(emb.weight.grad:totable()[2], { 1, 1, 1, 1 }, 0, 'row 1 gets its gradient')
  check_eq(tostring(emb), 'Embedding(6, 4, padding_idx=4)')
  check_error(function() nn.Embedding(6, 4, { padding_idx = 6 }) end,
              'Embedding: padding_idx must be an integer in -6..5, got 6')
  check_error(function() nn.Embedding(6, 4, { padding = 1 }) end, 'Embedding: unknown option "padding"')
end)

-- avg_pool2d of one plane (a table of rows) by the definition.
local function avg_ref(plane, k, s, p, count_pad)
  local h, w, out = #plane, #plane[1], {}
  for i = 0, (h + 2 * p - k) // s do
    local row = {}
    for j = 0, (w + 2 * p - k) // s do
      local sum, n = 0, 0
      for a = i * s - p, i * s - p + k - 1 do
        for b = j * s - p, j * s - p + k - 1 do
          if a >= 0 and a < h and b >= 0 and b < w then sum, n = sum + plane[a + 1][b + 1], n + 1 end
        end
      end
      row[#row + 1] = sum / (count_pad and k * k or n)
    end
    out[#out + 1] = row
  end
  return out
end

test('avg_pool2d', function()
  local x = zl.randn(1, 1, 5, 6)
  local plane = x:totable()[1][1]
  check_close(zl.avg_pool2d(x, 2):totable()[1][1], avg_ref(plane, 2, 2, 0, true), 1e-6, 'stride = kernel')
  check_close(zl.avg_pool2d(x, 3, { stride = 2, padding = 1 }):totable()[1][1], avg_ref(plane, 3, 2, 1, true),
              1e-6, 'padding counted')
  check_close(zl.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false }):totable()[1][1],
              avg_ref(plane, 3, 2, 1, false), 1e-6, 'padding left out')
  local xg = zl.ones(1, 1, 4, 4):requires_grad(true)
  zl.avg_pool2d(xg, 2):sum():backward()
  check_close(xg.grad:totable()[1][1][1], { 0.25, 0.25, 0.25, 0.25 }, 0, 'each pixel gets 1/4 of its window')
  check_error(function() zl.avg_pool2d(x, 3, { padding = 2 }) end,
              'avg_pool2d: padding (2, 2) must be at most half the kernel size (3, 3)')
  check_error(function() zl.avg_pool2d(x, 2, { ceil_mode = true }) end, 'avg_pool2d: ceil_mode is not supported')
  local pool = nn.AvgPool2d(3, { stride = 2, padding = 1, count_include_pad = false })
  check_close(pool(x):totable(), zl.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false }):totable(),
              0, 'AvgPool2d is avg_pool2d')
  check_eq(tostring(pool), 'AvgPool2d(3x3, stride=2x2, padding=1x1, count_include_pad=false)')
  check_eq(tostring(nn.AvgPool2d(2, 1)), 'AvgPool2d(2x2, stride=1x1)')
  check_eq(tostring(nn.AvgPool2d({ 2, 3 })), 'AvgPool2d(2x3)')
  check_error(function() nn.AvgPool2d(2, { strides = 1 }) end, 'AvgPool2d: unknown option "strides"')
  check_error(function() nn.AvgPool2d(2, 2, 2) end, 'AvgPool2d: padding (2, 2) must be at most half the kernel size')
end)

test('conv2d_dilation_and_groups', function()
  -- By hand: 1..9 in a 3x3 plane under a 2x2 kernel of ones at dilation 2
  -- reads the four corners.
  local x = zl.arange(1, 10):float():reshape(1, 1, 3, 3)
  check_eq(zl.conv2d(x, zl.ones(1, 1, 2, 2), nil, { dilation = 2 }):item(), 20, 'dilation 2 reads the corners')
  -- Two groups are two convolutions side by side.
  local xi, w, b = zl.randn(2, 4, 6, 5), zl.randn(6, 2, 3, 3), zl.randn(6)
  local y = zl.conv2d(xi, w, b, { groups = 2, padding = 1, stride = { 2, 1 }, dilation = { 1, 2 } })
  local o = { stride = { 2, 1 }, padding = 1, dilation = { 1, 2 } }
  local y1 = zl.conv2d(xi:narrow(2, 1, 2), w:narrow(1, 1, 3), b:narrow(1, 1, 3), o)
  local y2 = zl.conv2d(xi:narrow(2, 3, 2), w:narrow(1, 4, 3), b:narrow(1, 4, 3), o)
  check_close(y:totable(), zl.cat({ y1, y2 }, 2):totable(), 1e-5, 'groups = 2')
  check_error(function() zl.conv2d(xi, w, nil, { groups = 3 }) end,
              'conv2d: the input\'s channels are not a multiple of groups')
  check_error(function() zl.conv2d(xi, w, nil, { groups = 2, dilation = 0 }) end,
              'conv2d: dilation must be positive, got (0, 0)')
  check_error(function() zl.conv2d(xi, w, nil, { groups = 1.5 }) end, 'conv2d: groups must be an integer, got 1.5')
end)

test('Conv2d_dilation_and_groups', function()
  local conv = nn.Conv2d(4, 6, 3, { groups = 2, dilation = 2, padding = 2 })
  check(H.same_list(conv.weight:shape(), { 6, 2, 3, 3 }), 'weight [out, in / groups, kh, kw]')
  local bound = 1 / math.sqrt(2 * 9)
  local wmax = conv.weight:abs():max():item()
  check(wmax <= bound, 'initialised within 1/sqrt(in / groups * kh * kw)')
  check(H.same_list(conv(zl.randn(1, 4, 7, 7)):shape(), { 1, 6, 7, 7 }), 'padding 2 keeps 7x7 at dilation 2')
  check_eq(tostring(conv), 'Conv2d(4 -> 6, 3x3, padding=2, dilation=2, groups=2)')
  local dw = nn.Conv2d(3, 3, 3, { groups = 3, bias = false })
  check(H.same_list(dw.weight:shape(), { 3, 1, 3, 3 }), 'depthwise weight')
  check_error(function() nn.Conv2d(4, 6, 3, { groups = 4 }) end,
              'Conv2d: in_channels (4) and out_channels (6) must be multiples of groups (4)')
  check_error(function() nn.Conv2d(4, 6, 3, { dilation = 0 }) end, 'Conv2d: dilation')
end)

H.done()
