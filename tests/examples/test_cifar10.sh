#!/usr/bin/env bash
# examples/cifar10 on a small generated set in the real binary format
# (scripts/gen_cifar10.lua: five training files of 80 records, a test file
# of 100): over 3 epochs (300 steps of 4 images) the loss must fall to a
# fifth of its start and the test accuracy must be far above chance (0.1).
# Usage: test_cifar10.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_cifar10.sh <zlua> <source dir>}
src=${2:?usage: test_cifar10.sh <zlua> <source dir>}
. "$src/tests/examples/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$zlua" "$src/scripts/gen_cifar10.lua" "$tmp" || exit 1
if ! "$zlua" "$src/examples/cifar10/train.lua" --data "$tmp" --epochs 3 --log_interval 50 >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: the example exited with an error:"
  cat "$tmp/err"
  exit 1
fi
grep -v '^step ' "$tmp/out"
loss_falls "$tmp/out" 10 0.2 || exit 1
value_at_least "$tmp/out" accuracy 0.5 || exit 1
# A missing batch file is named, with a hint at what --data expects.
rm "$tmp/data_batch_3.bin"
"$zlua" "$src/examples/cifar10/train.lua" --data "$tmp" --steps 1 >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] || ! grep -q "cifar10: .*cannot open '$tmp/data_batch_3.bin'" "$tmp/err"; then
  echo "FAIL: a missing data_batch_3.bin was not reported:"
  cat "$tmp/err"
  exit 1
fi
echo "ok"
