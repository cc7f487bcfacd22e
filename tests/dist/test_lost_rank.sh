#!/usr/bin/env bash
# A rank that fails mid-run (test_lost_rank.lua) under `zlua --nprocs 3`: killed
# by SIGKILL, raising a Lua error, exiting with status 3, stopped by SIGSTOP;
# and killed under plain mpirun. Every other rank must stop non-zero saying
# what happened to rank 1, the launcher must exit with rank 1's status, and no
# process of the job may be left. ZLUA_COMM_TIMEOUT is lowered so that a
# failure to notice shows as a timeout rather than a hang.
# Usage: test_lost_rank.sh <path to zlua>.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../cli/lib.sh"
mpi_test_setup "${1:-}" test_lost_rank.sh
export ZLUA_COMM_TIMEOUT=10 OMPI_MCA_orte_tag_output=1
# A name of this run's own, so that the processes left can be counted.
script=$tmp/lost_rank_$$.lua
cp "$here/test_lost_rank.lua" "$script"

# run [command...]: stdout, stderr, status and seconds taken into $out, $err,
# $rc, $took; $left: processes of the job still there 5 s after it ended.
run() {
    local t0=$(date +%s%N)
    timeout 58 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    took=$((($(date +%s%N) - t0) / 1000000000))
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
    for _ in $(seq 50); do pgrep -f "lost_rank_$$.lua" >/dev/null || break; sleep 0.1; done
    left=$(pgrep -f "lost_rank_$$.lua" | wc -l)
}

# said <rank> <pattern>: rank's own stderr (tagged "[job,rank]<stderr>:") has
# a zlua line "rank <rank>[ in <collective>]: <pattern>".
said() {
    grep -Eq "^\[[0-9]+,$1\]<stderr>:zlua: (.*: )?rank $1( in [a-z_]+)?: $2" "$tmp/err"
}
lost1='lost (.*, )?rank 1 \(process [0-9]+ ended\)'

# others_say <name> <what> <pattern>: ranks 0 (waiting) and 2 (computing) both said it.
others_say() {
    check "$1: rank 0 (waiting) $2" said 0 "$3"
    check "$1: rank 2 (computing) $2" said 2 "$3"
}

# ended <name> <status> <seconds>: the job stopped with that status within
# that time, no rank ran on, and nothing of it is left.
ended() {
    want=$2 limit=$3
    check "$1: the job stops with status $want within $limit s (status $rc, $took s)" \
        eval '[ "$rc" = "$want" ] && [ "$took" -lt "$limit" ]'
    check "$1: no rank ran on" eval '! has "$out" "was not stopped"'
    check "$1: no process of the job is left ($left)" eval '[ "$left" = 0 ]'
}

run "$ZLUA" --nprocs 3 "$script" kill
ended "a killed rank" 137 20
others_say "a killed rank" "names rank 1 as lost" "$lost1"

# A Lua error on rank 1: its message and traceback, then the others stop (its
# communicators are not closed, which would wait for them in vain) with its message.
run "$ZLUA" --nprocs 3 "$script" raise
ended "a raising rank" 1 20
check "a raising rank: rank 1 says why, with a traceback" eval \
  'grep -q "^\[[0-9]*,1\]<stderr>:zlua: .*rank 1 gives up" "$tmp/err" && grep -q "^\[[0-9]*,1\]<stderr>:stack traceback:" "$tmp/err"'
others_say "a raising rank" "says rank 1 failed, with its message" "rank 1 failed: .*rank 1 gives up"

run "$ZLUA" --nprocs 3 "$script" exit
ended "an exiting rank" 3 20
others_say "an exiting rank" "names rank 1 as lost" "$lost1"

# A stopped rank is alive, so only the timeout finds it; the waiting rank's
# error names it, and that error reaches rank 2 as rank 0's failure.
run "$ZLUA" --nprocs 3 "$script" stop
ended "a stopped rank" 1 25
check "a stopped rank: rank 0 times out naming the collective and rank 1" \
    grep -Eq "^\[[0-9]+,0\]<stderr>:zlua: .*allreduce timed out after 10 s on rank 0; rank 1 \(process [0-9]+\) is stopped" "$tmp/err"
check "a stopped rank: rank 2 passes rank 0's timeout on" \
    said 2 "rank 0 failed: .*allreduce timed out after 10 s on rank 0; rank 1 \(process [0-9]+\) is stopped"

# Under plain mpirun each rank runs in a shell that keeps its exit status. The
# shell ignores mpirun's SIGTERM (which still reaches zlua, in the same
# process group) so that it lives to write the status down.
cat >rank.sh <<SH
trap ':' TERM
"$ZLUA" "$script" kill & child=\$!
while kill -0 \$child 2>/dev/null; do wait \$child; done
wait \$child
rc=\$?
echo \$rc >"$tmp/status.\$OMPI_COMM_WORLD_RANK"
exit \$rc
SH
run mpirun --allow-run-as-root --oversubscribe -np 3 bash rank.sh
check "mpirun -np 3: the job stops non-zero within 20 s" eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$took" -lt 20 ]'
check "mpirun -np 3: no process of the job is left ($left)" eval '[ "$left" = 0 ]'
for r in 0 2; do
    status=$(cat "$tmp/status.$r" 2>/dev/null)
    check "mpirun -np 3: rank $r exits non-zero (status '$status')" eval '[ -n "$status" ] && [ "$status" != 0 ]'
    check "mpirun -np 3: rank $r names rank 1 as lost" said $r "$lost1"
done

echo "test_lost_rank: $passed passed, $failed failed"
[ "$failed" = 0 ]
