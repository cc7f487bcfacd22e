#!/usr/bin/env python3
"""Makes the tokenizer folders of the models people fine-tune now, tiny, for zlua's tests:

  tests/data/qwen2_tok     Qwen2's pipeline (NFC, Split with Qwen2's pattern + ByteLevel), its
                           special tokens after the vocabulary, Qwen2's tokenizer_config.json
  tests/data/llama3_tok    LLaMA 3's (Split with LLaMA 3's pattern + ByteLevel, ignore_merges,
                           a "<|begin_of_text|> $A" template), its special tokens and config
  tests/data/gpt2_tok_tf5  tests/data/gpt2_tok's vocabulary as transformers 5 saves a
                           GPT2TokenizerFast (tokenizer.json with a "$A" template, no vocab.json)
  tests/data/llama2_tok    LLaMA 2's and Mistral's (SentencePiece's BPE as tokenizers writes it:
                           a Prepend and Replace normalizer, no pre-tokenizer, characters with a
                           fallback to the <0xXX> byte tokens, <unk> <s> </s>, a "<s> $A" template)

Those and llama2_tok are trained by Hugging Face's tokenizers (vocabulary 800) on tokenizer_cases.py's
corpus and random strings. Each folder gets expected.json: for the strings the live test
compares (tokenizer_cases.live_texts), HF_EXTRA and random strings of HF_PIECES, the ids of
transformers' tokenizer(text) (its default, special tokens added) and of tokenizer(text,
next text) as a pair, the decoded text where it
is not the text, and, for HARD and HF_EXTRA strings without added tokens, the pre-tokenized
words. tests/lua/test_tokenizer_hf.lua checks these without Python. llama2_tok's alphabet
(which of the equally frequent characters make the cut) changes from run to run. Rerun after
changing the cases:

    python3 tests/interop/make_hf_toks.py [FOLDER ...]   (default: all of them)
"""
import json
import os
import shutil
import sys
import tempfile

import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
from transformers import AutoTokenizer, GPT2TokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_cases import HARD, HF_EXTRA, HF_PIECES, corpus, live_texts, random_strings  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data')

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r'\p{N}{1,3}', r'\p{N}')

QWEN2_SPECIAL = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
QWEN2_PLAIN = ['<tool_call>', '</tool_call>']  # Qwen2.5 has these as added, not special
LLAMA2_SPECIAL = ['<unk>', '<s>', '</s>']
LLAMA3_SPECIAL = ['<|begin_of_text|>', '<|end_of_text|>', '<|reserved_special_token_0|>',
                  '<|reserved_special_token_1|>', '<|finetune_right_pad_id|>', '<|reserved_special_token_2|>',
                  '<|start_header_id|>', '<|end_header_id|>', '<|eom_id|>', '<|eot_id|>']


def training_text():
    return corpus() + '\n'.join(random_strings(300, seed=7, pieces=HF_PIECES)) + '\n'


def train(pattern, nfc, ignore_merges):
    tok = Tokenizer(BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior='isolated', invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=800, min_frequency=2, show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([training_text()], trainer)
    return tok


def decoder_entries(tok):
    """tokenizer_config.json's added_tokens_decoder, as transformers writes it."""
    out = {}
    for id_, t in sorted(tok.get_added_tokens_decoder().items()):
        out[str(id_)] = {'content': t.content, 'lstrip': t.lstrip, 'normalized': t.normalized,
                         'rstrip': t.rstrip, 'single_word': t.single_word, 'special': t.special}
    return out


def write_json(path, doc):
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write('\n')


def make_qwen2(out):
    tok = train(QWEN2_PATTERN, nfc=True, ignore_merges=False)
    tok.add_special_tokens(QWEN2_SPECIAL)
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in QWEN2_PLAIN])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.save(os.path.join(out, 'tokenizer.json'))
    # As Qwen2.5-Instruct's, less the chat template.
    write_json(os.path.join(out, 'tokenizer_config.json'), {
        'add_bos_token': False, 'add_prefix_space': False, 'added_tokens_decoder': decoder_entries(tok),
        'additional_special_tokens': QWEN2_SPECIAL[1:], 'bos_token': None,
        'clean_up_tokenization_spaces': False, 'eos_token': '<|im_end|>', 'errors': 'replace',
        'model_max_length': 131072, 'pad_token': '<|endoftext|>', 'split_special_tokens': False,
        'tokenizer_class': 'Qwen2Tokenizer', 'unk_token': None})


def make_llama3(out):
    tok = train(LLAMA3_PATTERN, nfc=False, ignore_merges=True)
    tok.add_special_tokens(LLAMA3_SPECIAL)
    bos = ('<|begin_of_text|>', tok.token_to_id('<|begin_of_text|>'))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single='<|begin_of_text|> $A:0',
                                      pair='<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1',
                                      special_tokens=[bos]),
    ])
    tok.save(os.path.join(out, 'tokenizer.json'))
    # As Meta-Llama-3.1-8B's.
    write_json(os.path.join(out, 'tokenizer_config.json'), {
        'added_tokens_decoder': decoder_entries(tok), 'bos_token': '<|begin_of_text|>',
        'clean_up_tokenization_spaces': True, 'eos_token': '<|end_of_text|>',
        'model_input_names': ['input_ids', 'attention_mask'], 'model_max_length': 131072,
        'tokenizer_class': 'PreTrainedTokenizerFast'})


def make_gpt2_tf5(out):
    tmp = tempfile.mkdtemp(prefix='zlua_gpt2_')
    try:
        for name in ('vocab.json', 'merges.txt'):
            shutil.copy(os.path.join(DATA, 'gpt2_tok', name), tmp)
        GPT2TokenizerFast.from_pretrained(tmp).save_pretrained(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_llama2(out):
    tok = Tokenizer(BPE(unk_token='<unk>', fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend('\u2581'), normalizers.Replace(' ', '\u2581')])
    # A small alphabet, so that rarer characters go through the byte tokens.
    trainer = BpeTrainer(vocab_size=800, min_frequency=2, show_progress=False, limit_alphabet=120,
                         special_tokens=LLAMA2_SPECIAL)
    tok.train_from_iterator([training_text()], trainer)
    trained = json.loads(tok.to_str())['model']
    # LLaMA's layout: the three special tokens, the 256 byte tokens, then what was learnt.
    vocab = {t: i for i, t in enumerate(LLAMA2_SPECIAL + ['<0x%02X>' % b for b in range(256)])}
    for t, _ in sorted(trained['vocab'].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(' ')) for m in trained['merges']]
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token='<unk>', fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend('\u2581'), normalizers.Replace(' ', '\u2581')])
    tok.decoder = decoders.Sequence([decoders.Replace('\u2581', ' '), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(' ', 1, 0)])
    tok.add_special_tokens(LLAMA2_SPECIAL)
    tok.post_processor = processors.TemplateProcessing(single='<s>:0 $A:0', pair='<s>:0 $A:0 <s>:1 $B:1',
                                                       special_tokens=[('<s>', 1)])
    tok.save(os.path.join(out, 'tokenizer.json'))
    # As Mistral-7B-v0.1's, read through tokenizer.json as it is.
    write_json(os.path.join(out, 'tokenizer_config.json'), {
        'add_bos_token': True, 'add_eos_token': False, 'added_tokens_decoder': decoder_entries(tok),
        'bos_token': '<s>', 'clean_up_tokenization_spaces': False, 'eos_token': '</s>', 'legacy': True,
        'model_max_length': 32768, 'pad_token': None, 'tokenizer_class': 'PreTrainedTokenizerFast',
        'unk_token': '<unk>'})


def has_added(text, tok):
    return any(t.content in text for t in tok.get_added_tokens_decoder().values())


def expected(out):
    """expected.json for the folder out: transformers' ids, checked against tokenizers' own."""
    auto = AutoTokenizer.from_pretrained(out)
    fast = Tokenizer.from_file(os.path.join(out, 'tokenizer.json'))
    word_texts = set(HARD + HF_EXTRA)
    texts = live_texts() + HF_EXTRA + random_strings(150, seed=21, pieces=HF_PIECES)
    cases = []
    for k, s in enumerate(texts):
        ids = auto(s)['input_ids']
        assert fast.encode(s).ids == ids, (out, s, fast.encode(s).ids, ids)
        # The text with the next one as a pair (an empty one is no pair, in transformers).
        nxt = texts[(k + 1) % len(texts)]
        pair_ids = auto(s, nxt)['input_ids']
        assert (fast.encode(s, nxt).ids if nxt else fast.encode(s).ids) == pair_ids, (out, s, nxt)
        case = {'text': s, 'ids': ids, 'pair_ids': pair_ids}
        decoded = fast.decode(ids, skip_special_tokens=False)
        if decoded != s:
            case['decoded'] = decoded
        if s in word_texts and not has_added(s, fast):
            norm = fast.normalizer.normalize_str(s) if fast.normalizer else s
            # Without a pre-tokenizer the normalized text is the one word.
            case['words'] = [w for w, _ in fast.pre_tokenizer.pre_tokenize_str(norm)] if fast.pre_tokenizer else (
                [norm] if norm else [])
        cases.append(case)
    with open(os.path.join(out, 'expected.json'), 'w', encoding='utf-8') as f:
        # One case a line: a diff shows which case changed.
        f.write('{"made_by": "tests/interop/make_hf_toks.py", "tokenizers": %s, "transformers": %s,\n "cases": [\n'
                % (json.dumps(tokenizers.__version__), json.dumps(transformers.__version__)))
        f.write(',\n'.join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write('\n]}\n')


def main():
    makers = (('qwen2_tok', make_qwen2), ('llama3_tok', make_llama3), ('gpt2_tok_tf5', make_gpt2_tf5),
              ('llama2_tok', make_llama2))
    for name, make in makers:
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        out = os.path.join(DATA, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        make(out)
        expected(out)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        print('%s: %s, %d bytes' % (out, ', '.join(sorted(os.listdir(out))), size))


if __name__ == '__main__':
    main()
