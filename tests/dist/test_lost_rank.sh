#!/usr/bin/env bash
# A rank killed with SIGKILL mid-run (test_lost_rank.lua), under `zlua --nprocs 3`
# and plain mpirun, and a rank whose script raises: every other rank must stop
# non-zero, saying on its stderr that rank 1 was lost, well within 60 s. ZLUA_COMM_TIMEOUT is lowered so that
# a failure to notice shows as a timeout rather than a hang.
# Usage: test_lost_rank.sh <path to zlua>.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../cli/lib.sh"
mpi_test_setup "${1:-}" test_lost_rank.sh
export ZLUA_COMM_TIMEOUT=15 OMPI_MCA_orte_tag_output=1
script=$here/test_lost_rank.lua

# run [command...]: stdout, stderr, status and seconds taken into $out, $err, $rc, $took.
run() {
    local t0=$(date +%s%N)
    timeout 58 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    took=$((($(date +%s%N) - t0) / 1000000000))
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}

# said <rank>: rank's own stderr (tagged "[job,rank]<stderr>:") names rank 1 as lost.
said() {
    grep -Eq "^\[[0-9]+,$1\]<stderr>:zlua: .*rank $1: lost (.*, )?rank 1 \(process [0-9]+ ended\)" "$tmp/err"
}

run "$ZLUA" --nprocs 3 "$script"
check "zlua --nprocs 3: the job stops non-zero within 60 s" eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$took" -lt 60 ]'
check "zlua --nprocs 3: rank 0 (waiting) names rank 1 as lost" said 0
check "zlua --nprocs 3: rank 2 (computing) names rank 1 as lost" said 2
check "zlua --nprocs 3: no rank ran on" eval '! has "$out" "was not stopped"'

# A Lua error on rank 1: its message and traceback, then the others stop (its
# communicators are not closed, which would wait for them in vain).
run "$ZLUA" --nprocs 3 "$script" raise
check "a raising rank: the job stops non-zero within 60 s" eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$took" -lt 60 ]'
check "a raising rank: rank 1 says why, with a traceback" eval \
  'grep -q "^\[[0-9]*,1\]<stderr>:zlua: .*rank 1 gives up" "$tmp/err" && grep -q "^\[[0-9]*,1\]<stderr>:stack traceback:" "$tmp/err"'
check "a raising rank: rank 0 names rank 1 as lost" said 0
check "a raising rank: rank 2 names rank 1 as lost" said 2
check "a raising rank: no rank ran on" eval '! has "$out" "was not stopped"'

# Under plain mpirun each rank runs in a shell that keeps its exit status. The
# shell ignores mpirun's SIGTERM (which still reaches zlua, in the same
# process group) so that it lives to write the status down.
cat >rank.sh <<SH
trap ':' TERM
"$ZLUA" "$script" & child=\$!
while kill -0 \$child 2>/dev/null; do wait \$child; done
wait \$child
rc=\$?
echo \$rc >"$tmp/status.\$OMPI_COMM_WORLD_RANK"
exit \$rc
SH
run mpirun --allow-run-as-root --oversubscribe -np 3 bash rank.sh
check "mpirun -np 3: the job stops non-zero within 60 s" eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$took" -lt 60 ]'
for r in 0 2; do
    status=$(cat "$tmp/status.$r" 2>/dev/null)
    check "mpirun -np 3: rank $r exits non-zero (status '$status')" eval '[ -n "$status" ] && [ "$status" != 0 ]'
    check "mpirun -np 3: rank $r names rank 1 as lost" said $r
done

echo "test_lost_rank: $passed passed, $failed failed"
[ "$failed" = 0 ]
