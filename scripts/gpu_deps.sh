#!/usr/bin/env bash
# On the build machine (Debian 12, with apt): downloads the .deb files a GPU
# machine without a package registry needs to build zlua (docs/gpu.md), into
# .gpu-deps/ (ignored by git; ZLUA_GPU_DEPS to change it). Nothing is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${ZLUA_GPU_DEPS:-$root/.gpu-deps}

# Lua and OpenBLAS with what they need at run time (apt-cache depends), zlib
# headers, and pkg-config itself. Left out: what every machine with
# a C compiler has (libc6, libgcc-s1, libstdc++6, gcc-12-base), and
# liblua5.4-dev's libreadline-dev, which only Lua's own interpreter uses.
packages=(
  liblua5.4-dev liblua5.4-0
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0
  zlib1g-dev zlib1g
  pkgconf-bin libpkgconf3
)

command -v apt-get >/dev/null || { echo "gpu_deps: apt-get not found: run this on the Debian build machine" >&2; exit 1; }
mkdir -p "$deps"
cd "$deps"
rm -f ./*.deb
apt-get download "${packages[@]}"
echo "gpu_deps: $(ls ./*.deb | wc -l) packages in $deps ($(du -sh . | cut -f1)); copy the tree with it to the GPU machine"
echo "gpu_deps: then run scripts/gpu_build.sh there"
