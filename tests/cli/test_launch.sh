#!/usr/bin/env bash
# The launcher (lua/src/launch.c): `zlua --nprocs N` and plain `mpirun zlua`
# give each rank RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE and the script's
# arguments; DeepSpeed's launcher options (--num_gpus, --num_nodes,
# --master_addr/--master_port, hostfile, --include/--exclude (with a hostfile
# or on this host alone), each also as
# --option=value) and their errors.
# Usage: test_launch.sh <path to zlua>. Each run is bounded by `timeout`.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
mpi_test_setup "${1:-}" test_launch.sh

# run [command...]: stdout, stderr and status into $out, $err, $rc.
run() {
    timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    out=$(sort "$tmp/out")
    err=$(cat "$tmp/err")
}


cores=$(getconf _NPROCESSORS_ONLN)
cat >env.lua <<'LUA'
print(string.format('rank=%s local=%s world=%s lsize=%s arg1=%s',
    os.getenv('RANK'), os.getenv('LOCAL_RANK'), os.getenv('WORLD_SIZE'),
    os.getenv('LOCAL_SIZE'), tostring(arg[1])))
LUA
two_ranks() {   # two_ranks <arg1 as printed>
    printf 'rank=0 local=0 world=2 lsize=2 arg1=%s\nrank=1 local=1 world=2 lsize=2 arg1=%s' "$1" "$1"
}

# Stale values in the launcher's environment must not reach the ranks.
run env RANK=7 WORLD_SIZE=9 "$ZLUA" --nprocs 2 env.lua a
check "--nprocs 2 gives each rank its RANK, LOCAL_RANK, WORLD_SIZE and arg" \
    [ "$rc" = 0 -a "$out" = "$(two_ranks a)" ]

run env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "$ZLUA" env.lua
check "plain mpirun -np 2 zlua gives the same variables" \
    [ "$rc" = 0 -a "$out" = "$(two_ranks nil)" ]

run "$ZLUA" --nprocs 3 env.lua
check "--nprocs above the cores oversubscribes" \
    eval '[ "$rc" = 0 ] && has "$out" "rank=2 local=2 world=3 lsize=3"'

run "$ZLUA" --nprocs 2 -e 'if os.getenv("RANK") == "1" then error("rank one fails") end' env.lua
check "a rank that errors makes the launcher exit non-zero" \
    eval '[ "$rc" != 0 ] && has "$err" "rank one fails"'

run "$ZLUA" --nprocs 2 nosuch.lua
check "a script that is not there is said once, before any rank starts" \
    eval '[ "$rc" = 1 ] && [ "$(grep -c "cannot open nosuch.lua: No such file or directory" "$tmp/err")" = 1 ]'

# DeepSpeed's argparse takes "--option=value" too.
run "$ZLUA" --num_gpus=2 --master_port=29600 env.lua a
check "--num_gpus=2 --master_port=29600 (the '=' form) runs two ranks" \
    [ "$rc" = 0 -a "$out" = "$(two_ranks a)" ]
run "$ZLUA" --bind_cores_to_rank=yes env.lua
check "--bind_cores_to_rank=yes is refused: it takes no value" \
    eval '[ "$rc" = 1 ] && has "$err" "'"'"'--bind_cores_to_rank'"'"' takes no value"'

run "$ZLUA" --nprocs 0 env.lua
check "--nprocs 0 is an error" \
    eval '[ "$rc" = 1 ] && has "$err" "--nprocs needs a number of processes from 1 to 65536, got '"'"'0'"'"'"'

printf '# this host\n\nlocalhost slots=2   # two ranks\n' >hosts
run "$ZLUA" --hostfile hosts env.lua a
check "a hostfile with comments and blank lines runs its slots" \
    [ "$rc" = 0 -a "$out" = "$(two_ranks a)" ]

run "$ZLUA" --hostfile hosts --include localhost:1 env.lua
check "--include host:slot keeps that slot only" \
    [ "$rc" = 0 -a "$out" = "rank=0 local=0 world=1 lsize=1 arg1=nil" ]

run "$ZLUA" --hostfile hosts --exclude localhost:0 env.lua
check "--exclude host:slot drops that slot" \
    [ "$rc" = 0 -a "$out" = "rank=0 local=0 world=1 lsize=1 arg1=nil" ]

run "$ZLUA" --hostfile hosts --exclude localhost env.lua
check "--exclude of every host leaves nothing to run" \
    eval '[ "$rc" = 1 ] && has "$err" "no slots are left after --include/--exclude"'

run "$ZLUA" --hostfile hosts --include localhost --exclude localhost:0 env.lua
check "--include and --exclude together are an error" \
    eval '[ "$rc" = 1 ] && has "$err" "--include and --exclude cannot be used together"'

run "$ZLUA" --hostfile hosts --include elsewhere env.lua
check "--include of a host not in the hostfile names it" \
    eval '[ "$rc" = 1 ] && has "$err" "host '"'"'elsewhere'"'"' is not in the hostfile"'

run "$ZLUA" --hostfile hosts --include localhost:2 env.lua
check "--include of a slot the host lacks names it" \
    eval '[ "$rc" = 1 ] && has "$err" "has slots 0 to 1, not '"'"'2'"'"'"'

# Without a hostfile the pool is this host alone, "localhost", a slot per core
# (per GPU where there are GPUs), as DeepSpeed's runner makes it.
run "$ZLUA" --include localhost:0,1 env.lua a
check "--include localhost:0,1 without a hostfile runs two ranks here" \
    [ "$rc" = 0 -a "$out" = "$(two_ranks a)" ]
run "$ZLUA" --include=localhost:1 env.lua
check "--include=localhost:1 without a hostfile runs one rank" \
    [ "$rc" = 0 -a "$out" = "rank=0 local=0 world=1 lsize=1 arg1=nil" ]
if [ "$cores" -ge 2 ]; then
    run "$ZLUA" --exclude localhost:0 --num_gpus 1 env.lua
    check "--exclude localhost:0 --num_gpus 1 without a hostfile runs one rank" \
        [ "$rc" = 0 -a "$out" = "rank=0 local=0 world=1 lsize=1 arg1=nil" ]
fi
run "$ZLUA" --include otherhost:0 env.lua
check "--include of another host without a hostfile says a hostfile is needed" \
    eval '[ "$rc" = 1 ] && has "$err" "host '"'"'otherhost'"'"' needs --hostfile (without one, the only host is localhost)"'
run "$ZLUA" --include "localhost:$cores" env.lua
check "--include of a slot past this host's names the range" \
    eval '[ "$rc" = 1 ] && has "$err" "has slots 0 to $((cores - 1)), not '"'"'$cores'"'"'"'

printf 'localhost slots=2\nlocalhost slots two\n' >badhosts
run "$ZLUA" --hostfile badhosts env.lua
check "a malformed hostfile line is named by file and line" \
    eval '[ "$rc" = 1 ] && has "$err" "badhosts:2: expected '"'"'host slots=N'"'"'"'

run "$ZLUA" --hostfile missing env.lua
check "a missing hostfile is named" \
    eval '[ "$rc" = 1 ] && has "$err" "cannot open hostfile '"'"'missing'"'"'"'

run "$ZLUA" --nprocs 2 --bind_cores_to_rank -e 'print("threads=" .. os.getenv("OMP_NUM_THREADS"))' env.lua
share=$((cores / 2 > 0 ? cores / 2 : 1))
check "--bind_cores_to_rank gives each rank its share of the cores" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "^threads=$share$" "$tmp/out")" = 2 ]'

run env PATH=/nonexistent "$ZLUA" --nprocs 2 env.lua
check "a missing mpirun says which package has it" \
    eval '[ "$rc" = 1 ] && has "$err" "--nprocs needs mpirun (Debian package openmpi-bin)"'

# Open MPI 4's mpirun sometimes says a rank that finalised "exited
# improperly" and fails the job. A stand-in mpirun that runs the real one and
# then fails plays that report: the ranks' receipts (engine/comm/mpi_receipt.c)
# make the launcher exit 0 when every rank finalised and exited 0, and only then.
mkdir fakebin
cat >fakebin/mpirun <<SH
#!/bin/sh
$(command -v mpirun) "\$@"
echo "mpirun has exited due to process rank 1 with PID 0 on node here exiting improperly" >&2
exit 1
SH
chmod +x fakebin/mpirun
mkdir rt
cat >allreduce.lua <<'LUA'
local dist = require 'zlua.dist'
local t = zl.full({ 2 }, dist.rank() + 1)
dist.all_reduce(t)
print('sum=' .. t[1])
if os.getenv('FAIL_RANK') == tostring(dist.rank()) then os.exit(3, true) end
if os.getenv('QUIT_RANK') == tostring(dist.rank()) then os.exit(0) end
LUA
run env PATH="$tmp/fakebin:$PATH" TMPDIR="$tmp/rt" "$ZLUA" --nprocs 2 allreduce.lua
check "mpirun failing a job whose ranks all finalised and exited 0: the launcher exits 0 and says why" \
    eval '[ "$rc" = 0 ] && [ "$out" = "$(printf "sum=3.0\nsum=3.0")" ] && has "$err" "every rank finalised MPI and exited with status 0"'
run env PATH="$tmp/fakebin:$PATH" TMPDIR="$tmp/rt" FAIL_RANK=1 "$ZLUA" --nprocs 2 allreduce.lua
check "... but not when a rank finalised and exited 3" \
    eval '[ "$rc" != 0 ] && ! has "$err" "every rank finalised"'
run env PATH="$tmp/fakebin:$PATH" TMPDIR="$tmp/rt" QUIT_RANK=1 "$ZLUA" --nprocs 2 allreduce.lua
check "... nor when a rank exited 0 without finalising" \
    eval '[ "$rc" != 0 ] && ! has "$err" "every rank finalised"'
check "the receipts' folders are removed" [ -z "$(ls -A rt)" ]

cat >master.lua <<'LUA'
print(string.format('rank=%s world=%s master=%s:%s', os.getenv('RANK'), os.getenv('WORLD_SIZE'),
    os.getenv('MASTER_ADDR'), os.getenv('MASTER_PORT')))
LUA
run env MASTER_ADDR=stale "$ZLUA" --num_gpus 2 master.lua
check "--num_gpus 2 on one host runs two ranks, MASTER_ADDR/PORT as DeepSpeed's defaults" \
    [ "$rc" = 0 -a "$out" = "$(printf 'rank=0 world=2 master=127.0.0.1:29500\nrank=1 world=2 master=127.0.0.1:29500')" ]

run "$ZLUA" --num_gpus 1 --master_addr 10.1.2.3 --master_port 6000 master.lua
check "--master_addr and --master_port reach the ranks" \
    [ "$rc" = 0 -a "$out" = "rank=0 world=1 master=10.1.2.3:6000" ]

run "$ZLUA" --hostfile hosts --num_gpus 1 master.lua
check "--num_gpus with a hostfile keeps that many slots of each host, MASTER_ADDR its first host" \
    [ "$rc" = 0 -a "$out" = "rank=0 world=1 master=localhost:29500" ]

run "$ZLUA" --hostfile hosts --num_nodes 1 env.lua a
check "--num_nodes 1 runs every slot of the first host" \
    [ "$rc" = 0 -a "$out" = "$(two_ranks a)" ]

run "$ZLUA" --hostfile hosts --num_nodes 2 env.lua
check "--num_nodes beyond the hostfile's hosts names the file and the count" \
    eval '[ "$rc" = 1 ] && has "$err" "--num_nodes 2: '"'"'hosts'"'"' has 1 host with slots left"'

run "$ZLUA" --hostfile hosts --num_gpus 3 env.lua
check "--num_gpus beyond a host's slots names the host" \
    eval '[ "$rc" = 1 ] && has "$err" "--num_gpus 3: host '"'"'localhost'"'"' has 2 slots left in '"'"'hosts'"'"'"'

run "$ZLUA" --num_nodes 2 --num_gpus 1 env.lua
check "--num_nodes above 1 without a hostfile is an error" \
    eval '[ "$rc" = 1 ] && has "$err" "--num_nodes 2 needs --hostfile naming the hosts"'

run "$ZLUA" --nprocs 2 --num_gpus 1 env.lua
check "--nprocs and --num_gpus that disagree are an error" \
    eval '[ "$rc" = 1 ] && has "$err" "--nprocs 2 and --num_gpus 1 disagree"'

run "$ZLUA" --num_gpus 1 --master_port 70000 env.lua
check "a --master_port out of range is refused" \
    eval '[ "$rc" = 1 ] && has "$err" "--master_port needs a port from 1 to 65535, got '"'"'70000'"'"'"'

run "$ZLUA" --master_port 6000 env.lua
check "--master_port alone says what the launcher needs" \
    eval '[ "$rc" = 1 ] && has "$err" "the launcher needs --nprocs N (or --num_gpus N) or --hostfile"'

cat >dsargs.lua <<'LUA'
local a = require('zlua.args').parse(arg, { epochs = 1 })
print(string.format('rank=%s deepspeed=%s config=%s', os.getenv('RANK'), tostring(a.deepspeed), a.deepspeed_config))
LUA
run "$ZLUA" --num_gpus 2 dsargs.lua --deepspeed --deepspeed_config ds.json
check "the seeds' line: zlua --num_gpus 2 script --deepspeed --deepspeed_config ds.json" \
    [ "$rc" = 0 -a "$out" = "$(printf 'rank=0 deepspeed=true config=ds.json\nrank=1 deepspeed=true config=ds.json')" ]

# A signal to the launcher alone, or SIGINT to its process group (a
# terminal's Ctrl-C), once both ranks run: every process of the job is gone
# within 5 s, the launcher says it was interrupted and exits 128 + the signal.
cat >spin_$$.lua <<'LUA'
local zl = require 'zlua'
local dist = require 'zlua.dist'
dist.all_reduce(zl.ones(4))
io.stdout:write('running\n')
io.stdout:flush()
for _ = 1, 1e9 do dist.all_reduce(zl.ones(64)) end
LUA
stop() {   # stop <signal> <alone|group>: $rc, $err and $left (processes of the job after 5 s)
    rm -f "$tmp/st" "$tmp/out" "$tmp/err"
    setsid bash -c "\"$ZLUA\" --nprocs 2 spin_$$.lua >\"$tmp/out\" 2>\"$tmp/err\" </dev/null; echo \$? >\"$tmp/st\"" &
    for _ in $(seq 300); do [ "$(grep -c running "$tmp/out" 2>/dev/null)" = 2 ] && break; sleep 0.1; done
    local launcher group
    launcher=$(pgrep -f "^$ZLUA --nprocs 2 spin_$$.lua" | head -1)
    group=$(ps -o pgid= "$launcher" | tr -d ' ')
    if [ "$2" = group ]; then kill "-$1" -- "-$group"; else kill "-$1" "$launcher"; fi
    for _ in $(seq 50); do [ -e "$tmp/st" ] && ! pgrep -f "spin_$$.lua" >/dev/null && break; sleep 0.1; done
    rc=$(cat "$tmp/st" 2>/dev/null)
    err=$(cat "$tmp/err")
    left=$(pgrep -f "spin_$$.lua" | wc -l)
    pkill -KILL -f "spin_$$.lua" 2>/dev/null
}
stop INT alone
check "SIGINT to the launcher alone stops the job: status 130, 'interrupted', nothing left" \
    eval '[ "$rc" = 130 ] && has "$err" "zlua: interrupted (SIGINT)" && [ "$left" = 0 ]'
stop TERM alone
check "SIGTERM to the launcher stops the job: status 143, 'interrupted', nothing left" \
    eval '[ "$rc" = 143 ] && has "$err" "zlua: interrupted (SIGTERM)" && [ "$left" = 0 ]'
stop INT group
check "SIGINT to the launcher's process group (Ctrl-C) stops the job: status 130, nothing left" \
    eval '[ "$rc" = 130 ] && has "$err" "zlua: interrupted (SIGINT)" && [ "$left" = 0 ]'

echo "test_launch: $passed passed, $failed failed"
[ "$failed" = 0 ]
