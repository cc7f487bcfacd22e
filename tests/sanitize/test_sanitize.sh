#!/usr/bin/env bash
# Builds the C unit tests and the hostile-input battery's (tests/hostile) in a
# separate tree with AddressSanitizer and UndefinedBehaviorSanitizer
# (-DZLUA_SANITIZE=ON) and runs each of them; any
# report fails the test. The options after the compiler (-DZLUA_MPI=OFF, ...)
# configure the tree as the calling build is, and the tests it leaves out
# (test_aio without libaio) are left out here too.
# Usage: test_sanitize.sh SOURCE_DIR TREE [C_COMPILER [CMAKE_OPTION...]]
set -euo pipefail
src=$1
tree=$2
cc=${3:-cc}
shift $(($# < 3 ? $# : 3))

mkdir -p "$tree"
cmake -S "$src" -B "$tree" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DZLUA_SANITIZE=ON -DZLUA_NATIVE=ON -DZLUA_TESTS=ON "$@" >"$tree/configure.log" 2>&1 \
  || { cat "$tree/configure.log"; exit 1; }

tests=()
for f in "$src"/tests/c/test_*.c "$src"/tests/hostile/test_*.c; do
  t=$(basename "$f" .c)
  group=$(basename "$(dirname "$f")")
  [ "$group" = hostile ] || group=c
  if grep -qE "add_test\((\[=\[)?$group\.$t[] ]" "$tree/tests/CTestTestfile.cmake"; then tests+=("$t"); fi
done
[ ${#tests[@]} -gt 0 ] || { echo "no C tests under $src/tests/c" >&2; exit 1; }
cmake --build "$tree" -j2 --target "${tests[@]}"

# Leak checking is on with nothing suppressed: libgomp's thread pool stays
# reachable and OpenBLAS takes its buffers with mmap, so neither reports.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export OMP_NUM_THREADS=2
limit=300     # seconds per test binary: a hang fails rather than stalls the suite
leaks=1
status=0
for t in "${tests[@]}"; do
  log="$tree/$t.sanitize.log"
  start=$SECONDS
  rc=0
  ASAN_OPTIONS=detect_leaks=$leaks:abort_on_error=0 timeout -k 10 "$limit" "$tree/tests/$t" >"$log" 2>&1 || rc=$?
  # LeakSanitizer cannot run under ptrace (some containers and debuggers):
  # check everything else rather than nothing.
  if [ $rc -ne 0 ] && [ $leaks -eq 1 ] && grep -q "LeakSanitizer has encountered a fatal error" "$log"; then
    echo "note: LeakSanitizer does not work here; leak checking is off"
    leaks=0
    rc=0
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 timeout -k 10 "$limit" "$tree/tests/$t" >"$log" 2>&1 || rc=$?
  fi
  if [ $rc -ne 0 ] || grep -Eq "runtime error:|ERROR: (Address|Leak)Sanitizer" "$log"; then
    why="exit $rc"
    [ $rc -ne 124 ] || why="no result within $limit s"
    echo "FAIL $t ($why, $((SECONDS - start)) s)"
    cat "$log"
    status=1
  else
    echo "ok   $t: $(tail -n 1 "$log") ($((SECONDS - start)) s)"
  fi
done
exit $status
