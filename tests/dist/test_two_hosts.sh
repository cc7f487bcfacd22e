#!/usr/bin/env bash
# Two hosts for real: two network namespaces joined by a veth pair, each with a
# hostname of its own, run a 2-rank ZeRO stage 3 job (two_hosts.lua) through
# `zlua --hostfile`, mpirun reaching the second "host" by an agent that enters
# its namespace where ssh would log in. The ranks must sit on two nodes, talk
# over TCP across the veth, and print the losses of `zlua --nprocs 2` bit for bit.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and ip (Debian package iproute2);
# skipped (exit 77) with the reason otherwise.
# Usage: test_two_hosts.sh <path to zlua>.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../cli/lib.sh"
mpi_test_setup "${1:-}" test_two_hosts.sh
script=$here/two_hosts.lua
steps=12

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null || skip "no ip on PATH (Debian package iproute2)"
command -v unshare >/dev/null || skip "no unshare on PATH (Debian package util-linux)"

# Namespace names are global: this run's pid and a random number keep two runs
# apart. The veth pair is made inside the namespaces, so its names and the
# addresses are private to them and need no such care.
tag=zlua-hosts-$$-$RANDOM
ns=("$tag-a" "$tag-b")
addr=(10.77.0.1 10.77.0.2)
names=("${tag}-host-a" "${tag}-host-b")
made=()
job=
# Stops a job under way (timeout passes the signal on to the launcher, which
# stops its ranks), ends every process still in our namespaces (an orted or a
# rank a failed run left), then the namespaces, which takes the veth pair
# with them.
cleanup() {
    local n pids
    [ -n "$job" ] && kill "$job" 2>/dev/null && wait "$job"
    for n in "${made[@]}"; do
        pids=$(ip netns pids "$n" 2>/dev/null)
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null
        ip netns delete "$n" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

for k in 0 1; do
    why=$(ip netns add "${ns[k]}" 2>&1) || skip "cannot make a network namespace: $why"
    made+=("${ns[k]}")
done
why=$(ip -n "${ns[0]}" link add veth0 type veth peer name veth0 netns "${ns[1]}" 2>&1) ||
    skip "cannot make a veth pair: $why"
for k in 0 1; do
    why=$({ ip -n "${ns[k]}" link set lo up && ip -n "${ns[k]}" addr add "${addr[k]}/24" dev veth0 &&
            ip -n "${ns[k]}" link set veth0 up; } 2>&1) || skip "cannot set up ${ns[k]}: $why"
done

# The launch agent, called as ssh would be: `agent <host> <command...>`, the
# command's words joined and run by a shell on that host, in its namespace
# under its hostname. mpirun calls it for the second host; the test for the
# first, where the launcher runs.
cat >agent <<SH
#!/usr/bin/env bash
case \$1 in
    ${addr[0]}) ns=${ns[0]} name=${names[0]} ;;
    ${addr[1]}) ns=${ns[1]} name=${names[1]} ;;
    *) echo "agent: no host \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts bash -c 'echo "\$0" >/proc/sys/kernel/hostname && exec bash -c "\$1"' "\$name" "\$*"
SH
chmod +x agent
why=$(./agent "${addr[0]}" true 2>&1) || skip "cannot enter a namespace under a hostname of its own: $why"
printf '%s slots=1\n%s slots=1\n' "${addr[@]}" >hostfile

# run <name> <command...>: stdout, stderr and status into $out, $err, $rc. In
# the background, so that a signal to the test cleans up at once.
run() {
    local name=$1
    shift
    timeout -k 5 50 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null &
    job=$!
    wait $job
    rc=$?
    job=
    out=$(cat "$tmp/$name.out")
    err=$(cat "$tmp/$name.err")
}
losses() { grep '^step ' "$tmp/$1.out"; }
# Bytes the second host's end of the veth has received and sent, "rx tx".
traffic() { ip netns exec "${ns[1]}" cat /sys/class/net/veth0/statistics/{rx,tx}_bytes | paste -sd' '; }
# Whether the namespaces are empty within 2 s (an orted may still be exiting).
emptied() {
    for _ in $(seq 20); do
        [ -z "$(ip netns pids "${ns[0]}")$(ip netns pids "${ns[1]}")" ] && return 0
        sleep 0.1
    done
    return 1
}

run one "$ZLUA" --nprocs 2 "$script" $steps
check "one host: zlua --nprocs 2 runs $steps steps" eval '[ "$rc" = 0 ] && [ "$(losses one | wc -l)" = $steps ]'

# Only TCP between the ranks, and only over the veth, for the job and for
# Open MPI's own traffic; Open MPI's session folders, named by hostname, in ours.
export TMPDIR=$tmp OMPI_MCA_plm_rsh_agent=$tmp/agent OMPI_MCA_btl=tcp,self \
    OMPI_MCA_btl_tcp_if_include=${addr[0]%.*}.0/24 OMPI_MCA_oob_tcp_if_include=${addr[0]%.*}.0/24
read -r rx0 tx0 < <(traffic)
run two "$tmp/agent" "${addr[0]}" "$(printf '%q ' "$ZLUA" --hostfile "$tmp/hostfile" "$script" $steps)"
check "two hosts: zlua --hostfile runs $steps steps" eval '[ "$rc" = 0 ] && [ "$(losses two | wc -l)" = $steps ]'
check "two hosts: rank 0 on the first, alone there" has "$out" "where rank 0 host ${names[0]} local 0 of 1"
check "two hosts: rank 1 on the second, alone there" has "$out" "where rank 1 host ${names[1]} local 0 of 1"
check "two hosts: the losses equal one host's bit for bit" eval '[ "$(losses one)" = "$(losses two)" ]'
# Each step's forward must bring each host the other's half of the f32
# parameters; starting the job moves a few kilobytes.
read -r rx1 tx1 < <(traffic)
params=$(sed -n 's/^params //p' "$tmp/two.out")
least=$((steps * ${params:-0} / 2 * 4))
rx=$((rx1 - rx0)) tx=$((tx1 - tx0))
echo "veth: the second host received $rx and sent $tx bytes (at least $least each way expected)"
check "two hosts: the job's data went over the veth" eval '[ "$least" -gt 0 ] && [ "$rx" -ge "$least" ] && [ "$tx" -ge "$least" ]'
check "two hosts: no process is left in the namespaces" emptied

echo "test_two_hosts: $passed passed, $failed failed"
[ "$failed" = 0 ]
