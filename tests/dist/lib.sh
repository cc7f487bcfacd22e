# Shared by the multi-rank training tests (sourced; the caller sets $TMP and
# fails=0): run a training script and compare the "step N loss L" lines of runs.

run() {   # run OUT ARGS...: the run's "step" lines into OUT; a failed run fails the test
  local out=$1
  shift
  if ! timeout 300 "$@" > "$TMP/log" 2>&1; then
    echo "FAIL: $* exited with an error:"
    tail -n 60 "$TMP/log"
    fails=$((fails + 1))
  fi
  grep '^step ' "$TMP/log" > "$out" || true
}

same() {   # same A B WHAT: the two runs' lines are identical
  if [ -s "$1" ] && cmp -s "$1" "$2"; then echo "ok   $3"; else echo "FAIL $3"; diff "$1" "$2" | head -n 6; fails=$((fails + 1)); fi
}
