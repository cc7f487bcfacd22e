#!/usr/bin/env bash
# examples/sft as the seeds run DeepSpeed-Chat's step 1: a short fine-tuning
# from scratch on one rank that saves the model in Hugging Face's layout,
# then LoRA on that model at two ranks, ZeRO stage 3 (built under
# zero.Init), gradient checkpointing and only the LoRA matrices
# trained, with DeepSpeed-Chat's arguments; a run from a ds_config file; and
# the same two steps with a LLaMA, the second from an "auto" config.
# The first run's eval perplexity must fall below a third of its start, the
# LoRA run's (from the first's model) below 95% of its own, the config run's
# below half, and the first two must answer their prompts.
# Usage: test_sft.sh <zlua> <source dir>
set -u
src=$(cd "${2:?usage: test_sft.sh <zlua> <source dir>}" && pwd)
. "$src/tests/cli/lib.sh"
mpi_test_setup "${1:-}" test_sft.sh
sft=$src/examples/sft/train.lua

# perplexity_falls <output> <ratio>: the last "eval perplexity" is below ratio times the first.
perplexity_falls() {
  awk -v ratio="$2" '$(NF-2) == "eval" && $(NF-1) == "perplexity" { p[++n] = $NF }
    END {
      if (n < 2) { print "FAIL: fewer than two eval perplexity lines"; exit 1 }
      printf "eval perplexity %.3f -> %.3f\n", p[1], p[n]
      if (!(p[n] < ratio * p[1])) { printf "FAIL: the eval perplexity did not fall below %s of its start\n", ratio; exit 1 }
    }' "$1"
}

answers() {   # answers <output>: as many "A:" lines as questions asked
  local n
  n=$(grep -c '^A:' "$1")
  if [ "$n" != 3 ]; then
    echo "FAIL: $n answers, expected 3"
    return 1
  fi
}

if ! timeout 300 "$ZLUA" "$sft" --num_train_epochs 1 --output_dir base >one.out 2>one.err; then
  echo "FAIL: one rank, from scratch:"; cat one.err; exit 1
fi
grep -v '^step ' one.out
perplexity_falls one.out 0.333 && answers one.out || exit 1
[ -f base/model.safetensors ] && [ -f base/config.json ] && [ -f base/vocab.json ] ||
  { echo "FAIL: --output_dir base lacks model.safetensors, config.json or vocab.json"; ls base; exit 1; }

if ! timeout 600 "$ZLUA" --num_gpus 2 "$sft" --model_name_or_path base --tokenizer base --zero_stage 3 \
     --lora_dim 8 --lora_module_name blocks. --only_optimize_lora --gradient_checkpointing \
     --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --learning_rate 1e-2 --num_train_epochs 1 \
     >two.out 2>two.err; then
  echo "FAIL: two ranks, LoRA, stage 3:"; cat two.err; exit 1
fi
grep -v '^step ' two.out
perplexity_falls two.out 0.95 && answers two.out || exit 1
grep -q 'LoRA rank 8 on blocks.' two.out || { echo "FAIL: no LoRA in the run's summary"; exit 1; }
# A DeepSpeed config file in place of the options (--deepspeed --deepspeed_config).
cat >ds.json <<'JSON'
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 16,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}}
JSON
if ! timeout 300 "$ZLUA" "$sft" --deepspeed --deepspeed_config ds.json --data_split 1,9,0 --num_train_epochs 1 \
     --max_new_tokens 0 >cfg.out 2>cfg.err; then
  echo "FAIL: --deepspeed_config ds.json:"; cat cfg.err; exit 1
fi
perplexity_falls cfg.out 0.5 || exit 1

# A LLaMA: a small one made anew and saved in Hugging Face's layout, then
# LoRA on q/k/v/o/gate/up/down at two ranks, ZeRO stage 3, from the seeds'
# zero3 config with its "auto" values filled by the Hugging Face trainer's
# options alone.
if ! timeout 300 "$ZLUA" "$sft" --model_type llama --num_train_epochs 1 --max_new_tokens 0 --output_dir base_llama \
     >llama.out 2>llama.err; then
  echo "FAIL: a new llama:"; cat llama.err; exit 1
fi
perplexity_falls llama.out 0.333 || exit 1
grep -q '"model_type": "llama"' base_llama/config.json || { echo "FAIL: base_llama is not a llama"; exit 1; }
if ! timeout 600 "$ZLUA" --num_gpus 2 "$sft" --deepspeed --deepspeed_config "$src/tests/lua/configs/seed_003_zero3_auto.json" \
     --model_name_or_path base_llama --tokenizer base_llama --lora_dim 8 --lora_module_name layers. \
     --only_optimize_lora --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --learning_rate 1e-2 \
     --num_train_epochs 1 --warmup_steps 10 --max_grad_norm 1.0 --weight_decay 0.0 --adam_beta1 0.9 \
     --adam_beta2 0.999 --adam_epsilon 1e-8 --max_new_tokens 0 >llama2.out 2>llama2.err; then
  echo "FAIL: two ranks, llama, LoRA, stage 3, auto config:"; cat llama2.err; exit 1
fi
grep -v '^step ' llama2.out
perplexity_falls llama2.out 0.95 || exit 1
grep -q 'LoRA rank 8 on layers.' llama2.out || { echo "FAIL: no LoRA in the llama run's summary"; exit 1; }
echo "ok"
