# Sourced by the tests that run zlua under a memory limit: memory_cgroup
# BYTES makes a memory cgroup of BYTES under the process's own (cgroup v1's
# memory controller or v2), sets $cg (its folder), $cg_limit_file and
# $cg_peak_file (v1's memory.max_usage_in_bytes, v2's memory.peak, or empty)
# and removes it at exit; it exits 77 (CTest's skip), saying why, where a
# memory cgroup cannot be made (not root, no memory controller, v2 without it
# delegated). in_cgroup CMD...: CMD run inside it from its first instruction.
skip() { echo "skipped: $*"; exit 77; }

# mount_of <fstype> <option>: where a cgroup hierarchy is mounted.
mount_of() { awk -v t="$1" -v o="$2" '{ split($0, h, " - "); split(h[2], f, " ");
    if (f[1] == t && (o == "" || f[3] ~ o)) { split(h[1], m, " "); print m[5]; exit } }' /proc/self/mountinfo; }

memory_cgroup() {
    [ "$(id -u)" = 0 ] || skip "making a memory cgroup needs root (uid $(id -u))"
    local v1 root group
    v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
    if [ -n "$v1" ]; then
        root=$(mount_of cgroup memory) cg_limit_file=memory.limit_in_bytes cg_peak_file=memory.max_usage_in_bytes
        group=$v1
    else
        root=$(mount_of cgroup2 '') cg_limit_file=memory.max cg_peak_file=memory.peak
        group=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup)
    fi
    [ -n "$root" ] && [ -d "$root$group" ] || skip "no memory cgroup hierarchy mounted for this process"
    [ "$group" = / ] && group=
    cg=$root$group/zlua-limit-$$
    cg_group=$group/zlua-limit-$$
    trap 'rmdir "$cg" 2>/dev/null' EXIT
    mkdir "$cg" 2>/dev/null || skip "cannot make a memory cgroup under $root$group"
    echo "$1" > "$cg/$cg_limit_file" 2>/dev/null ||
        skip "cannot set $cg_limit_file in $cg (the memory controller is not delegated)"
    # No swap to spill into, where the kernel lets us say so.
    [ -e "$cg/memory.memsw.limit_in_bytes" ] && echo "$1" > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null
    [ -e "$cg/memory.swap.max" ] && echo 0 > "$cg/memory.swap.max" 2>/dev/null
    [ -e "$cg/$cg_peak_file" ] || cg_peak_file=
    return 0
}

in_cgroup() { sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$@"; }
