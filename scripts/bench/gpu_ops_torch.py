"""PyTorch's side of scripts/bench/gpu_ops.lua: the same ops at the same GPT-2
124M shapes and dtypes, timed the same way (median of calls, each between two
synchronisations). Prints "OP name dtype fwd_ms fwdbwd_ms" lines; exits 77
without PyTorch or a CUDA device. Run by gpu_ops.lua, not by hand."""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP PyTorch is not installed ({e})", flush=True)
    sys.exit(77)

B, T, C, H, V = 8, 1024, 768, 12, 50257
N = B * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ops", default="")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP PyTorch sees no CUDA device", flush=True)
        sys.exit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    wanted = set(a.ops.split(",")) if a.ops else None

    def randn(shape, dt, grad=True):
        return torch.randn(shape, device=dev, dtype=dt).requires_grad_(grad)

    def timed(fn):
        ts = []
        for i in range(a.iters + 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            if i >= 3:
                ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    def ops(dt):
        x, w, b = randn((N, C), dt), randn((C,), dt), randn((C,), dt)
        yield "layer_norm", (lambda: F.layer_norm(x, (C,), w, b)), (x, w, b)
        x2, w2, b2 = randn((N, C), dt), randn((4 * C, C), dt), randn((4 * C,), dt)
        yield "linear", (lambda: F.linear(x2, w2, b2)), (x2, w2, b2)
        x3 = randn((N, 4 * C), dt)
        yield "gelu", (lambda: F.gelu(x3)), (x3,)
        q, k, v = (randn((B, H, T, C // H), dt) for _ in range(3))
        yield "attention", (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), (q, k, v)
        we = randn((V, C), dt)
        idx = torch.randint(0, V, (B, T), device=dev)
        yield "embedding", (lambda: F.embedding(idx, we)), (we,)
        lg = randn((N, V), dt)
        tgt = torch.randint(0, V, (N,), device=dev)
        yield "cross_entropy", (lambda: F.cross_entropy(lg.float(), tgt)), (lg,)

    for name in a.dtypes.split(","):
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}[name]
        for op, fwd, leaves in ops(dt):
            if wanted and op not in wanted:
                continue
            y = fwd()
            g = torch.randn_like(y) if y.numel() > 1 else None
            del y

            def both():
                for leaf in leaves:
                    leaf.grad = None
                fwd().backward(g)
            print(f"OP {op} {name} {timed(fwd):.4f} {timed(both):.4f}", flush=True)
            torch.cuda.empty_cache()
        if name == "f32" and (not wanted or "adamw" in wanted):
            shapes = [(V, C), (T, C), (C,), (C,)]
            for _ in range(12):
                shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,),
                           (C, 4 * C), (C,)]
            params = [torch.randn(s, device=dev, requires_grad=True) for s in shapes]
            for p in params:
                p.grad = torch.randn_like(p)
            opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
            s = timed(opt.step)
            print(f"OP adamw f32 {s:.4f} {s:.4f}", flush=True)
    print(f"version {torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
