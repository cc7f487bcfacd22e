#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) in a tree of their own with clang
# (-DZLUA_FUZZ=ON: the calling build is left as it is) and runs each for a few
# seconds over a copy of its seed corpus (corpus/<target>/, so the repository
# is never written to): every seed first, then new inputs. A crash, hang,
# leak, sanitizer report or failed check fails the test, with the target's
# log and the input that did it kept in TREE/findings/. Without clang or
# libFuzzer it prints why and exits 77, CTest's skip.
# Usage: test_fuzz.sh SOURCE_DIR TREE [SECONDS_PER_TARGET]
set -euo pipefail
src=$1
tree=$2
secs=${3:-10}
cc=${ZLUA_FUZZ_CC:-clang}
targets=(idx csv cifar10 gzip safetensors json manifest)
need="apt-get install clang libclang-rt-14-dev libomp-dev"

mkdir -p "$tree"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! command -v "$cc" >/dev/null; then
  echo "skipped: no $cc to build the fuzz targets with (Debian: $need)"
  exit 77
fi
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n; }\n' \
  >"$probe/f.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/f.c" -o "$probe/f" >"$probe/log" 2>&1; then
  echo "skipped: $cc cannot build a libFuzzer target with ASan+UBSan (Debian: $need):"
  cat "$probe/log"
  exit 77
fi
printf 'int main(void) { int n = 0;\n#pragma omp parallel reduction(+:n)\nn++;\nreturn n < 1; }\n' >"$probe/omp.c"
if ! "$cc" -fopenmp "$probe/omp.c" -o "$probe/omp" >"$probe/log" 2>&1; then
  echo "skipped: $cc has no OpenMP runtime, which the engine needs (Debian: $need):"
  cat "$probe/log"
  exit 77
fi

# CUDA, MPI, libaio, readline and oneDNN do not touch the readers: left out,
# the tree builds in a few minutes.
cmake -S "$src" -B "$tree" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZLUA_FUZZ=ON \
      -DZLUA_TESTS=OFF -DZLUA_CUDA=OFF -DZLUA_MPI=OFF -DZLUA_AIO=OFF -DZLUA_READLINE=OFF -DZLUA_ONEDNN=OFF \
      >"$tree/configure.log" 2>&1 || { cat "$tree/configure.log"; exit 1; }
cmake --build "$tree" -j2 --target "${targets[@]/#/fuzz_}"

export OMP_NUM_THREADS=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
findings="$tree/findings"
rm -rf "$findings"
mkdir -p "$findings"
leaks=1
status=0
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "$src/tests/fuzz/corpus/$t" "$work/corpus"
  log="$findings/$t.log"
  # libFuzzer's own error exit code is 77, CTest's skip: failures exit 1 here.
  run() {
    "$tree/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -error_exitcode=1 \
      -timeout_exitcode=1 -detect_leaks=$leaks -artifact_prefix="$findings/$t-" -print_final_stats=1 \
      "$work/corpus" >"$log" 2>&1
  }
  rc=0
  run || rc=$?
  # LeakSanitizer cannot run under ptrace (some containers and debuggers):
  # check everything else rather than nothing.
  if [ $rc -ne 0 ] && [ $leaks -eq 1 ] && grep -q "LeakSanitizer has encountered a fatal error" "$log"; then
    echo "note: LeakSanitizer does not work here; leak checking is off"
    leaks=0
    rc=0
    run || rc=$?
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [ $rc -ne 0 ]; then
    echo "FAIL fuzz_$t (exit $rc); its log and input are in $findings:"
    tail -n 60 "$log"
    status=1
  else
    echo "ok   fuzz_$t: ${execs:-?} inputs in $secs s, $(ls "$work/corpus" | wc -l) in its corpus"
  fi
  rm -rf "$work"
done
exit $status
