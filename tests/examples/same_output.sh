#!/usr/bin/env bash
# Runs an example twice with the same arguments (so the same seed and, through
# OMP_NUM_THREADS, the same thread count) and fails unless both runs print
# the same bytes and at least one `step <n> loss <loss>` line.
# Usage: same_output.sh <zlua> <script> [args...]
set -u
zlua=${1:?usage: same_output.sh <zlua> <script> [args...]}
script=${2:?usage: same_output.sh <zlua> <script> [args...]}
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for run in 1 2; do
  if ! "$zlua" "$script" "$@" >"$tmp/out$run" 2>"$tmp/err$run"; then
    echo "FAIL: run $run of $script $* exited with an error:"
    cat "$tmp/err$run"
    exit 1
  fi
done
steps=$(grep -c '^step [0-9]* loss ' "$tmp/out1")
if [ "$steps" -eq 0 ]; then
  echo "FAIL: $script $* printed no 'step <n> loss <loss>' line"
  exit 1
fi
if ! cmp -s "$tmp/out1" "$tmp/out2"; then
  echo "FAIL: two runs of $script $* differ:"
  diff "$tmp/out1" "$tmp/out2" | head -20
  exit 1
fi
echo "ok: two runs of $script $* printed the same $(wc -c <"$tmp/out1") bytes ($steps steps)"
