"""The hard strings the tokenizer tests check, and the training text for the tiny vocabulary:
contractions, runs of spaces, digits, accents, emoji, CJK and other scripts, special tokens;
random strings made of pieces of those; the cases the LLaMA 3 / Qwen2 style tokenizers add
(their special tokens, decomposed accents, digit runs, CRLF). Shared by make_gpt2_tok.py and
make_hf_toks.py (which freeze Hugging Face's ids into expected.json) and
check_tokenizer_python.py (which compares live). Test data, not part of zlua.
"""
import random

HARD = [
    "Hello world",
    "I'm sure you'll see they're right: it's what we've done, and I'd say don't.",
    "'S 'T 'RE 'VE 'M 'LL 'D are upper case",
    "''s ' 's 'x 'll've",
    "  two leading spaces",
    "trailing spaces   ",
    "multiple   spaces    between words",
    "tabs\tand\nnewlines\n\nand\r\nwindows",
    "   \n  x\t \ty",
    " ",
    "   ",
    "\n",
    "digits 1234567890 and 3.14159, 1,000,000 and 42nd",
    "café naïve résumé Ångström façade",
    "combining e\u0301 and precomposed \u00e9",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷!",
    "CJK 中文字符 日本語のテキスト 한국어 텍스트",
    "numbers ½ ² Ⅻ ٣٤ ०१",
    "Arabic العربية, Hebrew עברית, Thai ภาษาไทย, Hindi हिन्दी",
    "nbsp\u00a0and em\u2003space and ideographic\u3000space",
    "zero\u200bwidth and soft\u00adhyphen",
    "math 𝔸𝔹 ∑∫√ and symbols © ® ™ €100",
    "punctuation!!! ... ??? --- (a) [b] {c} <d>",
    "mixed a1b2 c3d4 x_y z-w",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    " <|endoftext|> spaced ",
    "<|endoftext|><|endoftext|>",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "",
]

WORDS = ("the quick brown fox jumps over the lazy dog and it's what we've said: they're here, "
         "you'll see, I'm sure I'd know, don't worry. 12 345 6789 3.14 2024 "
         "café naïve résumé crème brûlée Ångström über straße "
         "中文 字符 日本語 テキスト 한국어 😀 👍 🎉 "
         "hello world tokenizer encode decode merge rank byte level pair").split(' ')


def corpus():
    """About 6 kB of text: fixed sentences of WORDS, so the vocabulary is the same every time."""
    lines = []
    for i in range(120):
        n = 4 + (i * 7) % 9
        words = [WORDS[(i * 13 + k * 29 + k * k) % len(WORDS)] for k in range(n)]
        sep = '  ' if i % 11 == 0 else ' '
        lines.append(sep.join(words) + ('.' if i % 3 else '!'))
    return '\n'.join(lines) + '\n'

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

# More pieces for the LLaMA 3 / Qwen2 patterns and NFC: line breaks after punctuation and
# spaces, digit runs, contractions in other cases, decomposed and reordered marks, Hangul
# jamo, composition exclusions and singletons, and those tokenizers' special tokens.
HF_PIECES = PIECES + [
    '\r', '\r\n\r\n', ' \n', '\t\n', '\n\n ', '12345', '1234567', "'LL", "'Ve", "'ſ", 'ſ',
    'a\u0323\u0302', 'a\u0302\u0323', 'A\u030a', 'o\u0308\u0301', '\u0301', '\u0958', '\u212b', '\u2126',
    '\u1100\u1161\u11a8', '\u1100\u1161', '\u11a8', '가\u11a8', '\u0344', '\u0f73',
    '<|im_start|>', '<|im_end|>', '<tool_call>', '<|begin_of_text|>', '<|eot_id|>', '<|end_of_text|>',
]

# The cases the LLaMA 3 / Qwen2 style tokenizers add to HARD.
HF_EXTRA = [
    '<|im_start|>user\nhi<|im_end|>',
    '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello 123!<|im_end|>\n<|im_start|>assistant\n',
    '<tool_call>{"name": "f"}</tool_call>',
    '<|begin_of_text|>Hello<|end_of_text|>',
    '<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>',
    '<|endoftext|>tail',
    'cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m fac\u0327ade',
    '\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af and \ud55c\uad6d\uc5b4',
    'a\u0323\u0302 a\u0302\u0323 q\u0307\u0323 \u0958 \u0344 \u212b \u2126 \u1e9b\u0323',
    'digits 1 12 123 1234 12345 123456 1234567 ٣٤٥٦٧ 00000000 3.14159',
    'crlf\r\nline\r\n\r\nlast \r\n  \n\t\r\n',
    'emoji 😀😃 👍🏽 👨\u200d👩\u200d👧 🇫🇷🇩🇪!',
    "it's IT'S it'S 'ſ x'ſt y'LL z'Ve 'RE",
    '  leading\n\n  spaces\t\tand\u00a0nbsp\u3000wide  ',
    '!!!hello ?world ...42 <tag>\n\n',
    '\r\n',
    ' \n ',
]


def random_strings(n, seed=15, pieces=PIECES):
    rng = random.Random(seed)
    return [''.join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def live_texts():
    """The strings the live test compares: HARD, random strings, and long words (which zlua
    merges through a queue rather than by scanning)."""
    letters = ''.join(c for c in corpus() if c.isascii() and c.isalpha())
    return HARD + random_strings(400) + [letters, 'ab' * 300, 'a' * 301, ''.join(random_strings(60, seed=3))]
