#!/usr/bin/env python3
"""zlua's ops against torch in float64, forward and backward. A test tool run
by CTest (tests/interop/test_ops_torch.sh), not part of zlua's runtime.

  check_ops_torch.py ZLUA_EXE SOURCE_DIR [group...]

Each group is a pair tests/interop/ops/<group>.lua (the cases, run by
tests/interop/ops_run.lua) and <group>.py, which defines
CASES = {'case': lambda t: torch expression} over a dict of torch tensors
(float inputs as float64, requiring grad where the Lua case lists them in
grad; integer inputs as int64; bool as bool) and optionally
TOL = {'case': (rtol, atol)}. The outputs must agree in shape and kind (float,
integer, bool), integers and bools exactly, floats within the tolerance
(default rtol 1e-4, atol 1e-5; NaN matches NaN); so must the gradients of the
grad inputs for the upstream gradient zlua used. Exits 1 on any mismatch.
"""
import glob
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

RTOL, ATOL = 1e-4, 1e-5
DTYPES = {'F64': torch.float64, 'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16,
          'I64': torch.int64, 'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8, 'U8': torch.uint8,
          'BOOL': torch.bool}


def read_safetensors(path):
    """The file's tensors by name (a reader of our own: no dependency beyond torch)."""
    with open(path, 'rb') as f:
        data = f.read()
    (n,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        lo, hi = info['data_offsets']
        dtype = DTYPES[info['dtype']]
        buf = bytearray(data[base + lo:base + hi])
        flat = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(info['shape'])
    return out


def kind(t):
    if t.dtype == torch.bool:
        return 'bool'
    return 'float' if t.is_floating_point() else 'integer'


def torch_input(t, grad):
    if t.dtype == torch.bool:
        return t.clone()
    if not t.is_floating_point():
        return t.to(torch.int64)
    return t.to(torch.float64).requires_grad_(grad)


def close(ours, theirs, rtol, atol):
    """None when they agree, else what differs."""
    if tuple(ours.shape) != tuple(theirs.shape):
        return 'shape %s vs torch %s' % (list(ours.shape), list(theirs.shape))
    if kind(ours) != kind(theirs):
        return 'dtype %s vs torch %s' % (ours.dtype, theirs.dtype)
    if kind(ours) != 'float':
        if torch.equal(ours.to(torch.int64), theirs.to(torch.int64)):
            return None
        bad = (ours.to(torch.int64) != theirs.to(torch.int64)).nonzero()[0].tolist()
        return 'at %s: %s vs torch %s' % (bad, ours[tuple(bad)].item(), theirs[tuple(bad)].item())
    a, b = ours.to(torch.float64), theirs.detach().to(torch.float64)
    ok = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()[0].tolist()
    err = ((a - b).abs() / (atol + rtol * b.abs())).nan_to_num(float('inf')).max().item()
    return 'at %s: %.8g vs torch %.8g (worst %.3g times the tolerance)' % (
        bad, a[tuple(bad)].item(), b[tuple(bad)].item(), err)


def load_group(path):
    spec = importlib.util.spec_from_file_location('ops_group_' + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, 'CASES'), getattr(mod, 'TOL', {})


def check_case(entry, folder, cases, tols):
    """A list of failure lines for one case (empty when it passes)."""
    name = entry['name']
    if 'error' in entry:
        return ['zlua raised: %s' % entry['error']]
    if name not in cases:
        return ['no torch expression in the group\'s CASES']
    saved = read_safetensors(os.path.join(folder, entry['file']))
    grads = entry['grad']
    inputs = {k[3:]: torch_input(v, k[3:] in grads) for k, v in saved.items() if k.startswith('in.')}
    rtol, atol = tols.get(name, (RTOL, ATOL))
    theirs = cases[name](inputs)
    fails = []
    why = close(saved['out'], theirs, rtol, atol)
    if why:
        fails.append('forward ' + why)
    if grads and not why:
        theirs.backward(saved['upstream'].to(torch.float64))
        for k in grads:
            want = inputs[k].grad
            if want is None:
                want = torch.zeros_like(inputs[k])
            got = saved.get('grad.' + k, torch.zeros(inputs[k].shape))
            why = close(got, want, rtol, atol)
            if why:
                fails.append('grad of %s %s' % (k, why))
    return fails


def main():
    zlua, source = sys.argv[1], sys.argv[2]
    folder = os.path.join(source, 'tests', 'interop', 'ops')
    groups = sys.argv[3:] or sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(folder, '*.lua')))
    script = os.path.join(source, 'tests', 'interop', 'ops_run.lua')
    ok, count = True, 0
    with tempfile.TemporaryDirectory() as tmp:
        args = [zlua, script, tmp] + [os.path.join(folder, g + '.lua') for g in groups]
        run = subprocess.run(args, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit('FAIL: ops_run.lua exited %d:\n%s%s' % (run.returncode, run.stdout, run.stderr))
        with open(os.path.join(tmp, 'manifest.json')) as f:
            manifest = json.load(f)
        for group in groups:
            py = os.path.join(folder, group + '.py')
            if not os.path.exists(py):
                print('FAIL %s: no %s beside its .lua' % (group, py))
                ok = False
                continue
            cases, tols = load_group(py)
            seen = set()
            for entry in (e for e in manifest if e['group'] == group):
                seen.add(entry['name'])
                try:
                    fails = check_case(entry, tmp, cases, tols)
                except Exception as e:  # a torch expression that raises is a failure of that case
                    fails = ['torch raised %s: %s' % (type(e).__name__, e)]
                count += 1
                for line in fails:
                    print('FAIL %s.%s: %s' % (group, entry['name'], line))
                ok &= not fails
            for name in sorted(set(cases) - seen):
                print('FAIL %s.%s: in CASES but not in the group\'s .lua' % (group, name))
                ok = False
    print('%s: %d cases in %d groups against torch %s' % ('ok' if ok else 'FAIL', count, len(groups),
                                                          torch.__version__))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
