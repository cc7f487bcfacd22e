#!/bin/sh
# Interop of zlua's .safetensors files with Python's safetensors library, both
# ways (scripts/check_safetensors_python.py). Exits 77, CTest's skip, when
# python3 or its safetensors/numpy packages are missing.
#   test_safetensors_python.sh ZLUA_EXE SOURCE_DIR
zlua=$1
src=$2
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import safetensors, numpy' >/dev/null 2>&1; then
    echo "skipped: python3 lacks safetensors/numpy (pip install safetensors numpy)"
    exit 77
fi
exec python3 "$src/scripts/check_safetensors_python.py" "$zlua"
