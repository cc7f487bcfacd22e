#!/usr/bin/env bash
# Installs the build to a temporary prefix, checks the installed layout, then
# builds examples/embed against that install twice, with CMake's find_package
# and with pkg-config, and runs both; the installed zlua runs the script too.
# Usage: test_embed.sh SOURCE_DIR BUILD_DIR WORK_DIR LIBDIR [C_COMPILER]
set -euo pipefail
src=$1
build=$2
work=$3
libdir=$4
cc=${5:-cc}
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
for f in include/zlua/zlua.h include/zlua/tensor.h include/zlua/io.h include/zlua/embed.h \
         "$libdir"/libzlua.so "$libdir"/libzlua.a "$libdir"/libzlua-lua.so \
         "$libdir"/pkgconfig/zlua.pc "$libdir"/pkgconfig/zlua-lua.pc \
         "$libdir"/cmake/zlua/zluaConfig.cmake "$libdir"/cmake/zlua/zluaConfigVersion.cmake \
         "$libdir"/cmake/zlua/zluaTargets.cmake share/lua/5.4/zlua/init.lua bin/zlua; do
  [ -e "$prefix/$f" ] || fail "the install lacks $f"
done
stray=$(find "$prefix/include" -name '*_impl.h' -o -name 'node.h' -o -name 'op_util.h' -o -name 'gemm.h')
[ -z "$stray" ] || fail "private headers installed: $stray"
echo "ok   install layout under $prefix"

script=$src/examples/embed/train.lua
check_output() {   # $1: log of a run of the example
  grep -q "c api: step   0" "$1" || fail "no loss printed by the C API part ($1)"
  grep -q "c api: bad matmul refused: .*\[64, 3\].*\[1, 3\]" "$1" || fail "the bad call was not reported ($1)"
  grep -q "lua: held-out loss" "$1" || fail "the Lua script did not train ($1)"
  grep -q "^embed: ok$" "$1" || fail "no final ok ($1)"
}

cmake -S "$src/examples/embed" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "configure with find_package"; }
cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "build with find_package"; }
"$work/cmake/embed" "$script" | tee "$work/run-cmake.log"
check_output "$work/run-cmake.log"
echo "ok   examples/embed built with find_package(zlua)"

mkdir -p "$work/make"
PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" make -C "$work/make" -f "$src/examples/embed/Makefile" \
  CC="$cc" >"$work/make.log" 2>&1 || { cat "$work/make.log"; fail "build with pkg-config"; }
(cd "$src/examples/embed" && "$work/make/embed") >"$work/run-make.log"
check_output "$work/run-make.log"
echo "ok   examples/embed built with pkg-config (default script path)"

"$prefix/bin/zlua" "$script" >"$work/run-zlua.log" 2>&1 || { cat "$work/run-zlua.log"; fail "installed zlua"; }
grep -q "lua: held-out loss" "$work/run-zlua.log" || fail "installed zlua did not run the script"
echo "ok   the installed zlua runs examples/embed/train.lua"
