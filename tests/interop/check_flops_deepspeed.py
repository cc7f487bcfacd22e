#!/usr/bin/env python3
"""zlua's FLOPS profiler against DeepSpeed's on the same model. A test tool
run by CTest (tests/interop/test_flops_deepspeed.sh), not part of zlua's
runtime.

  check_flops_deepspeed.py ZLUA_EXE SOURCE_DIR

The GPT example's model (nn.GPT as examples/gpt/train.lua builds it: 2 layers
x 64 wide, 4 heads, block 32, the example text's vocabulary) is profiled by
zlua (tests/interop/flops_zlua.lua) on token ids [2, 32]; the same model as
transformers' GPT2LMHeadModel (same config, exact GELU, no dropout) is
profiled by DeepSpeed's FlopsProfiler and get_model_profile on the same
input, once with the SDPA attention and once with the eager one. Each
block, its first LayerNorm, its attention with its two projections, its MLP
with its two layers, the blocks, lm_head and the whole model must agree within
5% in MACs and in FLOPs, and in parameters exactly. The FLOPs differ a little
(0.4% at most here), and why:
  - transformers' Conv1D computes with torch.addmm, whose DeepSpeed rule adds
    one FLOP per output feature for the bias; zlua's Linear is F.linear's rule,
    which leaves the bias out;
  - DeepSpeed counts 0 FLOPs for transformers' GELUActivation, which calls the
    F.gelu it kept when built, before DeepSpeed patched the name; zlua counts
    one per element for the GELU;
  - with the eager attention DeepSpeed counts the softmax (one FLOP per
    score); zlua's fused attention in eval mode has none, as SDPA has none.
Exits 1 on any disagreement.
"""
import json
import os
import subprocess
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from deepspeed.profiling.flops_profiler import FlopsProfiler, get_model_profile

N_LAYER, N_EMBD, N_HEAD, BLOCK, BATCH = 2, 64, 4, 32, 2
TOLERANCE = 0.05


def zlua_side(zlua, source):
    script = os.path.join(source, 'tests', 'interop', 'flops_zlua.lua')
    text = os.path.join(source, 'examples', 'gpt', 'data', 'zlua.txt')
    args = [zlua, script, text] + [str(v) for v in (N_LAYER, N_EMBD, N_HEAD, BLOCK, BATCH)]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit('FAIL: %s exited %d:\n%s%s' % (' '.join(args[:2]), run.returncode, run.stdout, run.stderr))
    return json.loads(run.stdout)


def deepspeed_side(vocab, attn):
    config = GPT2Config(vocab_size=vocab, n_positions=BLOCK, n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD,
                        activation_function='gelu', resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(1)
    model = GPT2LMHeadModel._from_config(config, attn_implementation=attn).eval()
    ids = torch.zeros(BATCH, BLOCK, dtype=torch.long)
    prof = FlopsProfiler(model)
    prof.start_profile()
    with torch.no_grad():
        model(ids)
    prof.stop_profile()
    modules = {}
    for name, m in model.named_modules():
        modules[name] = {'class': type(m).__name__, 'params': m.__params__,
                         'macs': sum(d.__macs__ for d in m.modules()),
                         'flops': sum(d.__flops__ for d in m.modules())}
    prof.end_profile()
    flops, macs, params = get_model_profile(model, args=[ids], print_profile=False, as_string=False)
    return {'flops': flops, 'macs': macs, 'params': params, 'modules': modules}


# zlua's module names against transformers'.
def pairs():
    out = [('', ''), ('blocks', 'transformer.h'), ('lm_head', 'lm_head')]
    for i in range(N_LAYER):
        z, t = 'blocks.%d' % (i + 1), 'transformer.h.%d' % i
        out += [(z, t), (z + '.ln1', t + '.ln_1'), (z + '.attn', t + '.attn'), (z + '.attn.qkv', t + '.attn.c_attn'),
                (z + '.attn.proj', t + '.attn.c_proj'), (z + '.mlp', t + '.mlp'), (z + '.mlp.1', t + '.mlp.c_fc'),
                (z + '.mlp.3', t + '.mlp.c_proj')]
    return out


def table(title, rows):
    print(title)
    print('  %-28s %-20s %10s %12s %12s' % ('module', 'class', 'params', 'MACs', 'FLOPs'))
    for name, r in rows:
        print('  %-28s %-20s %10d %12d %12d' % (name or '(model)', r['class'], r['params'], r['macs'], r['flops']))


def off(a, b):
    return (a - b) / max(abs(b), 1)


def main():
    zlua, source = sys.argv[1], sys.argv[2]
    ours = zlua_side(zlua, source)
    vocab = ours['vocab_size']
    zmods = {m['name']: m for m in ours['modules']}
    print('model: nn.GPT / GPT2LMHeadModel, vocab %d, %d layers x %d, %d heads, input [%d, %d]'
          % (vocab, N_LAYER, N_EMBD, N_HEAD, BATCH, BLOCK))
    table('zlua.profiling:', [(z, zmods[z]) for z, _ in pairs()])
    ok = True
    for attn in ('sdpa', 'eager'):
        theirs = deepspeed_side(vocab, attn)
        tmods = theirs['modules']
        print()
        table('DeepSpeed FlopsProfiler, attn_implementation=%s:' % attn, [(t, tmods[t]) for _, t in pairs()])
        print('agreement (zlua against DeepSpeed, %s):' % attn)
        for z, t in pairs():
            zm, tm = zmods[z], tmods[t]
            mac_off, flop_off = off(zm['macs'], tm['macs']), off(zm['flops'], tm['flops'])
            good = abs(mac_off) <= TOLERANCE and abs(flop_off) <= TOLERANCE and zm['params'] == tm['params']
            ok = ok and good
            print('  %-4s %-18s ~ %-27s MACs %+.3f%%  FLOPs %+.3f%%  params %s'
                  % ('ok' if good else 'FAIL', z or '(model)', t or '(model)', 100 * mac_off, 100 * flop_off,
                     'equal' if zm['params'] == tm['params'] else '%d vs %d' % (zm['params'], tm['params'])))
        totals_good = (abs(off(ours['macs'], theirs['macs'])) <= TOLERANCE and ours['params'] == theirs['params']
                       and abs(off(ours['flops'], theirs['flops'])) <= TOLERANCE)
        ok = ok and totals_good
        print('  %-4s get_model_profile: MACs %d vs %d, FLOPs %d vs %d, params %d vs %d'
              % ('ok' if totals_good else 'FAIL', ours['macs'], theirs['macs'], ours['flops'], theirs['flops'],
                 ours['params'], theirs['params']))
    if not ok:
        sys.exit('FAIL: zlua and DeepSpeed disagree beyond %g%%' % (100 * TOLERANCE))
    print('ok: every compared module within %g%%' % (100 * TOLERANCE))


if __name__ == '__main__':
    main()
