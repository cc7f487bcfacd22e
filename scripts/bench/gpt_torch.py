"""PyTorch's side of scripts/bench/gpt.lua: the same GPT (zlua.nn.GPT's shapes,
initialisation and AdamW) trained for a number of steps on random tokens, one
line of figures at the end. PyTorch eager as its users run it: the fused
scaled_dot_product_attention, bf16 through autocast with f32 weights.
Run by gpt.lua, not by hand; exits 77 when PyTorch is missing."""
import argparse
import math
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


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, c):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.blocks = nn.ModuleList(Block(c, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for blk in self.blocks:
            for p in (blk.proj.weight, blk.fc_proj.weight):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("n_layer", 4), ("n_embd", 256), ("n_head", 4), ("vocab", 50257), ("block_size", 128),
                          ("batch", 4), ("steps", 10), ("warmup", 2), ("threads", 2), ("seed", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--precision", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("SKIP PyTorch sees no CUDA device", flush=True)
        sys.exit(77)
    # f32 is f32 on both sides: no TF32 in PyTorch's matrix products.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = GPT(a.vocab, a.block_size, a.n_layer, a.n_head, a.n_embd).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    gen = torch.Generator().manual_seed(a.seed)
    idx = torch.randint(0, a.vocab, (a.batch, a.block_size), generator=gen).to(dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.block_size), generator=gen).to(dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times, losses, faults = [], [], 0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
    print(f"RESULT ms {statistics.median(times[a.warmup:]):.3f} faults {faults / a.steps:.1f} "
          f"loss0 {losses[0]:.6f} loss {losses[-1]:.6f} peak {peak} version {torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
