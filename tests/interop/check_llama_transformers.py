#!/usr/bin/env python3
"""zlua's LLaMA and Qwen2 against transformers, live (tests/lua/test_llama_hf.lua
checks the stored numbers without Python). A test tool run by CTest
(tests/interop/test_llama_transformers.sh), not part of zlua's runtime.

  check_llama_transformers.py ZLUA_EXE SOURCE_DIR

1. Tiny LLaMA (grouped-query attention, untied) and Qwen2 (biases, tied,
   sharded) models made now by transformers (make_llama_tiny.py), loaded by
   both: logits to 1e-4, greedy ids equal, left-padded batched greedy ids
   equal.
2. zlua's save_pretrained of each (sharded and not), and of fresh zlua models of
   each kind, loaded by transformers: the same logits and ids as zlua.
Exits 1 on any mismatch.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_tiny as tiny  # noqa: E402

NEW = 16


def batch():
    width = max(len(b) for b in tiny.BATCH)
    ids = [[tiny.PAD] * (width - len(b)) + b for b in tiny.BATCH]
    mask = [[0] * (width - len(b)) + [1] * len(b) for b in tiny.BATCH]
    return ids, mask


def transformers_side(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation='eager').eval()
    ids, mask = batch()
    with torch.no_grad():
        logits = model(torch.tensor(tiny.INPUT)).logits
        prompt = torch.tensor([tiny.PROMPT])
        greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW, do_sample=False,
                                pad_token_id=0, eos_token_id=None)
        out = model.generate(torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=NEW,
                             do_sample=False, pad_token_id=0, eos_token_id=None)
    return logits, greedy[0].tolist(), out.tolist()


def zlua_side(zlua, script, src, out, shard):
    ids, mask = batch()
    args = [zlua, script, src, out, str(shard), json.dumps(tiny.INPUT), json.dumps(tiny.PROMPT), json.dumps(ids),
            json.dumps(mask), str(NEW)]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit('FAIL: %s exited %d:\n%s%s' % (' '.join(args[:3]), run.returncode, run.stdout, run.stderr))
    got = json.loads(run.stdout)
    return torch.tensor(got['logits']), got['greedy'], got['batch']


def compare(what, ours, theirs):
    (l1, g1, b1), (l2, g2, b2) = ours, theirs
    err = ((l1 - l2).abs() / (1 + l2.abs())).max().item()
    ok = err <= 1e-4 and g1 == g2 and b1 == b2
    print('%s %s: logits within %.2g, greedy %s, batched %s' % (
        'ok' if ok else 'FAIL', what, err, 'equal' if g1 == g2 else '%s vs %s' % (g1, g2),
        'equal' if b1 == b2 else '%s vs %s' % (b1, b2)))
    return ok


def main():
    zlua, source = sys.argv[1], sys.argv[2]
    script = os.path.join(source, 'tests', 'interop', 'llama_zlua.lua')
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tiny.DATA = tmp
        tiny.main()
        for name in ('llama_tiny', 'qwen2_tiny'):
            made = os.path.join(tmp, name)
            theirs = transformers_side(made)
            for shard in (10 ** 9, 20000):
                saved = os.path.join(tmp, '%s_saved_%d' % (name, shard))
                ours = zlua_side(zlua, script, made, saved, shard)
                if shard == 20000:
                    ok &= compare('from_pretrained(%s)' % name, ours, theirs)
                ok &= compare('save_pretrained of %s, shards of %d bytes' % (name, shard), ours,
                              transformers_side(saved))
        for kind in ('llama', 'qwen2', 'mistral'):
            fresh = os.path.join(tmp, 'fresh_' + kind)
            ok &= compare('save_pretrained of a zlua %s model' % kind,
                          zlua_side(zlua, script, 'new:' + kind, fresh, 30000), transformers_side(fresh))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
