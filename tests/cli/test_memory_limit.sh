#!/usr/bin/env bash
# The memory limit zlua finds (zl.memory_limit) inside a memory cgroup made for
# the test under the process's own (cgroup v1's memory.limit_in_bytes or v2's
# memory.max), and the block cache sized from it (an eighth); skipped (exit 77)
# where a memory cgroup cannot be made (not root, no memory controller, v2
# without it delegated). Usage: test_memory_limit.sh <path to zlua>.
set -u
zlua=${1:?usage: test_memory_limit.sh <path to zlua>}
. "$(dirname "$0")/cgroup.sh"
limit=$((1500 << 20))
memory_cgroup $limit

out=$(in_cgroup "$zlua" -e "local b, s = zl.memory_limit() print(b) print(s) print(zl.memory_cache().limit)" 2>&1) ||
    skip "cannot run a process in $cg: $out"
want=$(printf '%s\n%s\n%s' $limit "$cg_limit_file of the memory cgroup $cg_group" $((limit / 8)))
if [ "$out" = "$want" ]; then
    echo "ok   the limit of $cg and a block cache of an eighth of it"
    exit 0
fi
echo "FAIL: in $cg zlua printed:"
echo "$out"
echo "expected:"
echo "$want"
exit 1
