#!/usr/bin/env bash
# The README's first command: installs the Debian packages zlua needs (as root;
# otherwise prints the apt-get line), builds into build/ (ZLUA_BUILD_DIR to
# change it) and trains the digits example.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZLUA_BUILD_DIR:-$root/build}
"$root/scripts/deps.sh"
cmake -S "$root" -B "$build"
cmake --build "$build" -j"$(nproc)"
echo "zlua: built $build/bin/zlua; training the digits example"
"$build/bin/zlua" "$root/examples/digits/train.lua"
