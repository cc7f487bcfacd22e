#!/usr/bin/env python3
"""zlua's GPT-2 against transformers' GPT2LMHeadModel, live (the Lua test
checks the stored numbers without Python). A test tool run by CTest
(tests/interop/test_gpt2_transformers.sh), not part of zlua's runtime.

  check_gpt2_transformers.py ZLUA_EXE SOURCE_DIR

1. tests/data/gpt2_tiny loaded by both: logits to 1e-4, greedy ids equal.
2. zlua's save_pretrained of that model and of a fresh zlua model (exact GELU,
   epsilon 1e-6) loaded by transformers: the same logits and greedy ids as zlua.
Exits 1 on any mismatch.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import GPT2LMHeadModel

IDS = [[3, 17, 42, 5, 88, 61, 0, 29], [90, 1, 1, 76, 13, 54, 7, 33]]
PROMPT = [11, 45, 2, 70, 19]
NEW = 40


def transformers_side(folder):
    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = model(torch.tensor(IDS)).logits
        prompt = torch.tensor([PROMPT])
        eos = model.config.eos_token_id
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW,
                             do_sample=False, pad_token_id=eos)
    return logits, out[0].tolist()


def zlua_side(zlua, script, src, out):
    args = [zlua, script, src, out, json.dumps(IDS), json.dumps(PROMPT), str(NEW)]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit('FAIL: %s exited %d:\n%s%s' % (' '.join(args[:3]), run.returncode, run.stdout, run.stderr))
    got = json.loads(run.stdout)
    return torch.tensor(got['logits']), got['greedy']


def compare(what, ours, theirs):
    (l1, g1), (l2, g2) = ours, theirs
    err = ((l1 - l2).abs() / (1 + l2.abs())).max().item()
    ok = err <= 1e-4 and g1 == g2
    print('%s %s: logits within %.2g, greedy %s' % ('ok' if ok else 'FAIL', what, err,
                                                    'equal' if g1 == g2 else '%s vs %s' % (g1, g2)))
    return ok


def main():
    zlua, source = sys.argv[1], sys.argv[2]
    tiny = os.path.join(source, 'tests', 'data', 'gpt2_tiny')
    script = os.path.join(source, 'tests', 'interop', 'gpt2_zlua.lua')
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        loaded = os.path.join(tmp, 'loaded')
        ours = zlua_side(zlua, script, tiny, loaded)
        ok &= compare('from_pretrained(gpt2_tiny)', ours, transformers_side(tiny))
        ok &= compare('save_pretrained of gpt2_tiny', ours, transformers_side(loaded))
        fresh = os.path.join(tmp, 'fresh')
        ok &= compare('save_pretrained of a zlua model', zlua_side(zlua, script, 'new', fresh),
                      transformers_side(fresh))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
