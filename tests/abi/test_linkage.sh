#!/usr/bin/env bash
# The CUDA libraries are not linked: the engine and the zlua program list no
# libcudart, libcublas or libnccl among their needed libraries, a zlua that
# starts and runs Lua has none mapped, not even the CUDA module, and zlua.pc
# names no absolute library path. The CUDA module (when the build has one)
# needs no CUDA library either, shows its entry alone, and is opened by the
# first device call. Usage: test_linkage.sh LIBZLUA ZLUA ZLUA_PC [MODULE]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 libzlua.so zlua zlua.pc [libzlua_cuda.so]" >&2; exit 2; }
lib=$1 exe=$2 pc=$3 module=${4:-}
status=0
cuda='libcudart|libcublas|libnccl'
for f in "$lib" "$exe" $module; do
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if bad=$(printf '%s\n' "$needed" | grep -E "$cuda"); then
    echo "FAIL $f needs $(echo $bad)"; status=1
  else
    echo "ok   $f needs no CUDA library ($(echo $needed | wc -w) needed)"
  fi
done
mapped=$("$exe" -e 'local zl = require "zlua"; local x = zl.randn(4, 4):matmul(zl.randn(4, 4))
  print(io.open("/proc/self/maps"):read("a"))' | grep -Eo "($cuda|libzlua_cuda)[^ ]*" | sort -u || true)
if [ -n "$mapped" ]; then
  echo "FAIL zlua maps $(echo $mapped) without using a GPU"; status=1
else
  echo "ok   zlua runs a matmul with no CUDA library or module mapped"
fi
if [ -n "$module" ]; then
  shown=$(nm -D --defined-only "$module" | awk '{print $3}')
  if [ "$shown" != zlua_cuda_backend ]; then
    echo "FAIL $module shows $(echo $shown), not its entry alone"; status=1
  else
    echo "ok   $module shows its entry alone"
  fi
  opened=$("$exe" -e 'local zl = require "zlua"; zl.cuda.device_count()
    print(io.open("/proc/self/maps"):read("a"))' | grep -c "libzlua_cuda" || true)
  if [ "$opened" -gt 0 ]; then
    echo "ok   a device count opens the module"
  else
    echo "FAIL a device count did not open $module"; status=1
  fi
fi
if abs=$(grep -E '^(Libs|Libs.private|Cflags):' "$pc" | tr ' ' '\n' | grep -E '^(-L|-I)?/'); then
  echo "FAIL $pc names absolute paths: $(echo $abs)"; status=1
else
  echo "ok   $pc names no absolute path"
fi
exit $status
