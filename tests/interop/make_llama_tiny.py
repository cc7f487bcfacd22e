"""Makes tests/data/llama_tiny/ and tests/data/qwen2_tiny/: a tiny
LlamaForCausalLM (grouped-query attention, untied head) and a tiny
Qwen2ForCausalLM (q/k/v biases, tied head, saved in shards) built and saved
by transformers, each with expected.json: transformers' logits for a fixed
batch, its greedy continuation of a prompt, and its greedy continuation of a
left-padded batch of two prompts, which tests/lua/test_llama_hf.lua checks
zlua against without Python.
    python3 tests/interop/make_llama_tiny.py [data_dir]
"""
import json
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'data')
INPUT = [[3, 17, 42, 5, 88, 61, 0, 29], [90, 1, 1, 76, 13, 54, 7, 33]]
PROMPT = [11, 45, 2, 70, 19]
BATCH = [[7, 3, 81, 44, 2, 9, 60], [52, 18, 33]]
NEW_TOKENS = 24
PAD = 0


def spread(model):
    """Hugging Face's initialisation (std 0.02, norms 1, biases 0) gives
    near-equal logits and hides a mixed-up bias or norm: spread them all."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'norm' in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3 if p.dim() > 1 else 0.2)


def expected(model):
    rows = lambda t: [[float('%.7g' % x) for x in r] for r in t]
    with torch.no_grad():
        logits = model(torch.tensor(INPUT)).logits
        prompt = torch.tensor([PROMPT])
        greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                do_sample=False, pad_token_id=PAD, eos_token_id=None)
        width = max(len(b) for b in BATCH)
        ids = torch.tensor([[PAD] * (width - len(b)) + b for b in BATCH])
        mask = torch.tensor([[0] * (width - len(b)) + [1] * len(b) for b in BATCH])
        batched = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                 pad_token_id=PAD, eos_token_id=None)
    return {
        'input_ids': INPUT,
        'logits': [rows(seq) for seq in logits.tolist()],
        'prompt': PROMPT,
        'greedy': greedy[0].tolist(),
        'batch_ids': ids.tolist(),
        'batch_mask': mask.tolist(),
        'batch_greedy': batched.tolist(),
    }


def save(model, name, **kw):
    out = os.path.join(DATA, name)
    model.save_pretrained(out, safe_serialization=True, **kw)
    path = os.path.join(out, 'generation_config.json')
    if os.path.exists(path):
        os.remove(path)
    with open(os.path.join(out, 'expected.json'), 'w') as f:
        json.dump(expected(model), f, separators=(',', ':'))
        f.write('\n')


def main():
    torch.manual_seed(28)
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=500.0,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, attn_implementation='eager')).eval()
    spread(llama)
    save(llama, 'llama_tiny')
    qwen = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=95, attn_implementation='eager')).eval()
    spread(qwen)
    save(qwen, 'qwen2_tiny', max_shard_size='20KB')


if __name__ == '__main__':
    main()
