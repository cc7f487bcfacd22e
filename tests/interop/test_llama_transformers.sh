#!/bin/sh
# zlua's LLaMA, Qwen2 and Mistral files and generation against transformers,
# both ways (tests/interop/check_llama_transformers.py). Exits 77, CTest's
# skip, when python3 or its torch/transformers packages are missing.
#   test_llama_transformers.sh ZLUA_EXE SOURCE_DIR
zlua=$1
src=$2
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import torch, transformers' >/dev/null 2>&1; then
    echo "skipped: python3 lacks torch/transformers (pip install torch transformers)"
    exit 77
fi
exec python3 "$src/tests/interop/check_llama_transformers.py" "$zlua" "$src"
