#!/usr/bin/env python3
"""zlua.tokenizer live against Hugging Face's tokenizers and transformers: the ids and
pre-tokenized words of the hard strings and of random strings drawn from many scripts, with
the tiny vocabulary of tests/data/gpt2_tok read from tokenizer.json and from vocab.json +
merges.txt; then zlua's trainer's files loaded by transformers' GPT2Tokenizer and
GPT2TokenizerFast, which must give the ids zlua gives; then the Qwen2, LLaMA 3,
transformers-5 GPT-2 and LLaMA 2 folders (tests/data/qwen2_tok, llama3_tok, gpt2_tok_tf5,
llama2_tok) against transformers' AutoTokenizer and tokenizers, with variants of their files
(LLaMA 2's with a Metaspace as newer conversions write it, and without byte fallback), and
as zlua's save_pretrained writes them; and zlua's NFC against tokenizers' on every code
point and on runs of combining marks. A test tool run by CTest (test_tokenizer_python.sh),
not part of zlua.

    check_tokenizer_python.py ZLUA_EXE SOURCE_DIR
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unicodedata

from tokenizers import ByteLevelBPETokenizer, Tokenizer, normalizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import AutoTokenizer, GPT2Tokenizer, GPT2TokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_cases import HF_EXTRA, HF_PIECES, corpus, live_texts, random_strings  # noqa: E402

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

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


def zlua_encode(zlua, run, tok_dir, texts, tmp):
    src, dst = os.path.join(tmp, 'in.json'), os.path.join(tmp, 'out.json')
    with open(src, 'w', encoding='utf-8') as f:
        json.dump(texts, f)
    subprocess.run([zlua, run, 'encode', tok_dir, src, dst], check=True)
    with open(dst, encoding='utf-8') as f:
        return json.load(f)


def compare(what, texts, ours, hf_encode, failures, hf_words=None, hf_decode=None, hf_pair=None):
    """Ids as Hugging Face's; decoded text as the input, or as hf_decode(ids) gives it; words
    as hf_words(text) gives them, where it gives any; a text with the next one as a pair as
    hf_pair(text, next) gives it."""
    for k, (text, got) in enumerate(zip(texts, ours)):
        want = hf_encode(text)
        if got['ids'] != want:
            failures.append('%s: ids of %r: zlua %s, Hugging Face %s' % (what, text, got['ids'], want))
        if hf_pair:
            nxt = texts[(k + 1) % len(texts)]
            want_pair = hf_pair(text, nxt)
            if got['pair_ids'] != want_pair:
                failures.append('%s: ids of the pair %r, %r: zlua %s, Hugging Face %s'
                                % (what, text, nxt, got['pair_ids'], want_pair))
        want_text = hf_decode(want) if hf_decode else text
        if isinstance(got['decoded'], list):  # not UTF-8: as Hugging Face's lossy decoding
            got['decoded'] = bytes(got['decoded']).decode('utf-8', 'replace')
        if got['decoded'] != want_text:
            failures.append('%s: decode of %r gave %r, expected %r' % (what, text, got['decoded'], want_text))
        want_words = hf_words(text) if hf_words else None
        if want_words is not None and got['words'] != want_words:
            failures.append('%s: words of %r: zlua %s, Hugging Face %s' % (what, text, got['words'], want_words))


def fast_pair(fast, text, pair):
    """tokenizers' ids of a pair, an empty second text being no pair, as in transformers'
    tokenizer(text, text_pair), which zlua's encode(text, pair) follows (tokenizers alone keeps
    the empty sequence's special tokens)."""
    return fast.encode(text, pair).ids if pair else fast.encode(text).ids


def gpt2_words(text):
    if '<|endoftext|>' in text:
        return None
    return [w for w, _ in ByteLevel(add_prefix_space=False).pre_tokenize_str(text)]


def file_words(fast):
    """The words tokenizers' own pipeline makes of a text without added tokens."""
    added = [t.content for t in fast.get_added_tokens_decoder().values()]

    def words(text):
        if any(a in text for a in added):
            return None
        norm = fast.normalizer.normalize_str(text) if fast.normalizer else text
        if not fast.pre_tokenizer:  # the normalized text is the one word
            return [norm] if norm else []
        return [w for w, _ in fast.pre_tokenizer.pre_tokenize_str(norm)]
    return words


def folder(tmp, name, files):
    """A folder under tmp holding files (name -> JSON document)."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for fname, doc in files.items():
        with open(os.path.join(d, fname), 'w', encoding='utf-8') as f:
            json.dump(doc, f, ensure_ascii=False)
    return d


def load(src, name, fname='tokenizer.json'):
    with open(os.path.join(src, 'tests', 'data', name, fname), encoding='utf-8') as f:
        return json.load(f)


def _split_prefix_space(doc, cfg):
    doc['pre_tokenizer']['pretokenizers'][1]['add_prefix_space'] = True


def _normalized_added(doc, cfg):
    top = max(t['id'] for t in doc['added_tokens'])
    doc['added_tokens'].append({'id': top + 1, 'content': 'cafe\u0301', 'single_word': False, 'lstrip': False,
                                'rstrip': False, 'normalized': True, 'special': False})
    for t in doc['added_tokens']:
        if t['content'] == '<|im_start|>':
            t.update(lstrip=True, rstrip=True)


def _two_digits(doc, cfg):
    split = doc['pre_tokenizer']['pretokenizers'][0]['pattern']
    split['Regex'] = split['Regex'].replace('{1,3}', '{1,2}')


def _merges_kept(doc, cfg):
    doc['model']['ignore_merges'] = False


def _no_template(doc, cfg):
    doc['post_processor'] = None


def _gpt2_split(doc, cfg):
    doc['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [
        {'type': 'Split', 'pattern': {'Regex': GPT2_PATTERN}, 'behavior': 'Isolated', 'invert': False},
        {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': False}]}


def _metaspace(scheme, split):
    """LLaMA 2's folder as newer conversions write it: no normalizer, a Metaspace pre-tokenizer
    and decoder."""
    def edit(doc, cfg):
        doc['normalizer'] = None
        doc['pre_tokenizer'] = {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': scheme,
                                'split': split}
        doc['decoder'] = {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': scheme, 'split': split}
    return edit


def _llama2_unk_only(doc, cfg):
    doc['model']['byte_fallback'] = False


def _bos_eos_and_new_specials(doc, cfg):
    cfg.update(add_bos_token=True, add_eos_token=True, pad_token='<pad>', additional_special_tokens=['<|sep|>'])


def _qwen2_eos(doc, cfg):
    cfg['add_eos_token'] = True


# (what, folder, edit(tokenizer.json, tokenizer_config.json), against): against 'file' is
# tokenizers on tokenizer.json alone; 'config' is transformers' AutoTokenizer on
# tokenizer.json and tokenizer_config.json (where it ignores add_bos_token); 'pair' the same
# on vocab.json + merges.txt of tests/data/gpt2_tok and the folder's tokenizer_config.json.
HF_VARIANTS = [
    ('qwen2 with a prefix space after the Split', 'qwen2_tok', _split_prefix_space, 'file'),
    ('qwen2 with a normalized added token, <|im_start|> stripping', 'qwen2_tok', _normalized_added, 'file'),
    ('llama3 with \\p{N}{1,2}', 'llama3_tok', _two_digits, 'file'),
    ('llama3 without ignore_merges', 'llama3_tok', _merges_kept, 'file'),
    ('llama3 without a post_processor', 'llama3_tok', _no_template, 'file'),
    ('gpt2 with its pattern as a Split', 'gpt2_tok', _gpt2_split, 'file'),
    ('gpt2 tf5 with add_bos_token, add_eos_token and new special tokens', 'gpt2_tok_tf5', _bos_eos_and_new_specials,
     'config'),
    ('gpt2 vocab.json + merges.txt with add_bos_token, add_eos_token and new special tokens', 'gpt2_tok_tf5',
     _bos_eos_and_new_specials, 'pair'),
    ('qwen2 with add_eos_token', 'qwen2_tok', _qwen2_eos, 'config'),
    ('llama2 with a Metaspace, prepend first, no split', 'llama2_tok', _metaspace('first', False), 'file'),
    ('llama2 with a Metaspace, prepend always, split', 'llama2_tok', _metaspace('always', True), 'file'),
    ('llama2 with a Metaspace, prepend never, split', 'llama2_tok', _metaspace('never', True), 'file'),
    ('llama2 without byte_fallback (unknown characters as <unk>, fused)', 'llama2_tok', _llama2_unk_only, 'file'),
]
VARIANT_TEXTS = ['x caf\u00e9 y', 'cafe\u0301', 'caf\u00e9<|im_start|> caf\u00e9', ' <|im_start|>  cafe\u0301\u0301',
                 'a<pad>b', '<|sep|>x<pad>', '1234567 89']


def check_hf_folders(zlua, run, src, tmp, failures):
    texts = live_texts() + HF_EXTRA + random_strings(600, seed=5, pieces=HF_PIECES)
    for name in ('qwen2_tok', 'llama3_tok', 'gpt2_tok_tf5', 'llama2_tok'):
        d = os.path.join(src, 'tests', 'data', name)
        fast = Tokenizer.from_file(os.path.join(d, 'tokenizer.json'))
        auto = AutoTokenizer.from_pretrained(d)
        ours = zlua_encode(zlua, run, d, texts, tmp)
        decode = lambda ids: fast.decode(ids, skip_special_tokens=False)  # noqa: E731
        compare(name, texts, ours, lambda t: auto(t)['input_ids'], failures, hf_words=file_words(fast),
                hf_decode=decode, hf_pair=lambda t, u: auto(t, u)['input_ids'])
        compare(name + ' (tokenizers)', texts, ours, lambda t: fast.encode(t).ids, failures, hf_decode=decode,
                hf_pair=lambda t, u: fast_pair(fast, t, u))
        print('%s: %d strings compared with %s and tokenizers' % (name, len(texts), type(auto).__name__))
        # zlua's save_pretrained of the folder, read by transformers and tokenizers: the ids of
        # single texts and of pairs, and the named special tokens, as the original's.
        saved = os.path.join(tmp, 'saved_' + name)
        subprocess.run([zlua, run, 'save', d, saved], check=True)
        auto_saved = AutoTokenizer.from_pretrained(saved)
        fast_saved = Tokenizer.from_file(os.path.join(saved, 'tokenizer.json'))
        for t in texts:
            for what, got, want in (('AutoTokenizer', auto_saved(t)['input_ids'], auto(t)['input_ids']),
                                    ('tokenizers', fast_saved.encode(t).ids, fast.encode(t).ids),
                                    ('tokenizers, a pair', fast_saved.encode(t, t[::-1]).ids,
                                     fast.encode(t, t[::-1]).ids)):
                if got != want:
                    failures.append('%s saved by zlua, read by %s: ids of %r: %s, the original gives %s'
                                    % (name, what, t, got, want))
        for attr in ('bos_token', 'eos_token', 'pad_token', 'unk_token'):
            if getattr(auto_saved, attr) != getattr(auto, attr):
                failures.append('%s saved by zlua: %s is %r, the original has %r'
                                % (name, attr, getattr(auto_saved, attr), getattr(auto, attr)))
        print('%s: saved by zlua, read by transformers and tokenizers as the original' % name)
    texts = texts[:200] + VARIANT_TEXTS + random_strings(200, seed=9, pieces=HF_PIECES + VARIANT_TEXTS)
    for k, (what, name, edit, against) in enumerate(HF_VARIANTS):
        doc = load(src, name)
        cfg = load(src, name, 'tokenizer_config.json') if against != 'file' else {}
        edit(doc, cfg)
        files = {'tokenizer.json': doc} if against != 'pair' else {
            'vocab.json': load(src, 'gpt2_tok', 'vocab.json')}
        if against != 'file':
            files['tokenizer_config.json'] = cfg
        d = folder(tmp, 'variant%d' % k, files)
        if against == 'pair':
            shutil.copy(os.path.join(src, 'tests', 'data', 'gpt2_tok', 'merges.txt'), d)
            words = gpt2_words
        else:
            fast = Tokenizer.from_file(os.path.join(d, 'tokenizer.json'))
            words = file_words(fast)
        if against == 'file':
            encode = lambda t: fast.encode(t).ids  # noqa: E731
            pair = lambda t, u: fast_pair(fast, t, u)  # noqa: E731
            decode = lambda ids: fast.decode(ids, skip_special_tokens=False)  # noqa: E731
        else:
            hf = AutoTokenizer.from_pretrained(d)
            encode = lambda t: hf(t)['input_ids']  # noqa: E731
            pair = lambda t, u: hf(t, u)['input_ids']  # noqa: E731
            decode = lambda ids: hf.decode(ids, clean_up_tokenization_spaces=False)  # noqa: E731
        compare(what, texts, zlua_encode(zlua, run, d, texts, tmp), encode, failures, hf_words=words, hf_decode=decode,
                hf_pair=pair)


def check_nfc(zlua, run, tmp, failures):
    """zlua's NFC against tokenizers' on every code point (16 to a string, so neighbours meet),
    every decomposition, and random runs of combining marks after various starters."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    texts = [''.join(chr(c) for c in cps[k:k + 16]) for k in range(0, len(cps), 16)]
    nfd = [unicodedata.normalize('NFD', chr(c)) for c in cps]
    nfd = [d for d, c in zip(nfd, cps) if d != chr(c)]
    texts += [''.join(nfd[k:k + 8]) for k in range(0, len(nfd), 8)]
    marks = [chr(c) for c in cps if unicodedata.combining(chr(c))] + [chr(c) for c in range(0x1161, 0x1176)] \
        + [chr(c) for c in range(0x11A8, 0x11C3)] + ['\u0cd5', '\u0b3e', '\u09be', '\u0d3e', '\u0dcf', '\u1b35']
    starters = ['a', 'e', 'o', 'A', 'u', '\u1100', '\uac00', '\u0915', '\u03b1', '\u0985', '\u0b47', '\u0cc6', '\u1b05']
    rng = random.Random(11)
    for _ in range(20000):
        texts.append(''.join(rng.choice(starters) + ''.join(rng.choice(marks) for _ in range(rng.randint(0, 5)))
                             for _ in range(rng.randint(1, 3))))
    src, dst = os.path.join(tmp, 'nfc_in.json'), os.path.join(tmp, 'nfc_out.json')
    with open(src, 'w', encoding='utf-8') as f:
        json.dump(texts, f, ensure_ascii=False)
    subprocess.run([zlua, run, 'nfc', src, dst], check=True)
    with open(dst, encoding='utf-8') as f:
        ours = json.load(f)
    hf = normalizers.NFC()
    for text, got in zip(texts, ours):
        want = hf.normalize_str(text)
        if got != want:
            failures.append('NFC of %s: zlua %s, tokenizers %s' % (ascii(text), ascii(got), ascii(want)))
    print('NFC: %d strings compared with tokenizers\' (every code point, every decomposition, marks)' % len(texts))


def main():
    zlua, src = sys.argv[1], sys.argv[2]
    run = os.path.join(src, 'tests', 'interop', 'tokenizer_run.lua')
    data = os.path.join(src, 'tests', 'data', 'gpt2_tok')
    texts = live_texts()
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
                lambda t: fast.encode(t).ids, failures, hf_words=gpt2_words)
        compare('vocab.json + merges.txt', texts, zlua_encode(zlua, run, pair_dir, texts, tmp),
                slow.encode, failures)

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
                    lambda t: hf.encode(t).ids, failures,
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
            compare('trained by zlua, read by ' + name, texts, ours, hf.encode, failures)
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

        check_hf_folders(zlua, run, src, tmp, failures)
        check_nfc(zlua, run, tmp, failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures[:30]:
        print('FAIL ' + f)
    print('%d failures' % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
