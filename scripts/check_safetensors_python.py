#!/usr/bin/env python3
"""Interop check between zlua's .safetensors files and Python's safetensors
library. A test tool run by CTest (tests/interop/test_safetensors_python.sh),
not part of zlua's runtime.

  check_safetensors_python.py ZLUA_EXE

1. zlua writes every dtype (0-d, empty, inf/nan/-0.0, extreme integers) with
   metadata; the library reads it back (safe_open with numpy; bf16 through
   deserialize, as numpy has no bf16) and every value is compared.
2. The library writes the same tensors (safetensors.numpy.save_file; bf16
   through ml_dtypes when installed, otherwise as raw bf16 bits given to
   serialize_file); zlua loads them and compares every value.
Exits 0 on success, 1 on any mismatch, and 0 with a "skipped:" line when
python3 lacks safetensors or numpy.
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import save_file
except ImportError:
    print("skipped: python3 lacks safetensors/numpy (pip install safetensors numpy)")
    sys.exit(0)

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

INF = float("inf")
NAN = float("nan")

# name -> (safetensors dtype, shape, values in row-major order). Every float
# is exact in its dtype, so both sides state the same numbers.
TENSORS = {
    "f32": ("F32", [3, 4], [(i - 5) * 0.25 for i in range(12)]),
    "f32_special": ("F32", [4], [INF, -INF, NAN, -0.0]),
    "f16": ("F16", [2, 3], [-1.5, -0.5, 0.0, 0.5, 1.5, 65504.0]),
    "bf16": ("BF16", [5], [1.5, -2.0, 256.0, 0.0078125, -3.5]),
    "i32": ("I32", [2, 2], [2147483647, -2147483648, 0, -1]),
    "i64": ("I64", [3], [9007199254740993, -9223372036854775808, 42]),
    "u8": ("U8", [4], [0, 1, 128, 255]),
    "bool": ("BOOL", [3], [True, False, True]),
    "scalar": ("F32", [], [2.5]),
    "empty": ("F32", [2, 0], []),
}
METADATA = {"format": "pt", "note": 'caf\u00e9 \u2603 "quoted" \\ back'}

NUMPY = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}
ZLUA_DTYPE = {"F32": "f32", "F16": "f16", "BF16": "bf16", "I32": "i32", "I64": "i64", "U8": "u8", "BOOL": "bool"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def bf16_bits(values):
    """The bf16 bit patterns of values exact in bf16: the top half of their f32 bits."""
    return (np.array(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def same_values(got, want):
    """Equal element for element: NaN matches NaN, and -0.0 only -0.0."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if isinstance(w, float):
            g = float(g)
            if math.isnan(w):
                if not math.isnan(g):
                    return False
            elif g != w or math.copysign(1, g) != math.copysign(1, w):
                return False
        elif g != w:
            return False
    return True


def lua_literal(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return "math.mininteger" if v == -(2 ** 63) else str(v)
    if math.isnan(v):
        return "(0/0)"
    if math.isinf(v):
        return "math.huge" if v > 0 else "-math.huge"
    return repr(v)


def lua_string(s):
    return '"' + "".join("\\%d" % b if b < 32 or b >= 127 or b in (34, 92) else chr(b) for b in s.encode()) + '"'


def lua_expected():
    rows = []
    for name, (dt, shape, values) in TENSORS.items():
        rows.append("  {%s, %s, {%s}, {%s}}," % (lua_string(name), lua_string(ZLUA_DTYPE[dt]),
                                               ", ".join(map(str, shape)), ", ".join(map(lua_literal, values))))
    meta = ", ".join("[%s] = %s" % (lua_string(k), lua_string(v)) for k, v in METADATA.items())
    return "local TENSORS = {\n%s\n}\nlocal METADATA = {%s}\n" % ("\n".join(rows), meta)


LUA_WRITE = r"""
local zl = require 'zlua'
local list = {}
for i, e in ipairs(TENSORS) do
  local name, dtype, shape, values = e[1], e[2], e[3], e[4]
  local t
  if #shape == 0 then t = zl.tensor(values[1], dtype)
  elseif #values == 0 then t = zl.zeros(shape, dtype)
  else t = zl.tensor(values, dtype):view(table.unpack(shape)) end
  list[i] = {name, t}
end
zl.save_safetensors(arg[1], list, METADATA)
"""

LUA_CHECK = r"""
local zl = require 'zlua'
local bad = 0
local function fail(msg) bad = bad + 1 print('FAIL zlua: ' .. msg) end
local function flat(x, out)
  out = out or {}
  if type(x) == 'table' then for _, v in ipairs(x) do flat(v, out) end else out[#out + 1] = x end
  return out
end
local got = {}
for i = 1, #arg do
  local ts, meta = zl.load_safetensors(arg[i])
  for k, v in pairs(ts) do got[k] = v end
  if i == 1 then
    for k, v in pairs(METADATA) do
      if meta[k] ~= v then fail(('metadata %s is %s, expected %s'):format(k, tostring(meta[k]), v)) end
    end
  end
end
for _, e in ipairs(TENSORS) do
  local name, dtype, shape, values = e[1], e[2], e[3], e[4]
  local t = got[name]
  if not t then fail(name .. ' is missing') goto continue end
  if t:dtype() ~= dtype then fail(('%s has dtype %s, expected %s'):format(name, t:dtype(), dtype)) end
  local s = t:shape()
  if #s ~= #shape then fail(('%s has %d dims, expected %d'):format(name, #s, #shape)) goto continue end
  for d = 1, #shape do
    if s[d] ~= shape[d] then fail(('%s has size %d in dim %d, expected %d'):format(name, s[d], d, shape[d])) end
  end
  local v = t:numel() == 0 and {} or (t:dim() == 0 and {t:item()} or flat(t:totable()))
  for k = 1, #values do
    local a, b = v[k], values[k]
    local same = a == b
    if b ~= b then same = a ~= a end
    if b == 0 and type(b) == 'number' and math.type(b) == 'float' then same = a == 0 and 1 / a == 1 / b end
    if not same then fail(('%s[%d] is %s, expected %s'):format(name, k, tostring(a), tostring(b))) end
  end
  ::continue::
end
print(('zlua checked %d tensors, %d failures'):format(#TENSORS, bad))
os.exit(bad == 0 and 0 or 1)
"""


def run_lua(zlua, workdir, name, body, args):
    script = os.path.join(workdir, name)
    with open(script, "w", encoding="utf-8") as f:
        f.write(lua_expected() + body)
    r = subprocess.run([zlua, script] + args, capture_output=True, text=True)
    sys.stdout.write(r.stdout + r.stderr)
    if r.returncode != 0:
        fail("%s exited with status %d" % (name, r.returncode))


def check_zlua_file(path):
    """The library reads what zlua wrote."""
    with open(path, "rb") as f:
        raw = f.read()
    hlen = int.from_bytes(raw[:8], "little")
    if hlen % 8 or raw[8:9] != b"{":
        fail("zlua's header length %d is not a multiple of 8 or does not open with '{'" % hlen)
    with safe_open(path, framework="np") as f:
        if f.metadata() != METADATA:
            fail("metadata read by safetensors: %r, expected %r" % (f.metadata(), METADATA))
        keys = list(f.keys())
        if sorted(keys) != sorted(TENSORS):
            fail("safetensors lists %r, expected %r" % (keys, sorted(TENSORS)))
        for name, (dt, shape, values) in TENSORS.items():
            if dt == "BF16":
                continue
            a = f.get_tensor(name)
            if a.dtype != NUMPY[dt] or list(a.shape) != shape:
                fail("%s read as %s %s, expected %s %s" % (name, a.dtype, list(a.shape), dt, shape))
            elif not same_values(a.reshape(-1).tolist(), values):
                fail("%s read as %r, expected %r" % (name, a.reshape(-1).tolist(), values))
    # numpy has no bf16: the library's deserialize gives its dtype and bytes.
    for name, info in safetensors.deserialize(raw):
        dt, shape, values = TENSORS[name]
        if info["dtype"] != dt or list(info["shape"]) != shape:
            fail("%s deserialized as %s %s, expected %s %s" % (name, info["dtype"], info["shape"], dt, shape))
        if dt == "BF16" and np.frombuffer(bytes(info["data"]), dtype="<u2").tolist() != bf16_bits(values).tolist():
            fail("bf16 bits %r, expected %r" % (np.frombuffer(bytes(info["data"]), dtype="<u2").tolist(),
                                                bf16_bits(values).tolist()))


def write_python_files(main_path, bf16_path):
    """The library writes the tensors: the numpy API for numpy's dtypes, bf16 apart."""
    arrays = {name: np.array(values, dtype=NUMPY[dt]).reshape(shape)
              for name, (dt, shape, values) in TENSORS.items() if dt != "BF16"}
    save_file(arrays, main_path, metadata=METADATA)
    values = TENSORS["bf16"][2]
    if ml_dtypes is not None:
        save_file({"bf16": np.array(values, dtype=ml_dtypes.bfloat16)}, bf16_path)
        return "ml_dtypes"
    bits = np.ascontiguousarray(bf16_bits(values))
    if hasattr(safetensors, "TensorSpec"):
        spec = safetensors.TensorSpec(dtype="bfloat16", shape=list(bits.shape), data_ptr=bits.ctypes.data,
                                      data_len=bits.nbytes)
    else:
        spec = {"dtype": "bfloat16", "shape": list(bits.shape), "data": bits.tobytes()}
    safetensors.serialize_file({"bf16": spec}, bf16_path)
    return "raw bf16 bits"


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    zlua = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="zlua_interop_") as d:
        zfile = os.path.join(d, "from_zlua.safetensors")
        run_lua(zlua, d, "write.lua", LUA_WRITE, [zfile])
        if not failures:
            check_zlua_file(zfile)
        if not failures:
            print("safetensors %s read zlua's file: %d tensors checked" % (safetensors.__version__, len(TENSORS)))
        pmain, pbf16 = os.path.join(d, "from_python.safetensors"), os.path.join(d, "from_python_bf16.safetensors")
        how = write_python_files(pmain, pbf16)
        print("safetensors %s wrote the files (bf16 via %s)" % (safetensors.__version__, how))
        run_lua(zlua, d, "check.lua", LUA_CHECK, [pmain, pbf16])
    print("%s: %d failures" % ("ok" if not failures else "FAILED", len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
