"""Makes tests/data/gpt2_tiny/: a tiny GPT-2 built and saved by transformers
(config.json, model.safetensors) and expected.json, transformers' logits for a
fixed batch and its greedy continuation of a fixed prompt, which
tests/lua/test_gpt2_hf.lua checks zlua against without Python.
    python3 tests/interop/make_gpt2_tiny.py [out_dir]
"""
import json
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'data', 'gpt2_tiny')
INPUT = [[3, 17, 42, 5, 88, 61, 0, 29], [90, 1, 1, 76, 13, 54, 7, 33]]
PROMPT = [11, 45, 2, 70, 19]
NEW_TOKENS = 40


def main():
    torch.manual_seed(15)
    cfg = GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                     bos_token_id=95, eos_token_id=95)
    model = GPT2LMHeadModel(cfg).eval()
    # GPT-2's own initialisation (std 0.02, LayerNorm 1 and 0, biases 0) gives
    # near-equal logits and hides a mixed-up bias or LayerNorm: spread them all.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if '.ln_' in name or name.startswith('transformer.ln_f'):
                p.copy_((1.0 if name.endswith('weight') else 0.0) + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3)
    model.save_pretrained(OUT, safe_serialization=True)
    for extra in ('generation_config.json',):
        path = os.path.join(OUT, extra)
        if os.path.exists(path):
            os.remove(path)
    with torch.no_grad():
        logits = model(torch.tensor(INPUT)).logits
        prompt = torch.tensor([PROMPT])
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                             do_sample=False, pad_token_id=cfg.eos_token_id)
    expected = {
        'input_ids': INPUT,
        'logits': [[[float('%.7g' % x) for x in row] for row in seq] for seq in logits.tolist()],
        'prompt': PROMPT,
        'greedy': out[0].tolist(),
    }
    with open(os.path.join(OUT, 'expected.json'), 'w') as f:
        json.dump(expected, f, separators=(',', ':'))
        f.write('\n')


if __name__ == '__main__':
    main()
