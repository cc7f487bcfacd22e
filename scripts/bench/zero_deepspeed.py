"""DeepSpeed's side of scripts/bench/zero_vs_deepspeed.lua: gpt_torch.py's GPT
(zlua.nn.GPT's shapes) started from the weights zlua wrote, trained through
deepspeed.initialize on the windows zlua's ranks read, one line of figures
from rank 0 at the end. Run by the Lua script under DeepSpeed's launcher with
DS_ACCELERATOR=cpu, not by hand; exits 77 when torch or deepspeed is missing."""
import argparse
import json
import os
import statistics
import struct
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import deepspeed
except ImportError as e:
    print(f"SKIP DeepSpeed or PyTorch is not installed ({e}); python3 -m pip install torch deepspeed", flush=True)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT  # noqa: E402  (after the path that finds it)

DTYPES = {"F32": torch.float32, "I64": torch.int64}


def read_safetensors(path):
    """{name: tensor} of a safetensors file whose tensors are F32 or I64 (all
    zlua writes here); a few lines instead of a dependency on the safetensors package."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, info in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        data = bytearray(raw[8 + n + lo:8 + n + hi])
        out[name] = torch.frombuffer(data, dtype=DTYPES[info["dtype"]]).view(info["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    for name in ("n_layer", "n_embd", "n_head", "vocab", "block_size", "micro", "steps", "warmup", "threads",
                 "stage"):
        ap.add_argument("--" + name, type=int, required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--config", required=True, help="the ds_config.json both engines read")
    ap.add_argument("--local_rank", type=int, default=0)  # passed by DeepSpeed's launcher
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    model = GPT(a.vocab, a.block_size, a.n_layer, a.n_head, a.n_embd)
    weights = read_safetensors(a.weights)
    params = list(model.parameters())
    if len(params) != len(weights):
        raise SystemExit(f"zero_deepspeed.py: {a.weights} holds {len(weights)} tensors, the model {len(params)}")
    with torch.no_grad():
        for i, p in enumerate(params):
            w = weights[f"p{i + 1:03d}"]
            if tuple(w.shape) != tuple(p.shape):
                raise SystemExit(f"zero_deepspeed.py: parameter {i + 1} is {tuple(p.shape)}, the file's {tuple(w.shape)}")
            p.copy_(w)
    with open(a.config) as f:
        config = json.load(f)
    config["zero_optimization"]["stage"] = a.stage
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    tokens = read_safetensors(a.data)["tokens"]  # [steps, ranks, micro, block_size + 1]
    times, losses = [], []
    for s in range(a.warmup + a.steps):
        ids = tokens[s, rank]
        x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        dist.barrier()
        t0 = time.perf_counter()
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    if rank == 0:
        print(f"RESULT {statistics.median(times[a.warmup:]):.6f} world {world} version {deepspeed.__version__} "
              f"torch {torch.__version__}", flush=True)
        print("LOSSES " + " ".join(f"{v:.9g}" for v in losses), flush=True)


if __name__ == "__main__":
    main()
