-- The transformer group of tests/interop/check_ops_torch.py (torch's side in
-- transformer.py): rms_norm, rotary positions, and attention with grouped
-- key/value heads, boolean masks and a causal cut with fewer queries than keys.
local zl = require 'zlua'

local cases = {}
local function case(name, inputs, grad, fn)
  cases[#cases + 1] = { name = name, inputs = inputs, grad = grad, fn = fn }
end

case('rms_norm_f32', { x = zl.randn(3, 4, 8), w = zl.randn(8) }, { 'x', 'w' },
     function(t) return zl.rms_norm(t.x, 8, t.w, 1e-6) end)
case('rms_norm_two_dims_default_eps', { x = zl.randn(2, 4, 8) }, { 'x' },
     function(t) return zl.rms_norm(t.x, { 4, 8 }) end)
case('rms_norm_bf16', { x = zl.randn(4, 16):to('bf16'), w = zl.randn(16) }, { 'x', 'w' },
     function(t) return zl.rms_norm(t.x, 16, t.w, 1e-5) end)

case('rotary_tables_2d', { x = zl.randn(2, 3, 5, 8), cos = zl.randn(5, 8), sin = zl.randn(5, 8) }, { 'x' },
     function(t) return zl.rotary(t.x, t.cos, t.sin) end)
-- x [B, T, H, D] read as [B, H, T, D] through a transposed view.
case('rotary_tables_4d_strided', { x = zl.randn(2, 5, 3, 8), cos = zl.randn(2, 1, 5, 8), sin = zl.randn(2, 1, 5, 8) },
     { 'x' }, function(t) return zl.rotary(t.x:transpose(2, 3), t.cos, t.sin) end)
case('rotary_bf16', { x = zl.randn(2, 3, 5, 8):to('bf16'), cos = zl.randn(5, 8):to('bf16'),
                      sin = zl.randn(5, 8):to('bf16') }, { 'x' },
     function(t) return zl.rotary(t.x, t.cos, t.sin) end)
case('apply_rotary_pos_emb', { q = zl.randn(2, 4, 5, 8), k = zl.randn(2, 2, 5, 8), cos = zl.randn(2, 5, 8),
                               sin = zl.randn(2, 5, 8) }, { 'q', 'k' },
     function(t)
       local q, k = zl.apply_rotary_pos_emb(t.q, t.k, t.cos, t.sin)
       return zl.cat({ q, k }, 2)
     end)

local pad = zl.ones(2, 1, 1, 6, 'bool')
pad[1][1][1][5], pad[1][1][1][6] = false, false
local rows = zl.ones(2, 1, 4, 6, 'bool')
for j = 1, 6 do rows[2][1][3][j] = false end
rows[1][1][1][1], rows[1][1][2][4] = false, false

case('attention_gqa_causal', { q = zl.randn(2, 4, 5, 8), k = zl.randn(2, 2, 5, 8), v = zl.randn(2, 2, 5, 8) },
     { 'q', 'k', 'v' }, function(t) return zl.attention(t.q, t.k, t.v, { causal = true }) end)
case('attention_one_kv_head', { q = zl.randn(2, 4, 5, 8), k = zl.randn(2, 1, 6, 8), v = zl.randn(2, 1, 6, 4) },
     { 'q', 'k', 'v' }, function(t) return zl.attention(t.q, t.k, t.v, { scale = 0.3 }) end)
case('attention_padding_mask', { q = zl.randn(2, 4, 4, 8), k = zl.randn(2, 2, 6, 8), v = zl.randn(2, 2, 6, 8),
                                 mask = pad }, { 'q', 'k', 'v' },
     function(t) return zl.attention(t.q, t.k, t.v, { attn_mask = t.mask }) end)
case('attention_fully_masked_rows', { q = zl.randn(2, 4, 4, 8), k = zl.randn(2, 2, 6, 8), v = zl.randn(2, 2, 6, 8),
                                      mask = rows }, { 'q', 'k', 'v' },
     function(t) return zl.attention(t.q, t.k, t.v, { mask = t.mask }) end)
case('attention_causal_kv_cache', { q = zl.randn(2, 4, 3, 8), k = zl.randn(2, 2, 7, 8), v = zl.randn(2, 2, 7, 8) },
     { 'q', 'k', 'v' },
     function(t) return zl.attention(t.q, t.k, t.v, { causal = true }) end)
case('attention_causal_and_mask', { q = zl.randn(2, 4, 6, 8), k = zl.randn(2, 2, 6, 8), v = zl.randn(2, 2, 6, 8),
                                    mask = pad }, { 'q', 'k', 'v' },
     function(t) return zl.attention(t.q, t.k, t.v, { causal = true, mask = t.mask }) end)

return cases
