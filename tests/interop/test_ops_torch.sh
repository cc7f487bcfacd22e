#!/bin/sh
# zlua's ops against torch in float64, forward and backward, group by group
# (tests/interop/ops/<group>.{lua,py}, tests/interop/check_ops_torch.py).
# Exits 77, CTest's skip, when python3 or its torch package is missing.
#   test_ops_torch.sh ZLUA_EXE SOURCE_DIR [group...]
zlua=$1
src=$2
shift 2
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import torch' >/dev/null 2>&1; then
    echo "skipped: python3 lacks torch (pip install torch)"
    exit 77
fi
exec python3 "$src/tests/interop/check_ops_torch.py" "$zlua" "$src" "$@"
