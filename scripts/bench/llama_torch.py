"""PyTorch's side of scripts/bench/llama.lua: the same LLaMA (zlua.nn.Llama's
shapes, rotary positions, grouped-query attention, initialisation and AdamW)
trained for a number of steps on random tokens, one line of figures at the
end. PyTorch eager at its fastest for this model: F.rms_norm, F.silu and the
fused scaled_dot_product_attention with enable_gqa; bf16 through autocast
with f32 weights. Run by llama.lua, not by hand; exits 77 without PyTorch."""
import argparse
import resource
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP PyTorch is not installed ({e}); python3 -m pip install torch", flush=True)
    sys.exit(77)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c, m, h, kv):
        super().__init__()
        self.h, self.kv, self.d = h, kv, c // h
        self.input_layernorm = nn.RMSNorm(c, eps=1e-6)
        self.q_proj = nn.Linear(c, h * self.d, bias=False)
        self.k_proj = nn.Linear(c, kv * self.d, bias=False)
        self.v_proj = nn.Linear(c, kv * self.d, bias=False)
        self.o_proj = nn.Linear(h * self.d, c, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(c, eps=1e-6)
        self.gate_proj = nn.Linear(c, m, bias=False)
        self.up_proj = nn.Linear(c, m, bias=False)
        self.down_proj = nn.Linear(m, c, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.kv, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, c))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, vocab, n_layer, c, m, h, kv, t):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, c)
        self.layers = nn.ModuleList(Layer(c, m, h, kv) for _ in range(n_layer))
        self.norm = nn.RMSNorm(c, eps=1e-6)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, 0.02)
        d = c // h
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        freqs = torch.arange(t).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx, targets):
        x = self.embed_tokens(idx)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("n_layer", 4), ("hidden", 512), ("intermediate", 1536), ("heads", 8), ("kv_heads", 2),
                          ("vocab", 32000), ("seq", 256), ("batch", 4), ("steps", 10), ("warmup", 3),
                          ("threads", 2), ("seed", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--precision", default="f32", choices=("f32", "bf16"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Llama(a.vocab, a.n_layer, a.hidden, a.intermediate, a.heads, a.kv_heads, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    gen = torch.Generator().manual_seed(a.seed)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
    times, losses, faults = [], [], 0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(f"RESULT ms {statistics.median(times[a.warmup:]):.3f} faults {faults / a.steps:.1f} "
          f"loss0 {losses[0]:.6f} loss {losses[-1]:.6f} version {torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
