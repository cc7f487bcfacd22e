#!/usr/bin/env bash
# The progress line as a person sees it: the digits example on a
# pseudo-terminal (script(1), from Debian's essential bsdutils) at one rank
# and, through `zlua --nprocs 2`, at two: rank 0 draws one updating line with
# step N/total, loss, samples/s and the time left, the per-step log lines are
# left out, and every other line is printed once. With ZLUA_NO_PROGRESS, or
# not on a terminal, the log lines come back (rank 0's alone).
# Usage: test_progress.sh <zlua> <source dir> [mpi]
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../cli/lib.sh"
ZLUA=${1:?usage: test_progress.sh <zlua> <source dir> [mpi]}
src=${2:?usage: test_progress.sh <zlua> <source dir> [mpi]}
mpi=${3:-}
digits="$src/examples/digits/train.lua"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
err=''

# on_terminal <command...>: what the terminal showed, \r and ESC[K kept, into $out.
on_terminal() {
    local cmd
    printf -v cmd '%q ' "$@"
    timeout 120 script -qefc "$cmd" /dev/null </dev/null >"$tmp/term" 2>&1
    rc=$?
    out=$(cat "$tmp/term")
}
count() { grep -o -- "$1" "$tmp/term" | wc -l; }
# The lines that end in a newline, the progress line's redraws taken out.
lines() { tr -d '\r' <"$tmp/term" | sed 's/\x1b\[K/\n/g' | grep -v '^step [0-9]*/' | grep -v '^$'; }

check_run() {   # check_run <label> <steps in all>
    local label=$1 total=$2
    check "$label: exits 0" [ "$rc" = 0 ]
    check "$label: step N/$total with the time left and samples/s" \
        eval 'has "$out" "step 2/$total  loss " && has "$out" " samples/s  eta " && has "$out" "step $total/$total  loss "'
    check "$label: one progress line, redrawn in place ($total draws)" [ "$(count "step [0-9]*/$total ")" = "$total" ]
    check "$label: no per-step log line" [ "$(count 'step [0-9]* loss ')" = 0 ]
    check "$label: every other line once" [ -z "$(lines | sort | uniq -d)" ]
    check "$label: the summary lines are there" \
        eval '[ "$(lines | grep -c "^epoch [12] loss ")" = 2 ] && [ "$(lines | grep -c "^accuracy 0\.")" = 1 ]'
}

on_terminal "$ZLUA" "$digits" --epochs 2
check_run "1 rank" 90
on_terminal env ZLUA_NO_PROGRESS=1 "$ZLUA" "$digits" --epochs 2
check "ZLUA_NO_PROGRESS=1: the per-step log lines and no progress line" \
    eval '[ "$rc" = 0 ] && [ "$(count "step [0-9]* loss ")" = 90 ] && [ "$(count "step [0-9]*/90 ")" = 0 ]'

if [ "$mpi" = mpi ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    on_terminal "$ZLUA" --nprocs 2 "$digits" --epochs 2
    # Each rank takes half of every epoch: 23 steps of 2 x 32 images.
    check_run "2 ranks" 46
    check "2 ranks: the header says so" eval 'has "$out" "1438 for training, 359 held out; MLP 64 -> 256 -> 10, AdamW lr 0.003; 2 ranks"'
    # Not on a terminal: rank 0's log lines, each once.
    timeout 120 "$ZLUA" --nprocs 2 "$digits" --epochs 1 >"$tmp/log" 2>"$tmp/log.err" </dev/null
    rc=$? out=$(cat "$tmp/log") err=$(cat "$tmp/log.err")
    check "2 ranks in a log: steps 1 to 23 once each, then the summary" \
        eval '[ "$rc" = 0 ] && [ "$(grep "^step " "$tmp/log" | cut -d" " -f2 | tr "\n" " ")" = "$(seq -s " " 1 23) " ] &&
              [ -z "$(sort "$tmp/log" | uniq -d)" ] && [ "$(grep -c "^accuracy 0\." "$tmp/log")" = 1 ]'
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
