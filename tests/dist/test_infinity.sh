#!/usr/bin/env bash
# ZeRO-Infinity under a memory limit (CTest: dist.test_infinity): a GPT whose
# training state (16 bytes a parameter) is 8 times the memory a cgroup lets
# the process use trains 3 steps at stage 3 with the parameters and the
# optimizer state on NVMe, from its first instruction inside that cgroup,
# with the losses of the same model trained in memory bit for bit and the
# cgroup never reaching its limit (no OOM kill). Skipped (exit 77) where a
# memory cgroup cannot be made, and for a zlua built with the sanitizers.
# Usage: test_infinity.sh <path to zlua> [sanitized].
set -u
zlua=${1:?usage: test_infinity.sh <path to zlua> [sanitized]}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cli/cgroup.sh"
[ "${2:-}" = sanitized ] && skip "AddressSanitizer's shadow memory and quarantine do not fit in the 96 MiB the test allows"
limit=$((${ZLUA_TEST_LIMIT_MIB:-96} << 20))
memory_cgroup $limit
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; rmdir "$cg" 2>/dev/null' EXIT
export OMP_NUM_THREADS=1
RUN=("$HERE/infinity_run.lua" --n_layer 16 --n_embd 512 --steps 3)
fails=0

if ! timeout 300 "$zlua" "${RUN[@]}" > "$TMP/memory" 2>&1; then
    echo "FAIL: the run in memory failed:"; tail -n 20 "$TMP/memory"; exit 1
fi
in_cgroup timeout 300 "$zlua" "${RUN[@]}" --nvme "$TMP/nvme" > "$TMP/nvme.log" 2>&1
rc=$?
if [ $rc != 0 ]; then
    echo "FAIL: the run on NVMe inside $cg ($((limit >> 20)) MiB) failed (status $rc; 137: killed by the limit):"
    tail -n 20 "$TMP/nvme.log"; exit 1
fi
grep '^zlua: ' "$TMP/nvme.log" | sed 's/^/note /'
read -r state limit_seen <<< "$(sed -n 's/^state \([0-9]*\) bytes, limit \([0-9]*\) bytes$/\1 \2/p' "$TMP/nvme.log")"
if [ "${limit_seen:-}" != "$limit" ]; then
    echo "FAIL: the run found a limit of ${limit_seen:-nothing}, not the cgroup's $limit"; fails=$((fails + 1))
elif [ "$state" -lt $((8 * limit)) ]; then
    echo "FAIL: the training state, $state bytes, is less than 8 times the limit"; fails=$((fails + 1))
else
    echo "ok   training state $((state >> 20)) MiB = $((state * 10 / limit / 10)).$((state * 10 / limit % 10))x the $((limit >> 20)) MiB limit"
fi
grep '^step ' "$TMP/memory" > "$TMP/a"
grep '^step ' "$TMP/nvme.log" > "$TMP/b"
if [ "$(wc -l < "$TMP/a")" = 3 ] && cmp -s "$TMP/a" "$TMP/b"; then
    echo "ok   3 steps on NVMe inside the limit == in memory, bit for bit"
else
    echo "FAIL: the losses differ"; diff "$TMP/a" "$TMP/b" | head; fails=$((fails + 1))
fi
if [ -n "$cg_peak_file" ]; then
    peak=$(cat "$cg/$cg_peak_file")
    echo "ok   the cgroup's peak usage: $((peak >> 20)) MiB of $((limit >> 20)) MiB"
fi
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ZeRO-Infinity under a memory limit: passed"
