-- The nn group of tests/interop/check_ops_torch.py (torch's side in nn.py):
-- cross_entropy's class weights and label smoothing, embedding's
-- padding_idx, avg_pool2d, conv2d's dilation and groups, and the modules
-- that carry them.
local zl = require 'zlua'
local nn = require 'zlua.nn'

local cases = {}
local function case(name, inputs, grad, fn)
  cases[#cases + 1] = { name = name, inputs = inputs, grad = grad, fn = fn }
end

-- cross_entropy: a row ignored, class 2 as ignore_index, 1-d logits.
local x, w = zl.randn(6, 5) * 2, zl.rand(5) + 0.25
local y = zl.tensor({ 0, 4, -100, 2, 2, 3 }, 'i64')
local y2 = zl.tensor({ 0, 4, 1, 2, 2, 3 }, 'i64')
for _, red in ipairs({ 'mean', 'sum', 'none' }) do
  case('ce_weight_' .. red, { x = x, y = y, w = w }, { 'x' },
       function(t) return zl.cross_entropy(t.x, t.y, { weight = t.w, reduction = red }) end)
  case('ce_smooth_' .. red, { x = x, y = y }, { 'x' },
       function(t) return zl.cross_entropy(t.x, t.y, { label_smoothing = 0.1, reduction = red }) end)
  case('ce_weight_smooth_' .. red, { x = x, y = y, w = w }, { 'x' },
       function(t)
         return zl.cross_entropy(t.x, t.y, { weight = t.w, label_smoothing = 0.3, reduction = red })
       end)
end
case('ce_weight_smooth_ignore_class', { x = x, y = y2, w = w }, { 'x' },
     function(t) return zl.cross_entropy(t.x, t.y, { weight = t.w, label_smoothing = 0.2, ignore_index = 2 }) end)
case('ce_full_smoothing', { x = x, y = y, w = w }, { 'x' },
     function(t) return zl.cross_entropy(t.x, t.y, { weight = t.w, label_smoothing = 1 }) end)
case('ce_1d', { x = zl.randn(7), y = zl.tensor(3, 'i64'), w = zl.rand(7) + 0.5 }, { 'x' },
     function(t) return zl.cross_entropy(t.x, t.y, { weight = t.w, label_smoothing = 0.15 }) end)
case('ce_bf16_logits_f32_loss', { x = x:bf16(), y = y, w = w }, { 'x' },
     function(t) return zl.cross_entropy(t.x, t.y, { weight = t.w, label_smoothing = 0.1, dtype = 'f32' }) end)
case('CrossEntropyLoss_btc', { x = zl.randn(2, 3, 4), y = zl.tensor({ { 0, 3, 1 }, { 2, 2, 0 } }, 'i64'),
                              w = zl.rand(4) + 0.5 }, { 'x' },
     function(t)
       return nn.CrossEntropyLoss{ weight = t.w, label_smoothing = 0.25 }(t.x:reshape(6, 4), t.y:reshape(6))
     end)

-- embedding with a padding row used several times.
local idx = zl.tensor({ { 2, 0, 2, 6 }, { 1, 2, 5, 6 } }, 'i64')
case('embedding_padding_idx', { w = zl.randn(7, 3), i = idx }, { 'w' },
     function(t) return zl.embedding(t.i, t.w, { padding_idx = 2 }) end)
case('embedding_padding_idx_negative', { w = zl.randn(7, 3), i = idx }, { 'w' },
     function(t) return zl.embedding(t.i, t.w, { padding_idx = -1 }) end)

-- avg_pool2d.
local img = zl.randn(2, 3, 7, 6)
case('avg_pool2d_k2', { x = img }, { 'x' }, function(t) return zl.avg_pool2d(t.x, 2) end)
case('avg_pool2d_k3_s2_p1', { x = img }, { 'x' },
     function(t) return zl.avg_pool2d(t.x, 3, { stride = 2, padding = 1 }) end)
case('avg_pool2d_k3_s2_p1_exclude_pad', { x = img }, { 'x' },
     function(t) return zl.avg_pool2d(t.x, 3, { stride = 2, padding = 1, count_include_pad = false }) end)
case('avg_pool2d_rect', { x = img }, { 'x' },
     function(t)
       return zl.avg_pool2d(t.x, { 3, 2 }, { stride = { 1, 2 }, padding = { 1, 1 }, count_include_pad = false })
     end)
case('AvgPool2d', { x = img }, { 'x' }, function(t) return nn.AvgPool2d(2, 1)(t.x) end)

-- conv2d with groups and dilation.
case('conv2d_groups2', { x = zl.randn(2, 4, 6, 5), w = zl.randn(6, 2, 3, 3), b = zl.randn(6) }, { 'x', 'w', 'b' },
     function(t) return zl.conv2d(t.x, t.w, t.b, { groups = 2, padding = 1 }) end)
case('conv2d_depthwise', { x = zl.randn(2, 3, 7, 7), w = zl.randn(3, 1, 3, 3) }, { 'x', 'w' },
     function(t) return zl.conv2d(t.x, t.w, nil, { groups = 3, stride = 2, padding = 1 }) end)
case('conv2d_depthwise_multiplier', { x = zl.randn(1, 2, 6, 6), w = zl.randn(4, 1, 3, 2), b = zl.randn(4) },
     { 'x', 'w', 'b' }, function(t) return zl.conv2d(t.x, t.w, t.b, { groups = 2 }) end)
case('conv2d_dilation2', { x = zl.randn(2, 2, 9, 8), w = zl.randn(3, 2, 3, 3), b = zl.randn(3) }, { 'x', 'w', 'b' },
     function(t) return zl.conv2d(t.x, t.w, t.b, { dilation = 2, padding = 2 }) end)
case('conv2d_dilation_stride_groups', { x = zl.randn(2, 4, 9, 8), w = zl.randn(6, 2, 3, 2), b = zl.randn(6) },
     { 'x', 'w', 'b' },
     function(t)
       return zl.conv2d(t.x, t.w, t.b, { dilation = { 2, 3 }, stride = { 2, 1 }, padding = { 1, 2 }, groups = 2 })
     end)
case('conv2d_1x1_groups', { x = zl.randn(2, 4, 3, 3), w = zl.randn(6, 2, 1, 1) }, { 'x', 'w' },
     function(t) return zl.conv2d(t.x, t.w, nil, { groups = 2 }) end)

return cases
