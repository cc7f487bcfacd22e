#!/usr/bin/env bash
# The Hugging Face workflow in every example: each trains from the seeds'
# configs whose values are "auto" (zero2, zero3, bf16, optimizer), filled
# from the Hugging Face trainer's options alone; an option given fills its
# key (digits with --learning_rate 0 learns nothing, with 0.01 it learns);
# an option a config overrides, and a misspelt one, are refused by name.
# Usage: test_hf_auto.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_hf_auto.sh <zlua> <source dir>}
src=${2:?usage: test_hf_auto.sh <zlua> <source dir>}
. "$src/tests/examples/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$zlua" "$src/scripts/gen_cifar10.lua" "$tmp/cifar" >/dev/null || exit 1
hf=(--learning_rate 0.001 --adam_beta1 0.9 --adam_beta2 0.999 --adam_epsilon 1e-8 --weight_decay 0.0
    --max_grad_norm 1.0 --warmup_steps 2 --gradient_accumulation_steps 1)
for c in seed_003_zero2_auto seed_003_zero3_auto seed_000_zero2_auto_bfloat16 seed_003_optimizer_auto; do
  config=$src/tests/lua/configs/$c.json
  for ex in digits cifar10 gpt; do
    extra=()
    case $ex in
      cifar10) extra=(--data "$tmp/cifar" --max_steps 2) ;;
      digits) extra=(--max_steps 2 --per_device_train_batch_size 16) ;;
      gpt) extra=(--max_steps 2 --sample_every 0 --sample_len 0 --per_device_train_batch_size 8) ;;
    esac
    if ! "$zlua" "$src/examples/$ex/train.lua" --deepspeed --deepspeed_config "$config" "${hf[@]}" "${extra[@]}" \
         >"$tmp/out" 2>"$tmp/err"; then
      echo "FAIL: $ex with $c.json:"; cat "$tmp/err"; exit 1
    fi
    grep -q '^step 2 ' "$tmp/out" || { echo "FAIL: $ex with $c.json ran no step 2:"; cat "$tmp/out"; exit 1; }
    echo "ok $ex $c"
  done
done
# --learning_rate fills optimizer lr and warmup_max_lr: at 0 nothing is learnt.
digits() {
  "$zlua" "$src/examples/digits/train.lua" --deepspeed_config "$src/tests/lua/configs/seed_003_zero2_auto.json" \
    --max_steps 60 --warmup_steps 1 --learning_rate "$1" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
}
digits 0.01
value_at_least "$tmp/out" accuracy 0.8 || exit 1
digits 0
if value_at_least "$tmp/out" accuracy 0.4 >/dev/null; then
  echo "FAIL: --learning_rate 0 still trained:"; cat "$tmp/out"; exit 1
fi
echo "learning rate 0: nothing learnt"
# An option the config overrides with a value of its own is refused, naming both.
if "$zlua" "$src/examples/sft/train.lua" --deepspeed_config "$src/examples/cifar10/ds_config.json" \
     --learning_rate 0.5 >"$tmp/out" 2>"$tmp/err" ||
   ! grep -q -- '--learning_rate 0.5, but optimizer.params.lr is 0.001' "$tmp/err"; then
  echo "FAIL: a config overriding --learning_rate was not reported:"; cat "$tmp/err"; exit 1
fi
if "$zlua" "$src/examples/gpt/train.lua" --max_grad_nrom 1 >"$tmp/out" 2>"$tmp/err" ||
   ! grep -q 'unknown option --max_grad_nrom' "$tmp/err"; then
  echo "FAIL: a misspelt option was not refused:"; cat "$tmp/err"; exit 1
fi
echo "ok"
