#!/usr/bin/env bash
# On the GPU machine (nvcc, CMake, a C compiler, no Debian -dev packages, no
# package registry): unpacks the .deb files of scripts/gpu_deps.sh with dpkg -x
# into the build folder's deps/ (the .deb folder stays small enough to carry
# to the machine), and configures and builds zlua against them alone,
# without MPI, libaio, readline or oneDNN (docs/gpu.md).
# Usage: scripts/gpu_build.sh [extra cmake options]; ZLUA_GPU_DEPS and
# ZLUA_BUILD_DIR (default build-gpu/) move the folders; ZLUA_BUILD_TARGETS
# (space-separated) builds those targets alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${ZLUA_GPU_DEPS:-$root/.gpu-deps}
build=${ZLUA_BUILD_DIR:-$root/build-gpu}
prefix=$build/deps

ls "$deps"/*.deb >/dev/null 2>&1 || { echo "gpu_build: no .deb files in $deps: run scripts/gpu_deps.sh on the build machine and copy $deps here" >&2; exit 1; }
command -v dpkg >/dev/null || { echo "gpu_build: dpkg not found (needed for dpkg -x)" >&2; exit 1; }
rm -rf "$prefix"
mkdir -p "$prefix"
for deb in "$deps"/*.deb; do dpkg -x "$deb" "$prefix"; done
# Absolute links (zlib1g-dev's libz.so -> /lib/.../libz.so.1.2.13) point
# outside the prefix: point them inside, or CMake settles for libz.a.
find "$prefix" -type l | while read -r l; do
  t=$(readlink "$l")
  case $t in /*) ln -sf "$prefix$t" "$l" ;; esac
done
arch=$(basename "$(dirname "$(find "$prefix/usr/lib" -name 'liblua5.4.so.0' | head -1)")")
lib=$prefix/usr/lib/$arch
blas=$lib/openblas-pthread

# The .pc files name /usr; point them at the prefix. openblas.pc is only under
# openblas-pthread/: Debian links it into pkgconfig/ through update-alternatives,
# which dpkg -x does not run.
find "$prefix" -name '*.pc' -exec sed -i -E "s#^([A-Za-z_]+)=/usr#\\1=$prefix/usr#" {} +
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$blas/pkgconfig:$prefix/usr/share/pkgconfig
unset PKG_CONFIG_PATH

# The machine's own pkg-config if it has one, else the unpacked pkgconf.
pkgconfig=$(command -v pkg-config || true)
if [ -z "$pkgconfig" ]; then
  pkgconfig=$prefix/pkg-config
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$lib" "$prefix/usr/bin/pkgconf" > "$pkgconfig"
  chmod +x "$pkgconfig"
fi

# DT_RPATH (not RUNPATH) so libopenblas finds the unpacked libgfortran too,
# both at link time and when zlua runs.
rpath="-Wl,--disable-new-dtags,-rpath,$lib:$blas"
# Debian keeps lua5.4-deb-multiarch.h under include/<arch>/, which an installed
# system searches by default.
cmake -S "$root" -B "$build" -DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$pkgconfig" \
  -DCMAKE_C_FLAGS="-isystem $prefix/usr/include/$arch" \
  -DCMAKE_EXE_LINKER_FLAGS="$rpath" -DCMAKE_SHARED_LINKER_FLAGS="$rpath" \
  -DZLUA_MPI=OFF -DZLUA_AIO=OFF -DZLUA_READLINE=OFF -DZLUA_ONEDNN=OFF "$@"
targets=()
for t in ${ZLUA_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
echo "gpu_build: built $build/bin/zlua against $prefix"
