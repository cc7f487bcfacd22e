"""torch's side of tests/interop/ops/transformer.lua: Hugging Face's
LlamaRMSNorm and rotate_half formulas, and F.scaled_dot_product_attention
with key/value heads repeated for grouped-query attention."""
import torch
import torch.nn.functional as F

F32_EPS = torch.finfo(torch.float32).eps


def rms_norm(x, dims, w, eps, round_to=None):
    """HF's LlamaRMSNorm: the normalised x back in the input's dtype, then the weight."""
    h = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    if round_to is not None:
        h = h.to(round_to).to(x.dtype)
    return h if w is None else w * h


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def attention(t, causal=False, scale=None, mask=None):
    q, k, v = t['q'], t['k'], t['v']
    rep = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    if causal:
        # Bottom-right aligned, as a KV cache needs: query i sees keys up to i + Tk - Tq.
        tq, tk = q.shape[-2], k.shape[-2]
        keep = torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=tk - tq)
        mask = keep if mask is None else mask & keep
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def apply_rotary_pos_emb(t):
    cos, sin = t['cos'].unsqueeze(1), t['sin'].unsqueeze(1)
    return torch.cat((rotary(t['q'], cos, sin), rotary(t['k'], cos, sin)), dim=1)


CASES = {
    'rms_norm_f32': lambda t: rms_norm(t['x'], (-1,), t['w'], 1e-6),
    'rms_norm_two_dims_default_eps': lambda t: F.rms_norm(t['x'], (4, 8), None, F32_EPS),
    'rms_norm_bf16': lambda t: rms_norm(t['x'], (-1,), t['w'], 1e-5, torch.bfloat16),
    'rotary_tables_2d': lambda t: rotary(t['x'], t['cos'], t['sin']),
    'rotary_tables_4d_strided': lambda t: rotary(t['x'].transpose(1, 2), t['cos'], t['sin']),
    'rotary_bf16': lambda t: rotary(t['x'], t['cos'], t['sin']),
    'apply_rotary_pos_emb': apply_rotary_pos_emb,
    'attention_gqa_causal': lambda t: attention(t, causal=True),
    'attention_one_kv_head': lambda t: F.scaled_dot_product_attention(t['q'], t['k'], t['v'], scale=0.3,
                                                                       enable_gqa=True),
    'attention_padding_mask': lambda t: attention(t, mask=t['mask']),
    'attention_fully_masked_rows': lambda t: attention(t, mask=t['mask']),
    'attention_causal_kv_cache': lambda t: attention(t, causal=True),
    'attention_causal_and_mask': lambda t: attention(t, causal=True, mask=t['mask']),
}

# bf16 inputs and results: zlua rounds once in f32, torch computes in float64.
TOL = {
    'rms_norm_bf16': (2e-2, 2e-2),
    'rotary_bf16': (1e-2, 1e-2),
}
