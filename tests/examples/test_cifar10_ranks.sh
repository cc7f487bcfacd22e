#!/usr/bin/env bash
# The seeds' CIFAR-10 launch line with only the program name changed:
# `zlua --num_gpus 2 examples/cifar10/train.lua --deepspeed
# --deepspeed_config ds_config.json`, run where the data and the seeds' config
# lie. The engine's loader must give the two ranks different batches (their
# losses differ at every step: with the same batches two data-parallel ranks
# compute the same loss bit for bit), each rank half an epoch's images a
# pass, and the training must still learn.
# Usage: test_cifar10_ranks.sh <zlua> <source dir>
set -u
src=$(cd "${2:?usage: test_cifar10_ranks.sh <zlua> <source dir>}" && pwd)
. "$src/tests/examples/lib.sh"
. "$src/tests/cli/lib.sh"
mpi_test_setup "${1:-}" test_cifar10_ranks.sh
zlua=$ZLUA
mkdir cifar-10-batches-bin
"$zlua" "$src/scripts/gen_cifar10.lua" cifar-10-batches-bin >/dev/null || exit 1
cp "$src/examples/cifar10/ds_config.json" .
if ! timeout 300 "$zlua" --num_gpus 2 "$src/examples/cifar10/train.lua" --deepspeed --deepspeed_config ds_config.json \
     >out 2>err; then
  echo "FAIL: the launch line exited with an error:"
  cat err
  exit 1
fi
grep -v ' step ' out
# 400 images, 2 epochs, 2 ranks x 2 images a micro batch: 200 steps on each rank.
for r in 0 1; do
  n=$(grep -c "^rank $r step " out)
  if [ "$n" != 200 ]; then
    echo "FAIL: rank $r logged $n steps, expected 200 (100 a pass of 400 images at 2 ranks x 2)"
    exit 1
  fi
done
same=$(awk '$1 == "rank" && $3 == "step" { loss[$2, $4] = $6; steps[$4] = 1 }
  END { for (s in steps) if (loss[0, s] == loss[1, s]) n++; print n + 0 }' out)
if [ "$same" != 0 ]; then
  echo "FAIL: the two ranks logged the same loss at $same steps: they trained on the same batches"
  exit 1
fi
echo "the two ranks' losses differ at every step"
grep '^rank 0 step ' out | cut -d' ' -f3- >rank0
loss_falls rank0 10 0.2 || exit 1
value_at_least out accuracy 0.5 || exit 1
echo "ok"
