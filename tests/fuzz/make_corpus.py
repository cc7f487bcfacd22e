#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): a few
small valid files of each format and a few near misses, kilobytes in all.
Run it from anywhere; it replaces the seeds it writes and leaves any others
(such as a finding's input kept as a regression case) alone."""
import copy
import gzip
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data):
    # mtime 0: the same bytes on every run
    return gzip.compress(data, mtime=0)


# ---- idx: 00 00 <code> <ndim>, big-endian u32 dims, big-endian elements
def idx(code, dims, payload):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


put("idx", "u8_2x3", idx(0x08, [2, 3], bytes(range(6))))
put("idx", "i8_4", idx(0x09, [4], bytes([0, 1, 0x7F, 0x80])))
put("idx", "i16_3", idx(0x0B, [3], struct.pack(">3h", -2, 0, 300)))
put("idx", "i32_2", idx(0x0C, [2], struct.pack(">2i", -70000, 5)))
put("idx", "f32_2x2", idx(0x0D, [2, 2], struct.pack(">4f", 1.5, -2.0, 0.0, 3.25)))
put("idx", "f64_3", idx(0x0E, [3], struct.pack(">3d", 1e300, -1e-300, 0.5)))
put("idx", "zero_dim", idx(0x08, [0, 5], b""))
put("idx", "u8_gz", gz(idx(0x08, [4, 4], bytes(range(16)))))
put("idx", "truncated", idx(0x0C, [3], struct.pack(">2i", 1, 2)))
put("idx", "trailing", idx(0x08, [2], b"abc"))
put("idx", "huge_dims", idx(0x08, [0xFFFFFFFF, 0xFFFFFFFF, 0], b""))

# ---- csv: numbers, optional header, blank lines, CRLF, gzip
put("csv", "plain", "1,2,3\n4,5,6\n")
put("csv", "header", "a,b\n1.5,-2e3\n0x10,inf\n")
put("csv", "crlf_blank", "1, 2\r\n\r\n 3 ,4\r\n")
put("csv", "no_newline", "7,8,9")
put("csv", "gz", gz(b"0.25,0.5\n1,2\n3,4\n"))
put("csv", "ragged", "1,2\n3\n")
put("csv", "not_a_number", "1,x\n")
put("csv", "out_of_range", "1e39,2\n")

# ---- cifar10: records of a label byte (0..9) and 3072 pixel bytes
PIX = 3 * 32 * 32


def record(label, seed):
    return bytes([label]) + bytes((seed + i * 7) & 0xFF for i in range(PIX))


put("cifar10", "one", record(3, 1))
put("cifar10", "two", record(7, 6) + record(2, 7))
put("cifar10", "two_gz", gz(record(0, 2) + record(9, 3)))
put("cifar10", "bad_label", record(10, 4))
put("cifar10", "partial", record(1, 5)[:100])

# ---- gzip: a mode byte (target gzip.c: 0 raw file, 1 gzipped by the harness,
# 2 the same cut short, 3 two members; level in the bits above), then data
text = b"hello, zlua\n" * 4
put("gzip", "raw_member", bytes([0]) + gz(text))
# A member with the optional name and comment fields, written by hand.
body = zlib.compressobj(6, zlib.DEFLATED, -15)
deflated = body.compress(text) + body.flush()
member = (b"\x1f\x8b\x08\x18" + b"\0\0\0\0" + b"\0\xff" + b"x.txt\0" + b"a comment\0" + deflated
          + struct.pack("<II", zlib.crc32(text), len(text)))
put("gzip", "raw_name_comment", bytes([0]) + member)
put("gzip", "raw_plain", bytes([0]) + b"not gzip at all\n")
put("gzip", "raw_two_members", bytes([0]) + gz(b"ab") + gz(b"cd"))
put("gzip", "gzipped", bytes([1 | 6 << 2]) + text)
put("gzip", "gzipped_stored", bytes([1]) + b"\x00\x01\x02\x03")
put("gzip", "cut_short", bytes([2 | 9 << 2]) + text)
put("gzip", "two_members", bytes([3 | 1 << 2]) + text)


# ---- safetensors: 8-byte little-endian header length, JSON header, data
def safetensors(tensors, metadata=None, pad=True, header=None):
    """tensors: list of (name, dtype, shape, bytes) in data order."""
    h, off, data = {}, 0, b""
    if metadata is not None:
        h["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    text = header if header is not None else json.dumps(h, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + data


f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
put("safetensors", "one_f32", safetensors([("w", "F32", [2, 2], f32)]))
put("safetensors", "dtypes", safetensors([
    ("a", "F16", [2], struct.pack("<2e", 1.0, -0.5)),
    ("b", "BF16", [1], b"\x80\x3f"),
    ("c", "I32", [2], struct.pack("<2i", -1, 7)),
    ("d", "I64", [1], struct.pack("<q", 1 << 40)),
    ("e", "U8", [3], b"xyz"),
    ("f", "BOOL", [2], b"\x00\x01"),
], metadata={"format": "pt", "note": "caf\u00e9"}))
put("safetensors", "unknown_dtype", safetensors([("x", "F64", [1], struct.pack("<d", 2.5)),
                                                 ("y", "U8", [1], b"z")]))
put("safetensors", "empty_tensor", safetensors([("z", "F32", [0, 3], b""), ("s", "F32", [], b"\0\0\x80\x3f")]))
put("safetensors", "no_tensors", safetensors([], metadata={}))
put("safetensors", "bad_bool", safetensors([("f", "BOOL", [2], b"\x00\x02")]))
put("safetensors", "gap", safetensors([], header=b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
    + b"\0" * 8)
put("safetensors", "overlap", safetensors([], header=(
    b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
    b'"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}')) + b"abc")
put("safetensors", "escapes", safetensors([], header=(
    b'{"\\u00e9\\ud83d\\ude00\\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')) + b"q")

# ---- json: DeepSpeed configs as people write them, and near misses
ds = {
    "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                               "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "reduce_bucket_size": 2e8, "nvme_path": None},
    "bf16": {"enabled": "auto"}, "gradient_clipping": 1.0,
}
put("json", "deepspeed_indented", json.dumps(ds, indent=2))
put("json", "deepspeed_compact", json.dumps(ds, separators=(",", ":")))
put("json", "comments_trailing_commas",
    '// a DeepSpeed config\n{\n  "fp16": {"enabled": true, /* dynamic */ "loss_scale": 0,},\n  "steps": [1, 2,],\n}\n')
put("json", "numbers", '[0, -0, -0.0, 1e5, 2E-3, 9223372036854775807, -9223372036854775808, '
    '9223372036854775808, 123456789012345678901234, 1.7976931348623157e308, 5e-324]')
put("json", "strings", '["\\u0000", "\\ud83d\\ude00", "caf\\u00e9", "\\"\\\\\\/\\b\\f\\n\\r\\t", "\u00e9\u4e2d"]')
put("json", "bom_nested", "\ufeff" + '{"a": {"b": [[], {}, [null, true, false]]}}')
put("json", "deep", "[" * 40 + "]" * 40)
put("json", "duplicate_key", '{"a": 1,\n "a": 2}')
put("json", "unterminated", '{"a": "b')
put("json", "lone_surrogate", '["\\udc00"]')
put("json", "leading_zero", '[01]')


# ---- manifest: engine.json as a save writes it, over the files the target
# (manifest.c) puts beside it; keep these bytes in step with that file.
FILES = {"model.safetensors": b"zlua fuzz: model\n"}
for r in range(4):
    FILES["optim_rank%d.safetensors" % r] = b"zlua fuzz: optimizer shard %d\n" % r


def entry(name):
    return {"bytes": len(FILES[name]), "crc32": zlib.crc32(FILES[name])}


def engine_json(partitions=1, optimizer=True, **extra):
    s = {
        "client_state": {"epoch": 1, "note": "x"}, "config": None, "format": "zlua-checkpoint-2",
        "global_samples": 2, "global_steps": 1, "micro_steps": 1, "precision": "fp16",
        "rng": [{"offset": 14, "seed": 1}], "skipped_steps": 1, "tag": "one", "world_size": 1,
        "loss_scaler": {"cur_hysteresis": 1, "cur_iter": 1, "cur_scale": 65536.0, "last_overflow_iter": 0},
        "lr_scheduler": {"last_batch_iteration": -1},
        "manifest": {"model.safetensors": entry("model.safetensors")},
    }
    if optimizer:
        s["optimizer"] = {
            "param_groups": [{"adam_w_mode": True, "amsgrad": False, "betas": [0.9, 0.999],
                              "bias_correction": True, "eps": 1e-08, "lr": 0.0, "weight_decay": 0.0}],
            "state": {"1": {"step": 1}}, "tensor_keys": ["exp_avg", "exp_avg_sq"], "type": "AdamW",
            "zero": {"align": 16, "partitions": partitions, "stage": 1, "world_size": partitions, "params": [
                {"group": 1, "k": 16, "name": "1.weight", "numel": 6, "shape": [2, 3]},
                {"group": 1, "k": 16, "name": "1.bias", "numel": 2, "shape": [2]}]},
        }
        for r in range(partitions):
            n = "optim_rank%d.safetensors" % r
            s["manifest"][n] = entry(n)
        if partitions > 1:
            s["world_size"] = partitions
            s["rng"] = [{"offset": 14, "seed": 1 + r} for r in range(partitions)]
    s.update(extra)
    return s


def dump(s):
    return json.dumps(s, indent=1, sort_keys=True)


put("manifest", "one_rank", dump(engine_json()))
put("manifest", "two_partitions", dump(engine_json(2)))
put("manifest", "model_only", dump(engine_json(optimizer=False, dataloader={
    "epoch": 0, "batches": 3, "world_size": 1, "micro_batch_size": 2})))
bad = engine_json()
bad["manifest"]["model.safetensors"]["crc32"] ^= 1
put("manifest", "wrong_crc", dump(bad))
bad = engine_json(4)
del bad["manifest"]["optim_rank3.safetensors"]
put("manifest", "partitions_over_files", dump(bad))
put("manifest", "manifest_null", dump(engine_json(manifest=None)))
bad = copy.deepcopy(engine_json())
bad["optimizer"]["zero"]["params"][0]["k"] = 8
put("manifest", "wrong_chunk", dump(bad))
put("manifest", "not_json", '{"format": "zlua-checkpoint-2", ')
