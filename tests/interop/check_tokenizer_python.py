#!/usr/bin/env python3
"""zlua.tokenizer live against Hugging Face's tokenizers and transformers: the ids and
pre-tokenized words of the hard strings and of random strings drawn from many scripts, with
the tiny vocabulary of tests/data/gpt2_tok read from tokenizer.json and from vocab.json +
merges.txt; then zlua's trainer's files loaded by transformers' GPT2Tokenizer and
GPT2TokenizerFast, which must give the ids zlua gives. A test tool run by CTest
(test_tokenizer_python.sh), not part of zlua.

    check_tokenizer_python.py ZLUA_EXE SOURCE_DIR
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from tokenizers import ByteLevelBPETokenizer, Tokenizer
from tokenizers.pre_tokenizers import ByteLevel
from transformers import GPT2Tokenizer, GPT2TokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_cases import HARD, corpus  # noqa: E402

# Pieces random strings are made of: every class the split pattern tells apart, and the
# places where they meet.
PIECES = [
    'a', 'Z', 'hello', 'World', ' ', '  ', '\t', '\n', '\r\n', '\x0b', '\x0c', '\x85', '\u00a0',
    '\u2003', '\u2028', '\u3000', '\u200b', "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S",
    '0', '7', '42', '3.14', '½', '²', 'Ⅻ', '٣', '०', '!', '?', '...', '-', '_', '"', '(', '$',
    '€', '©', 'é', 'e\u0301', 'ñ', 'ß', 'Å', 'İ', 'ǅ', 'ʰ', 'ø', '中', '文字', '日本語', 'の', 'カタカナ',
    '한국어', 'ㄱ', 'العربية', 'עברית', 'हिन्दी', 'ภาษาไทย', 'ελληνικά', 'русский', '😀', '👍🏽',
    '👨\u200d👩\u200d👧', '🇫🇷', '𝔸', '∑', '\U00010400', '\ufeff', '\x00', '\x1f', '\x7f',
    '<|endoftext|>', 'endoftext', '<|', '|>',
]


def _prefix_space(doc):
    doc['pre_tokenizer']['add_prefix_space'] = True


def _stripping(doc):
    doc['added_tokens'][0].update(lstrip=True, rstrip=True)


def _more_added(doc):
    n = len(doc['model']['vocab'])
    doc['added_tokens'] += [
        {'id': n, 'content': 'endoftext', 'single_word': True, 'lstrip': False, 'rstrip': False,
         'normalized': False, 'special': False},
        {'id': n + 1, 'content': '|>', 'single_word': False, 'lstrip': False, 'rstrip': True,
         'normalized': False, 'special': True},
    ]


VARIANTS = [('add_prefix_space', _prefix_space), ('lstrip_rstrip', _stripping), ('more_added', _more_added)]


def random_strings(n, seed=15):
    rng = random.Random(seed)
    return [''.join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def zlua_encode(zlua, run, tok_dir, texts, tmp):
    src, dst = os.path.join(tmp, 'in.json'), os.path.join(tmp, 'out.json')
    with open(src, 'w', encoding='utf-8') as f:
        json.dump(texts, f)
    subprocess.run([zlua, run, 'encode', tok_dir, src, dst], check=True)
    with open(dst, encoding='utf-8') as f:
        return json.load(f)


def compare(what, texts, ours, hf_encode, failures, words=True, hf_decode=None):
    """Ids as Hugging Face's; decoded text as the input, or as hf_decode(ids) gives it."""
    pre = ByteLevel(add_prefix_space=False)
    for text, got in zip(texts, ours):
        want = hf_encode(text)
        if got['ids'] != want:
            failures.append('%s: ids of %r: zlua %s, Hugging Face %s' % (what, text, got['ids'], want))
        want_text = hf_decode(want) if hf_decode else text
        if got['decoded'] != want_text:
            failures.append('%s: decode of %r gave %r, expected %r' % (what, text, got['decoded'], want_text))
        if words and '<|endoftext|>' not in text:
            want_words = [w for w, _ in pre.pre_tokenize_str(text)]
            if got['words'] != want_words:
                failures.append('%s: words of %r: zlua %s, Hugging Face %s' % (what, text, got['words'], want_words))


def main():
    zlua, src = sys.argv[1], sys.argv[2]
    run = os.path.join(src, 'tests', 'interop', 'tokenizer_run.lua')
    data = os.path.join(src, 'tests', 'data', 'gpt2_tok')
    # Long words, which zlua merges through a queue rather than by scanning.
    letters = ''.join(c for c in corpus() if c.isascii() and c.isalpha())
    texts = HARD + random_strings(400) + [letters, 'ab' * 300, 'a' * 301, ''.join(random_strings(60, seed=3))]
    failures = []
    tmp = tempfile.mkdtemp(prefix='zlua_tok_')
    try:
        # The frozen vocabulary, both ways zlua reads it, against both ways Hugging Face does.
        fast = Tokenizer.from_file(os.path.join(data, 'tokenizer.json'))
        pair_dir = os.path.join(tmp, 'pair')
        os.makedirs(pair_dir)
        for name in ('vocab.json', 'merges.txt'):
            shutil.copy(os.path.join(data, name), pair_dir)
        slow = GPT2Tokenizer(os.path.join(pair_dir, 'vocab.json'), os.path.join(pair_dir, 'merges.txt'))
        compare('tokenizer.json', texts, zlua_encode(zlua, run, data, texts, tmp),
                lambda t: fast.encode(t).ids, failures)
        compare('vocab.json + merges.txt', texts, zlua_encode(zlua, run, pair_dir, texts, tmp),
                slow.encode, failures, words=False)

        # Variants of tokenizer.json GPT-2 style files use: a prefix space, and added tokens
        # that strip white space, match whole words only, or are not special.
        with open(os.path.join(data, 'tokenizer.json'), encoding='utf-8') as f:
            base = f.read()
        for name, edit in VARIANTS:
            doc = json.loads(base)
            edit(doc)
            vdir = os.path.join(tmp, name)
            os.makedirs(vdir)
            vpath = os.path.join(vdir, 'tokenizer.json')
            with open(vpath, 'w', encoding='utf-8') as f:
                json.dump(doc, f, ensure_ascii=False)
            hf = Tokenizer.from_file(vpath)
            compare('tokenizer.json with ' + name, texts, zlua_encode(zlua, run, vdir, texts, tmp),
                    lambda t: hf.encode(t).ids, failures, words=False,
                    hf_decode=lambda ids: hf.decode(ids, skip_special_tokens=False))

        # zlua's trainer on more text: its files in transformers' tokenizers.
        text_path = os.path.join(tmp, 'train.txt')
        with open(text_path, 'w', encoding='utf-8', newline='\n') as f:
            f.write(corpus() + '\n'.join(random_strings(300, seed=7)) + '\n')
        trained = os.path.join(tmp, 'trained')
        os.makedirs(trained)
        subprocess.run([zlua, run, 'train', text_path, '800', trained], check=True)
        ours = zlua_encode(zlua, run, trained, texts, tmp)
        for name, hf in (('GPT2Tokenizer', GPT2Tokenizer.from_pretrained(trained)),
                         ('GPT2TokenizerFast', GPT2TokenizerFast.from_pretrained(trained))):
            compare('trained by zlua, read by ' + name, texts, ours, hf.encode, failures, words=False)
            print('zlua\'s trained vocabulary loads in %s (%d tokens)' % (name, len(hf)))

        # The same training by Hugging Face: the same merges are hoped for, not required.
        hf_dir = os.path.join(tmp, 'hf')
        os.makedirs(hf_dir)
        hf_tok = ByteLevelBPETokenizer()
        hf_tok.train([text_path], vocab_size=800, min_frequency=2, special_tokens=['<|endoftext|>'],
                     show_progress=False)
        hf_tok.save_model(hf_dir)
        same = all(open(os.path.join(trained, n), 'rb').read() == open(os.path.join(hf_dir, n), 'rb').read()
                   for n in ('vocab.json', 'merges.txt'))
        print('trainer: zlua\'s vocab.json and merges.txt are %s Hugging Face\'s on the same text'
              % ('byte for byte' if same else 'NOT the same as'))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures[:30]:
        print('FAIL ' + f)
    print('%d strings, %d failures' % (len(texts), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
