#!/usr/bin/env bash
# The memory limit zlua finds (zl.memory_limit) inside a memory cgroup made for
# the test under the process's own (cgroup v1's memory.limit_in_bytes or v2's
# memory.max), and the block cache sized from it (an eighth); skipped (exit 77)
# where a memory cgroup cannot be made (not root, no memory controller, v2
# without it delegated). Usage: test_memory_limit.sh <path to zlua>.
set -u
zlua=${1:?usage: test_memory_limit.sh <path to zlua>}
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "making a memory cgroup needs root (uid $(id -u))"

# mount_of <fstype> <option>: where a cgroup hierarchy is mounted.
mount_of() { awk -v t="$1" -v o="$2" '{ split($0, h, " - "); split(h[2], f, " ");
    if (f[1] == t && (o == "" || f[3] ~ o)) { split(h[1], m, " "); print m[5]; exit } }' /proc/self/mountinfo; }
v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
if [ -n "$v1" ]; then
    root=$(mount_of cgroup memory) file=memory.limit_in_bytes group=$v1
else
    root=$(mount_of cgroup2 '') file=memory.max group=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup)
fi
[ -n "$root" ] && [ -d "$root$group" ] || skip "no memory cgroup hierarchy mounted for this process"
[ "$group" = / ] && group=
cg=$root$group/zlua-limit-$$
trap 'rmdir "$cg" 2>/dev/null' EXIT
mkdir "$cg" 2>/dev/null || skip "cannot make a memory cgroup under $root$group"
limit=$((1500 << 20))
echo $limit > "$cg/$file" 2>/dev/null || skip "cannot set $file in $cg (the memory controller is not delegated)"

out=$(sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" -e "local b, s = zl.memory_limit() print(b) print(s) print(zl.memory_cache().limit)"' \
    sh "$cg" "$zlua" 2>&1) || skip "cannot run a process in $cg: $out"
want=$(printf '%s\n%s\n%s' $limit "$file of the memory cgroup $group/zlua-limit-$$" $((limit / 8)))
if [ "$out" = "$want" ]; then
    echo "ok   the limit of $cg and a block cache of an eighth of it"
    exit 0
fi
echo "FAIL: in $cg zlua printed:"
echo "$out"
echo "expected:"
echo "$want"
exit 1
