#!/bin/sh
# zlua.profiling against DeepSpeed's FlopsProfiler on the GPT example's model
# and the same GPT2LMHeadModel (tests/interop/check_flops_deepspeed.py). Exits
# 77, CTest's skip, when python3 or its torch/transformers/deepspeed packages
# are missing.
#   test_flops_deepspeed.sh ZLUA_EXE SOURCE_DIR
zlua=$1
src=$2
if ! command -v python3 >/dev/null 2>&1 \
    || ! python3 -c 'import torch, transformers, deepspeed.profiling.flops_profiler' >/dev/null 2>&1; then
    echo "skipped: python3 lacks torch/transformers/deepspeed (pip install torch transformers deepspeed)"
    exit 77
fi
exec python3 "$src/tests/interop/check_flops_deepspeed.py" "$zlua" "$src"
