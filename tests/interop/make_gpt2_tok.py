#!/usr/bin/env python3
"""Makes tests/data/gpt2_tok: a tiny GPT-2 style vocabulary trained by Hugging Face's
tokenizers (ByteLevelBPETokenizer, vocab 600, "<|endoftext|>" special), saved as
vocab.json + merges.txt and as tokenizer.json, with the training text (corpus.txt) and
expected.json: for each hard string of tokenizer_cases.py, Hugging Face's pre-tokenized
words and ids. The Lua test (tests/lua/test_tokenizer.lua) checks against these without
Python. Rerun after changing the cases:

    python3 tests/interop/make_gpt2_tok.py
"""
import json
import os
import sys

import tokenizers

from tokenizers import ByteLevelBPETokenizer
from tokenizers.pre_tokenizers import ByteLevel
from transformers import GPT2Tokenizer, GPT2TokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_cases import HARD, corpus  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data', 'gpt2_tok')


def main():
    os.makedirs(OUT, exist_ok=True)
    text_path = os.path.join(OUT, 'corpus.txt')
    with open(text_path, 'w', encoding='utf-8', newline='\n') as f:
        f.write(corpus())
    tok = ByteLevelBPETokenizer()
    tok.train([text_path], vocab_size=600, min_frequency=2, special_tokens=['<|endoftext|>'],
              show_progress=False)
    tok.save_model(OUT)
    tok.save(os.path.join(OUT, 'tokenizer.json'))
    slow = GPT2Tokenizer(os.path.join(OUT, 'vocab.json'), os.path.join(OUT, 'merges.txt'))
    fast = GPT2TokenizerFast(tokenizer_file=os.path.join(OUT, 'tokenizer.json'))
    pre = ByteLevel(add_prefix_space=False)
    cases = []
    for s in HARD:
        ids = tok.encode(s).ids
        # The three Hugging Face paths must agree, or the expectation means nothing.
        assert slow.encode(s) == ids, (s, slow.encode(s), ids)
        assert fast.encode(s) == ids, (s, fast.encode(s), ids)
        words = [w for w, _ in pre.pre_tokenize_str(s)] if '<|endoftext|>' not in s else None
        cases.append({'text': s, 'ids': ids, 'words': words})
    with open(os.path.join(OUT, 'expected.json'), 'w', encoding='utf-8') as f:
        # One case a line: small, and a diff shows which case changed.
        f.write('{"made_by": "tests/interop/make_gpt2_tok.py", "tokenizers": %s,\n "cases": [\n'
                % json.dumps(tokenizers.__version__))
        f.write(',\n'.join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write('\n]}\n')


if __name__ == '__main__':
    main()
