#!/usr/bin/env bash
# The floor tests' mechanism at work: a program calling an op (a floor above
# core) does not link against core's objects alone, and the link names the
# op; against the whole engine it links and runs.
# Usage: test_upward.sh CC INCLUDE_DIR "CORE_OBJECTS" LIBZLUA WORK_DIR [FLAGS]
# (FLAGS: what the engine was built with that its users need too, such as
# the sanitizers).
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 cc include 'core.o;...' libzlua.so workdir [flags]" >&2; exit 2; }
cc=$1 include=$2 objects=$3 lib=$4 work=$5
read -r -a flags <<< "${6:-}"
mkdir -p "$work"
cat > "$work/probe.c" <<'C'
#include "zlua/zlua.h"
int main(void)
{
    int64_t shape[1] = {4};
    zl_tensor *x = zl_tensor_zeros(ZL_DTYPE_F32, 1, shape);
    zl_tensor *y = zl_relu(x);
    int bad = !y || zl_tensor_numel(y) != 4;
    zl_tensor_release(y);
    zl_tensor_release(x);
    return bad;
}
C
"$cc" -std=c11 "${flags[@]}" -I"$include" -c "$work/probe.c" -o "$work/probe.o"
IFS=';' read -r -a core <<< "$objects"
if "$cc" "${flags[@]}" "$work/probe.o" "${core[@]}" -fopenmp -lm -lpthread -o "$work/upward" 2> "$work/link.log"; then
  echo "FAIL a call from core's floor up to zl_relu linked against core's objects alone"; exit 1
fi
if ! grep -q "undefined reference to \`zl_relu'" "$work/link.log"; then
  echo "FAIL the link failed, but not on zl_relu:"; cat "$work/link.log"; exit 1
fi
echo "ok   calling zl_relu (ops) with only core's objects fails to link, naming zl_relu"
"$cc" "${flags[@]}" "$work/probe.o" "$lib" -Wl,-rpath,"$(dirname "$lib")" -o "$work/whole"
"$work/whole"
echo "ok   the same program links and runs against the whole engine"
