#!/usr/bin/env bash
# Checks the Debian packages zlua builds and tests with. As root it installs the
# missing ones; otherwise it prints the apt-get line to run and exits 1.
# Called by setup.sh and test.sh.
set -euo pipefail
# clang, libclang-rt-14-dev (libFuzzer, the sanitizer runtimes) and libomp-dev
# (clang's OpenMP) build the fuzz targets (tests/fuzz), which the suite runs.
# iproute2's ip makes the network namespaces of tests/dist/test_two_hosts.sh.
packages=(liblua5.4-dev libopenblas-dev libopenmpi-dev openmpi-bin libaio-dev zlib1g-dev
          libreadline-dev cmake pkg-config gcc libc6-dev make libdnnl-dev
          clang libclang-rt-14-dev libomp-dev iproute2)
if ! command -v dpkg-query >/dev/null; then
  echo "zlua: this setup expects Debian (dpkg-query not found); install the equivalents of:" >&2
  echo "  ${packages[*]}" >&2
  exit 1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "zlua: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "zlua: these Debian packages are missing: ${missing[*]}" >&2
  echo "run this, then run $0 again:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
