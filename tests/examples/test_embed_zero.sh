#!/usr/bin/env bash
# examples/embed_zero (C, its config read through zlua/ds_config.h) and its
# Lua twin print identical `step N loss X` lines, and each resumes a
# checkpoint the other saved at the half, bit for bit (at 1 and 2 ranks).
# Part "one": 1 rank, the loss
# falls, an lr schedule (WarmupDecayLR; OneCycle, which also sets the betas)
# gives the same steps, both refuse a typo in a strict section naming the
# nearest key, warn of one at the top level the same way, and refuse a key
# zlua does not implement with the same message; in a build without libaio
# both refuse NVMe offload naming the config key. Part "ranks" (a build with
# MPI): 2 ranks for stages 0 and 2, and with libaio stage 3 with the optimizer
# state and the parameters on NVMe (a temp folder).
# Usage: test_embed_zero.sh <embed_zero> <zlua> <source dir> one|ranks <libaio: ON|OFF> [<mpiexec>]
set -uo pipefail
embed=$1 zlua=$2 src=$3 part=$4 aio=$5 mpiexec=${6:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
. "$src/tests/examples/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
steps=12

# config <stage> [offload] [scheduler section]: a ds.json in $tmp
config() {
  local off="" sched=""
  if [ "${2:-}" = nvme ]; then
    off=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\", \"buffer_count\": 4, \"pipeline_read\": true},
           \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\", \"max_in_cpu\": 0, \"buffer_count\": 2},
           \"sub_group_size\": 200, \"stage3_param_persistence_threshold\": 10"
  fi
  [ -n "${3:-}" ] && sched="\"scheduler\": $3,"
  cat > "$tmp/ds.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 16,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0, $sched
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "zero_optimization": {"stage": $1, "reduce_bucket_size": 500, "allgather_bucket_size": 1000 $off}
}
JSON
}

# same <label> <ranks>: the C program and the Lua twin on $tmp/ds.json
same() {
  local label=$1 np=$2
  if [ "$np" = 1 ]; then
    "$embed" --deepspeed_config "$tmp/ds.json" --steps $steps > "$tmp/c.out" 2>&1
    "$zlua" "$src/examples/embed_zero/train.lua" --deepspeed_config "$tmp/ds.json" --steps $steps > "$tmp/lua.out" 2>&1
  else
    "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$embed" --deepspeed_config "$tmp/ds.json" \
      --steps $steps > "$tmp/c.out" 2>&1
    "$zlua" --nprocs "$np" "$src/examples/embed_zero/train.lua" --deepspeed_config "$tmp/ds.json" \
      --steps $steps > "$tmp/lua.out" 2>&1
  fi
  if [ "$(grep -c '^step ' "$tmp/c.out")" != $steps ] || ! cmp -s "$tmp/c.out" "$tmp/lua.out"; then
    echo "FAIL: $label: C and Lua differ"
    diff "$tmp/c.out" "$tmp/lua.out" | head -20
    fail=1
  else
    echo "ok: $label: C and Lua print the same $steps lines ($(tail -1 "$tmp/c.out"))"
  fi
  grep '^step ' "$tmp/c.out" > "$tmp/$label.out"
}

# launch <ranks> <program: c|lua> <args...>: one run, its output on stdout.
launch() {
  local np=$1 prog=$2
  shift 2
  local cmd=("$embed")
  [ "$prog" = lua ] && cmd=("$zlua" "$src/examples/embed_zero/train.lua")
  if [ "$np" = 1 ]; then
    "${cmd[@]}" --deepspeed_config "$tmp/ds.json" "$@" 2>&1
  elif [ "$prog" = lua ]; then
    "$zlua" --nprocs "$np" "$src/examples/embed_zero/train.lua" --deepspeed_config "$tmp/ds.json" "$@" 2>&1
  else
    "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$embed" --deepspeed_config "$tmp/ds.json" "$@" 2>&1
  fi
}

# resume <label> <ranks>: after same(): each program saves at the half and
# each resumes either's checkpoint; the second half's lines are the whole
# run's, bit for bit.
resume() {
  local label=$1 np=$2 half=$((steps / 2))
  grep -E "^step ($(seq -s '|' $((half + 1)) $steps)) " "$tmp/$label.out" > "$tmp/tail.want"
  for saver in c lua; do
    rm -rf "$tmp/ck_$saver"
    launch "$np" $saver --steps $half --save "$tmp/ck_$saver" > /dev/null
    for loader in c lua; do
      launch "$np" $loader --steps $steps --load "$tmp/ck_$saver" | grep '^step ' > "$tmp/tail.got"
      if cmp -s "$tmp/tail.want" "$tmp/tail.got"; then
        echo "ok: $label: saved by $saver at step $half, resumed by $loader, bit for bit"
      else
        echo "FAIL: $label: saved by $saver at step $half, resumed by $loader:"; diff "$tmp/tail.want" "$tmp/tail.got" | head
        fail=1
      fi
    done
  done
}

if [ "$part" = ranks ]; then
  for stage in 0 2; do
    config $stage
    same "2 ranks, stage $stage" 2
  done
  resume "2 ranks, stage 2" 2
  [ "$aio" = OFF ] && exit $fail   # the refusal is part "one"'s
  config 3 nvme
  same "2 ranks, stage 3, optimizer and parameters on nvme" 2
  if grep -qE '^rank 0 swapped [1-9][0-9]* bytes in, [1-9][0-9]* out' "$tmp/c.out" \
    && [ -f "$tmp/nvme/zlua_swap/optimizer/rank1/.zlua_swap" ] && [ -f "$tmp/nvme/zlua_swap/params/rank1/.zlua_swap" ]; then
    echo "ok: $(grep '^rank 0 swapped' "$tmp/c.out") through $tmp/nvme/zlua_swap"
  else
    echo "FAIL: nothing went through the swap files under $tmp/nvme"; fail=1
  fi
  for stage in 0 2; do
    cmp -s "$tmp/2 ranks, stage $stage.out" "$tmp/2 ranks, stage 3, optimizer and parameters on nvme.out" \
      || { echo "FAIL: stage $stage and stage 3 with nvme differ"; fail=1; }
  done
  exit $fail
fi

config 2
same "1 rank, stage 2" 1
loss_falls "$tmp/c.out" 3 0.95 || fail=1
resume "1 rank, stage 2" 1
if [ "$aio" = OFF ]; then
  config 3 nvme
  refusal='zero_optimization.offload_optimizer.device = "nvme": zlua was built without libaio'
  "$embed" --deepspeed_config "$tmp/ds.json" --steps 1 > "$tmp/c.out" 2>&1
  "$zlua" "$src/examples/embed_zero/train.lua" --deepspeed_config "$tmp/ds.json" --steps 1 > "$tmp/lua.out" 2>&1
  if grep -qF "$refusal" "$tmp/c.out" && grep -qF "$refusal" "$tmp/lua.out"; then
    echo "ok: NVMe offload refused: $(grep -F "$refusal" "$tmp/c.out" | head -1)"
  else
    echo "FAIL: NVMe offload in a build without libaio was not refused by name:"
    cat "$tmp/c.out" "$tmp/lua.out"; fail=1
  fi
fi

config 2 "" '{"type": "WarmupDecayLR", "params": {"total_num_steps": 12, "warmup_num_steps": 4, "warmup_max_lr": 0.005}}'
same "1 rank, stage 2, WarmupDecayLR" 1
config 2 "" '{"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.005, "cycle_first_step_size": 4}}'
same "1 rank, stage 2, OneCycle" 1
cmp -s "$tmp/1 rank, stage 2.out" "$tmp/1 rank, stage 2, WarmupDecayLR.out" \
  && { echo "FAIL: the schedule changed nothing"; fail=1; }

# refused <label> <file> <message>: both programs stop on the config, each
# with the message (zlua.config's, word for word).
refused() {
  "$embed" --deepspeed_config "$2" --steps 1 > "$tmp/c.out" 2>&1
  local c=$?
  "$zlua" "$src/examples/embed_zero/train.lua" --deepspeed_config "$2" --steps 1 > "$tmp/lua.out" 2>&1
  local l=$?
  if [ $c = 0 ] || [ $l = 0 ] || ! grep -qF "$3" "$tmp/c.out" || ! grep -qF "$3" "$tmp/lua.out"; then
    echo "FAIL: $1 was not refused by both with: $3"; cat "$tmp/c.out" "$tmp/lua.out"; fail=1
  else
    echo "ok: $1: $(grep -F "$3" "$tmp/c.out")"
  fi
}
base='"train_batch_size": 16, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}'
printf '{%s,\n "zero_optimization": {"stage": 2, "stgae": 2}}\n' "$base" > "$tmp/typo.json"
refused "a typo in zero_optimization" "$tmp/typo.json" \
  "typo.json:2: unknown key zero_optimization.stgae (did you mean zero_optimization.stage?)"
printf '{%s,\n "communication_data_type": "fp16"}\n' "$base" > "$tmp/unimplemented.json"
refused "a DeepSpeed key zlua does not implement" "$tmp/unimplemented.json" \
  'unimplemented.json:2: communication_data_type = "fp16": gradient collectives in fp16 or bf16 (zlua sums gradients in f32) is not implemented in zlua yet'

# A typo at the top level is a warning naming the nearest key, from both, as
# DeepSpeed ignores such keys; the steps still agree.
printf '{%s,\n "zero_optimisation": {"stage": 2}}\n' "$base" > "$tmp/ds.json"
steps=2
same "a top-level typo" 1
warning="zlua.config: warning: $tmp/ds.json:2: unknown key zero_optimisation ignored (did you mean zero_optimization?)"
if grep -qxF "$warning" "$tmp/c.out"; then
  echo "ok: $warning"
else
  echo "FAIL: no warning for the top-level typo:"; cat "$tmp/c.out"; fail=1
fi
exit $fail
