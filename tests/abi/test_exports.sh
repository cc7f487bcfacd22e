#!/usr/bin/env bash
# The shared libraries export only the API: every defined dynamic symbol starts
# with zl_, zlua_ or luaopen_ (STYLE.md rule 1). Usage: test_exports.sh LIB...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 libzlua.so [libzlua-lua.so ...]" >&2; exit 2; }
status=0
for lib in "$@"; do
  [ -f "$lib" ] || { echo "FAIL $lib: no such file" >&2; status=1; continue; }
  syms=$(nm -D --defined-only "$lib" | awk '{print $NF}')
  count=$(printf '%s\n' "$syms" | grep -c . || true)
  stray=$(printf '%s\n' "$syms" | grep -Ev '^(zl_|zlua_|luaopen_)' | grep . || true)
  if [ "$count" -eq 0 ]; then
    echo "FAIL $lib: exports nothing" >&2; status=1
  elif [ -n "$stray" ]; then
    echo "FAIL $lib: exports symbols outside zl_/zlua_/luaopen_:" >&2
    printf '  %s\n' $stray >&2
    status=1
  else
    echo "ok   $lib: $count symbols, all zl_/zlua_/luaopen_"
  fi
done
exit $status
