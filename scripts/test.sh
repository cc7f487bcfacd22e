#!/usr/bin/env bash
# The README's second command (and CI's): installs what is missing as setup.sh
# does, builds into build/ (ZLUA_BUILD_DIR to change it) and runs every test
# through CTest; the exit status is CTest's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZLUA_BUILD_DIR:-$root/build}
"$root/scripts/deps.sh"
cmake -S "$root" -B "$build"
cmake --build "$build" -j"$(nproc)"
# OpenMPI refuses to start as root unless told; tests that launch mpirun set
# this themselves, and so does this script for any that forget.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec ctest --test-dir "$build" --output-on-failure -j2 --timeout 1800
