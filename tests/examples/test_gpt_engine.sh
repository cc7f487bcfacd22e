#!/usr/bin/env bash
# examples/gpt through zlua.initialize: bf16 and fp16 follow the f32
# loss curve within 2% over steps 101-200 (mean over seeds 1-6); a run stopped after a checkpoint and
# resumed in a new process prints the same steps, bit for bit, as one that ran
# through; a seed's DeepSpeed config with "auto" values (bf16, ZeRO-2 on one rank)
# trains, its "auto" filled from the options.
# Usage: test_gpt_engine.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_gpt_engine.sh <zlua> <source dir>}
src=${2:?usage: test_gpt_engine.sh <zlua> <source dir>}
. "$src/tests/examples/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpt="$src/examples/gpt/train.lua"
small="--n_layer 1 --n_head 2 --n_embd 64 --block_size 32 --batch 16 --sample_every 0 --sample_len 0"
fail=0

run() {  # run <output> <args...>
  local out=$1
  shift
  if ! "$zlua" "$gpt" "$@" >"$out" 2>"$out.err"; then
    echo "FAIL: gpt $* exited with an error:"
    cat "$out.err"
    exit 1
  fi
}

# Mean of the losses of steps 101-200.
tail_mean() { awk '$1 == "step" && $3 == "loss" && $2 > 100 { s += $4; n++ } END { printf "%.6f", s / n }' "$1"; }

# Six seeds and a hundred steps each: the mean of one seed's last 20 steps
# moves by several percent with any change of rounding anywhere (a different
# exp or erf put seed 4's f32 run 4% apart and bf16 above f32 by 1% or by
# 2.8% over seeds 1-3), which is noise of the trajectory, not of the
# precision; over 6 x 100 steps the gap of the same builds was 1.5% and -0.3%.
seeds=(1 2 3 4 5 6)
seeds_mean() {  # seeds_mean <precision>: mean of tail_mean over the seeds' runs
  for s in "${seeds[@]}"; do tail_mean "$tmp/$1.$s"; echo; done | awk '{ t += $1 } END { printf "%.6f", t / NR }'
}
for p in f32 bf16 fp16; do
  for s in "${seeds[@]}"; do run "$tmp/$p.$s" $small --steps 200 --precision $p --seed $s; done
done
ref=$(seeds_mean f32)
for p in bf16 fp16; do
  got=$(seeds_mean $p)
  if awk -v a="$got" -v b="$ref" 'BEGIN { d = (a - b) / b; exit !(d <= 0.02 && d >= -0.02) }'; then
    echo "ok: $p mean loss of steps 101-200 over seeds 1-6 $got, f32 $ref (within 2%)"
  else
    echo "FAIL: $p mean loss of steps 101-200 over seeds 1-6 $got, f32 $ref: more than 2% apart"
    fail=1
  fi
done

for p in f32 bf16 fp16; do
  run "$tmp/through" $small --steps 40 --precision $p
  run "$tmp/first" $small --steps 40 --precision $p --out "$tmp/ck_$p" --save_every 20
  # Keep only step 20's checkpoint, as if the first run had died after it.
  rm -rf "$tmp/ck_$p/global_step40"
  printf global_step20 >"$tmp/ck_$p/latest"
  run "$tmp/resumed" $small --steps 40 --precision $p --out "$tmp/ck_$p" --resume
  if diff <(grep '^step' "$tmp/through" | sed -n '21,40p') <(grep '^step' "$tmp/resumed") >/dev/null; then
    echo "ok: $p steps 21-40 after a resume are bit-identical"
  else
    echo "FAIL: $p steps 21-40 differ after a resume:"
    diff <(grep '^step' "$tmp/through" | sed -n '21,40p') <(grep '^step' "$tmp/resumed") | head
    fail=1
  fi
done

run "$tmp/seed" $small --steps 40 --config "$src/tests/lua/configs/seed_000_zero2_auto_bfloat16.json" --lr 1e-2 --warmup 5
loss_falls "$tmp/seed" 5 0.95 || fail=1
[ $fail = 0 ] && echo "ok" || exit 1
