#!/usr/bin/env bash
# The CUDA libraries are not linked: the engine and the zlua program list no
# libcudart, libcublas or libnccl among their needed libraries, a zlua that
# starts and runs Lua has none mapped, and zlua.pc names no absolute library
# path. Usage: test_linkage.sh LIBZLUA ZLUA ZLUA_PC
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 libzlua.so zlua zlua.pc" >&2; exit 2; }
lib=$1 exe=$2 pc=$3
status=0
cuda='libcudart|libcublas|libnccl'
for f in "$lib" "$exe"; do
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if bad=$(printf '%s\n' "$needed" | grep -E "$cuda"); then
    echo "FAIL $f needs $(echo $bad)"; status=1
  else
    echo "ok   $f needs no CUDA library ($(echo $needed | wc -w) needed)"
  fi
done
mapped=$("$exe" -e 'local zl = require "zlua"; local x = zl.randn(4, 4):matmul(zl.randn(4, 4))
  print(io.open("/proc/self/maps"):read("a"))' | grep -Eo "($cuda)[^ ]*" | sort -u || true)
if [ -n "$mapped" ]; then
  echo "FAIL zlua maps $(echo $mapped) without using a GPU"; status=1
else
  echo "ok   zlua runs a matmul with no CUDA library mapped"
fi
if abs=$(grep -E '^(Libs|Libs.private|Cflags):' "$pc" | tr ' ' '\n' | grep -E '^(-L|-I)?/'); then
  echo "FAIL $pc names absolute paths: $(echo $abs)"; status=1
else
  echo "ok   $pc names no absolute path"
fi
exit $status
