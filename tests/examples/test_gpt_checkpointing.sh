#!/usr/bin/env bash
# examples/gpt with 12 layers and --gradient_checkpointing: the same losses
# bit for bit as without, the peak activation
# memory it prints at least 3x lower, and --cpu_checkpointing moving the
# saved block inputs out of the activations into 'other' (lower activations,
# higher other). And the estimate it prints beside the measure
# (zlua.nn.gpt_activations, what scripts/estimate_memory.lua prints) within
# 20% of the measured peak at 12 and at 2 layers, with checkpointing and
# without.
# Usage: test_gpt_checkpointing.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_gpt_checkpointing.sh <zlua> <source dir>}
src=${2:?usage: test_gpt_checkpointing.sh <zlua> <source dir>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {   # run NAME OPTIONS...: stdout to NAME.out, the memory line to NAME.mem
  local name=$1
  shift
  if ! "$zlua" "$src/examples/gpt/train.lua" --steps 2 --sample_len 0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
    echo "FAIL: the example with $* exited with an error:"
    cat "$tmp/$name.err"
    exit 1
  fi
  grep 'peak activation memory' "$tmp/$name.err" | tee "$tmp/$name.mem"
}
run plain --n_layer 12
run ckpt --n_layer 12 --gradient_checkpointing
run cpu --n_layer 12 --gradient_checkpointing --cpu_checkpointing
run small --n_layer 2
run small_ckpt --n_layer 2 --gradient_checkpointing
fails=0
for name in plain ckpt small small_ckpt; do
  line=$(cat "$tmp/$name.mem")
  measured=$(sed -n 's/.*peak activation memory \([0-9.]*\) MiB.*/\1/p' <<<"$line")
  estimated=$(sed -n 's/.*estimated \([0-9.]*\) MiB.*/\1/p' <<<"$line")
  if awk -v m="$measured" -v e="$estimated" 'BEGIN { d = (e - m) / m; exit !(m > 0 && d <= 0.2 && d >= -0.2) }'; then
    echo "ok   $name: estimated $estimated MiB, measured $measured MiB (within 20%)"
  else
    echo "FAIL $name: estimated '$estimated' MiB, measured '$measured' MiB (not within 20%)"; fails=$((fails + 1))
  fi
done
for name in ckpt cpu; do
  if cmp -s "$tmp/plain.out" "$tmp/$name.out"; then echo "ok   $name: the same output bit for bit"
  else echo "FAIL $name: the output differs"; diff "$tmp/plain.out" "$tmp/$name.out" | head; fails=$((fails + 1)); fi
done
mib() { sed -n "s/.*peak activation memory \([0-9.]*\) MiB (other: \([0-9.]*\) MiB).*/\\$2/p" "$tmp/$1.mem"; }
verdict=$(awk -v a="$(mib plain 1)" -v b="$(mib ckpt 1)" -v c="$(mib cpu 1)" -v oc="$(mib ckpt 2)" -v oo="$(mib cpu 2)" 'BEGIN {
  r = a / b; printf "%s checkpointing: activations %.2f -> %.2f MiB, %.2fx lower (at least 3x)\n", (r >= 3 ? "ok  " : "FAIL"), a, b, r
  printf "%s cpu_checkpointing: activations %.2f -> %.2f MiB, other %.2f -> %.2f MiB\n", (c < b && oo > oc ? "ok  " : "FAIL"), b, c, oc, oo }')
echo "$verdict"
case $verdict in *FAIL*) fails=$((fails + 1)) ;; esac
exit $((fails > 0))
