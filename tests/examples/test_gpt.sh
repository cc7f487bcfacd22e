#!/usr/bin/env bash
# examples/gpt, a short run of a tiny model on the text the example ships:
# the loss falls, a sample is printed at --sample_every and at the end, and
# the held-out loss is reported. (The 2-minute run of the default model is
# measured by hand: see the example's header.)
# Usage: test_gpt.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_gpt.sh <zlua> <source dir>}
src=${2:?usage: test_gpt.sh <zlua> <source dir>}
. "$src/tests/examples/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$zlua" "$src/examples/gpt/train.lua" --steps 60 --n_layer 1 --n_head 2 --n_embd 32 --block_size 16 \
     --batch 16 --lr 1e-2 --warmup 5 --sample_every 30 --sample_len 40 >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: the example exited with an error:"
  cat "$tmp/err"
  exit 1
fi
grep -v '^step ' "$tmp/out"
loss_falls "$tmp/out" 5 0.85 || exit 1
for n in 30 60; do
  if ! grep -q "^--- sample after step $n ---\$" "$tmp/out"; then
    echo "FAIL: no sample after step $n"
    exit 1
  fi
done
if ! grep -q '^val loss [0-9]' "$tmp/out"; then
  echo "FAIL: no 'val loss <loss>' line"
  exit 1
fi
echo "ok"
