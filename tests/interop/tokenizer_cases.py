"""The hard strings the tokenizer tests check, and the training text for the tiny vocabulary:
contractions, runs of spaces, digits, accents, emoji, CJK and other scripts, special tokens.
Shared by make_gpt2_tok.py (which freezes Hugging Face's ids into expected.json) and
check_tokenizer_python.py (which compares live). Test data, not part of zlua.
"""

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
