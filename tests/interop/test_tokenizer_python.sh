#!/bin/sh
# zlua.tokenizer live against Hugging Face's tokenizers and transformers
# (check_tokenizer_python.py). Exits 77, CTest's skip, when python3 or those
# packages are missing.
#   test_tokenizer_python.sh ZLUA_EXE SOURCE_DIR
zlua=$1
src=$2
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import tokenizers, transformers' >/dev/null 2>&1; then
    echo "skipped: python3 lacks tokenizers/transformers (pip install tokenizers transformers)"
    exit 77
fi
exec python3 "$src/tests/interop/check_tokenizer_python.py" "$zlua" "$src"
