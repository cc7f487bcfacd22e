#!/usr/bin/env bash
# Offload (CTest: dist.test_offload): the optimizer state and stage-3
# parameters on NVMe (libaio under a temporary folder) or cpu give the same
# losses bit for bit as no offload, at 1 and 2 ranks, stages 1-3, f32, bf16,
# fp16, clipping and gradient accumulation, pipelined or not, with the
# gradients swapped by sub-group too (small sub_group_size), built by zero.Init (chunks kept on
# NVMe from construction) or not, and stage 3 gathering in buckets (a GPT
# of 8 layers, 2 ranks); a checkpoint of an offloaded run
# resumes exactly, offloaded or not; DeepSpeed's default buffer_count with
# reads ahead, and the fewest buffers at 2 ranks, never run out; and faults (a swap file deleted or
# emptied between steps, nvme_path read-only or full, a rank killed mid-run)
# end with an error naming the file while the last checkpoint still resumes.
# With a second argument "full_disk" (CTest: dist.test_offload_full_disk) it
# checks only nvme_path read-only and full, on a small tmpfs it mounts, and
# exits 77 (CTest's skip) where mounting is refused.
set -u
ZLUA=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
MNT=$TMP/mnt
cleanup() {
  umount "$MNT" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
RUN=$HERE/zero_run.lua
fails=0

. "$HERE/lib.sh"

fails_naming() {   # fails_naming WHAT NEEDLE ARGS...: the run exits non-zero and its output names NEEDLE
  local what=$1 needle=$2
  shift 2
  if timeout 120 "$@" > "$TMP/log" 2>&1; then
    echo "FAIL $what: the run succeeded"; fails=$((fails + 1))
  elif ! grep -qF -- "$needle" "$TMP/log"; then
    echo "FAIL $what: no mention of $needle:"; tail -n 8 "$TMP/log"; fails=$((fails + 1))
  else
    echo "ok   $what: $(grep -F -- "$needle" "$TMP/log" | head -n 1 | cut -c1-150)"
  fi
}

ONE=(--stage 2 --mode bf16 --offload optimizer --nvme "$TMP/nvme" --steps 8)

# nvme_path on a read-only or a full filesystem (a small tmpfs; needs mount).
if [ "${2:-}" = full_disk ]; then
  mkdir -p "$MNT"
  if ! mount -t tmpfs -o size=64k,ro tmpfs "$MNT" 2>/dev/null; then
    echo "skipped: read-only and full nvme_path (mounting a small tmpfs needs root with CAP_SYS_ADMIN)"
    exit 77
  fi
  fails_naming "read-only nvme_path" "$MNT/zlua_swap" "$ZLUA" "$RUN" "${ONE[@]/$TMP\/nvme/$MNT}"
  umount "$MNT"
  mount -t tmpfs -o size=64k tmpfs "$MNT"
  fails_naming "full nvme_path" "No space left on device" "$ZLUA" "$RUN" --stage 2 --mode bf16 --offload optimizer \
    --nvme "$MNT" --steps 3 --width 128
  umount "$MNT"
  if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
  echo "read-only and full nvme_path checks passed"
  exit 0
fi

cases=(
  "1 --stage 1 --mode bf16 --offload optimizer"
  "1 --stage 3 --mode bf16 --offload both"
  "2 --stage 1 --mode bf16 --offload optimizer"
  "2 --stage 2 --mode bf16 --offload optimizer --pipeline"
  "2 --stage 2 --mode gas2 --offload optimizer"
  "2 --stage 3 --mode bf16 --offload both"
  "2 --stage 3 --mode bf16 --offload both --pipeline"
  "2 --stage 3 --mode f32 --offload both"
  "2 --stage 3 --mode bf16 --offload param"
  "2 --stage 3 --mode bf16 --offload both --device cpu"
  "2 --stage 3 --mode bf16 --offload both --init"
  "1 --stage 3 --mode f32 --offload both --init"
  "2 --stage 3 --mode clip --offload both --zero sub_group_size=100"
  "2 --stage 2 --mode gas2 --offload optimizer --zero sub_group_size=100 --pipeline"
  "1 --stage 2 --mode fp16 --offload optimizer --zero sub_group_size=100"
)
for c in "${cases[@]}"; do
  read -r np rest <<< "$c"
  launch=("$ZLUA")
  [ "$np" -gt 1 ] && launch=("$ZLUA" --nprocs "$np")
  plain=$(sed 's/ --offload [a-z]*//; s/ --pipeline//; s/ --device cpu//; s/ --init//' <<< "$rest")
  run "$TMP/ref" "${launch[@]}" "$RUN" $plain --steps 12
  run "$TMP/off" "${launch[@]}" "$RUN" $rest --steps 12 --nvme "$TMP/nvme"
  same "$TMP/ref" "$TMP/off" "$np rank(s) $rest == no offload, bit for bit"
done

# The digits MLP (stage 2) and the 4-layer GPT (stage 3) examples through a
# DeepSpeed config: offload to cpu and to NVMe give the losses of no offload,
# at 1 and 2 ranks.
config() {   # config STAGE DEVICE: a bf16 config with the optimizer (and at stage 3 the parameters) on DEVICE
  local param=''
  [ "$1" = 3 ] && param=", \"offload_param\": {\"device\": \"$2\", \"nvme_path\": \"/unused\", \"max_in_cpu\": 0}"
  cat <<JSON
{ "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "gradient_clipping": "auto", "bf16": {"enabled": true},
  "zero_optimization": {"stage": $1, "sub_group_size": 5000,
    "offload_optimizer": {"device": "$2", "nvme_path": "/unused", "pipeline_read": true, "pipeline_write": true}$param}}
JSON
}
DIGITS=("$HERE/../../examples/digits/train.lua" --steps 30 --epochs 1)
GPT4=("$HERE/../../examples/gpt/train.lua" --n_layer 4 --n_head 2 --n_embd 32 --block_size 16 --batch 8 --steps 20
      --sample_every 0 --sample_len 0)
for ex in digits gpt; do
  stage=2
  prog=("${DIGITS[@]}")
  [ $ex = gpt ] && { stage=3; prog=("${GPT4[@]}"); }
  for dev in none cpu nvme; do config $stage $dev > "$TMP/$ex-$dev.json"; done
  for np in 1 2; do
    launch=("$ZLUA")
    [ "$np" -gt 1 ] && launch=("$ZLUA" --nprocs "$np")
    run "$TMP/ex-none" "${launch[@]}" "${prog[@]}" --config "$TMP/$ex-none.json"
    # Every rank prints its own lines, interleaved as the ranks happen to run.
    sort -o "$TMP/ex-none" "$TMP/ex-none"
    for dev in cpu nvme; do
      run "$TMP/ex-$dev" "${launch[@]}" "${prog[@]}" --config "$TMP/$ex-$dev.json" --nvme_path "$TMP/nvme"
      sort -o "$TMP/ex-$dev" "$TMP/ex-$dev"
      same "$TMP/ex-none" "$TMP/ex-$dev" "$ex example, $np rank(s), stage $stage, offload $dev == no offload"
    done
  done
done

# DeepSpeed's default offload_param.buffer_count (5) with every parameter on
# NVMe, reads ahead and no reuse: a read needed now takes the buffer of the
# read ahead needed last instead of running out; the losses are no offload's.
dflt() {   # dflt DEVICE: the config, the parameters (and nothing else) on DEVICE
  cat <<JSON
{ "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
    "offload_param": {"device": "$1", "nvme_path": "$TMP/nvme", "max_in_cpu": 0}}}
JSON
}
dflt none > "$TMP/dflt-none.json"
dflt nvme > "$TMP/dflt-nvme.json"
GPT2=("$HERE/../../examples/gpt/train.lua" --n_layer 2 --n_embd 256 --n_head 4 --batch 1 --steps 4 --sample_every 0
      --sample_len 0)
run "$TMP/dflt-none" "$ZLUA" "${GPT2[@]}" --config "$TMP/dflt-none.json"
run "$TMP/dflt-nvme" "$ZLUA" "${GPT2[@]}" --config "$TMP/dflt-nvme.json"
same "$TMP/dflt-none" "$TMP/dflt-nvme" "offload_param on NVMe with DeepSpeed's 5 buffers and reads ahead == no offload"
# The fewest buffers: two for the parameters, one per optimizer tensor, many
# sub-groups (so the gradients are swapped too), at 2 ranks (bucketed gathers).
few() {   # few DEVICE
  cat <<JSON
{ "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0, "sub_group_size": 20000,
    "offload_optimizer": {"device": "$1", "nvme_path": "$TMP/nvme", "buffer_count": 1},
    "offload_param": {"device": "$1", "nvme_path": "$TMP/nvme", "max_in_cpu": 0, "buffer_count": 2}}}
JSON
}
few none > "$TMP/few-none.json"
few nvme > "$TMP/few-nvme.json"
GPT2R=("$HERE/../../examples/gpt/train.lua" --n_layer 2 --n_embd 256 --n_head 4 --batch 2 --steps 4 --sample_every 0
       --sample_len 0)
run "$TMP/few-none" "$ZLUA" --nprocs 2 "${GPT2R[@]}" --config "$TMP/few-none.json"
run "$TMP/few-nvme" "$ZLUA" --nprocs 2 "${GPT2R[@]}" --config "$TMP/few-nvme.json"
sort -o "$TMP/few-none" "$TMP/few-none"
sort -o "$TMP/few-nvme" "$TMP/few-nvme"
same "$TMP/few-none" "$TMP/few-nvme" "2 ranks, offload_param.buffer_count 2 and offload_optimizer.buffer_count 1 == no offload"

# Stage 3's gather buckets with the parameters on NVMe (the chunks read ahead
# gathered together when the first is needed; with max_in_cpu some chunks stay
# in memory, gathered as soon as prefetched), 2 ranks: no offload's losses.
GG=("$HERE/gpt_gather_run.lua" --steps 4)
run "$TMP/gg-none" "$ZLUA" --nprocs 2 "${GG[@]}" --zero stage3_param_persistence_threshold=100
for zc in stage3_param_persistence_threshold=100 stage3_param_persistence_threshold=100,stage3_max_reuse_distance=0; do
  for cpu in 0 30000; do
    run "$TMP/gg-nvme" "$ZLUA" --nprocs 2 "${GG[@]}" --zero "$zc" --nvme "$TMP/nvme" --max_in_cpu $cpu
    same "$TMP/gg-none" "$TMP/gg-nvme" "GPT 8 layers, 2 ranks, $zc, parameters past $cpu elements on NVMe == no offload"
  done
done

# Checkpoints of an offloaded run: resumed offloaded (2 ranks) or not (1 rank, stage 0).
OFF=(--stage 3 --mode bf16 --offload both --nvme "$TMP/nvme")
run "$TMP/whole" "$ZLUA" --nprocs 2 "$RUN" "${OFF[@]}" --steps 12
run "$TMP/part" "$ZLUA" --nprocs 2 "$RUN" "${OFF[@]}" --steps 6 --save "$TMP/ckpt" --save_at 6
run "$TMP/resumed" "$ZLUA" --nprocs 2 "$RUN" "${OFF[@]}" --steps 12 --load "$TMP/ckpt"
grep -E '^step ([7-9]|1[0-2]) ' "$TMP/whole" > "$TMP/tail"
same "$TMP/tail" "$TMP/resumed" "a checkpoint of a 2-rank NVMe run resumes offloaded, bit for bit"
run "$TMP/ref3" "$ZLUA" --nprocs 2 "$RUN" --stage 3 --mode bf16 --steps 12
run "$TMP/plain" "$ZLUA" --nprocs 2 "$RUN" --stage 2 --mode bf16 --steps 12 --load "$TMP/ckpt"
grep -E '^step ([7-9]|1[0-2]) ' "$TMP/ref3" > "$TMP/tail3"
same "$TMP/tail3" "$TMP/plain" "the same checkpoint resumes without offload at stage 2, bit for bit"

# Faults. A swap file removed or emptied between steps: the next step names it.
fails_naming "swap file deleted" "zlua_swap/optimizer/rank0/optimizer.swp: cannot open" \
  "$ZLUA" "$RUN" "${ONE[@]}" --save "$TMP/ck1" --save_at 3 --sabotage 3:delete
fails_naming "swap file truncated" "zlua_swap/optimizer/rank0/optimizer.swp: read 0 of" \
  "$ZLUA" "$RUN" "${ONE[@]}" --sabotage 3:truncate
run "$TMP/whole1" "$ZLUA" "$RUN" "${ONE[@]}"
run "$TMP/after" "$ZLUA" "$RUN" "${ONE[@]}" --load "$TMP/ck1"
grep -E '^step [4-8] ' "$TMP/whole1" > "$TMP/tail1"
same "$TMP/tail1" "$TMP/after" "after the failed step the last checkpoint resumes exactly"

# A rank killed mid-run: the checkpoint before it resumes exactly.
# (in a subshell whose stderr is dropped: bash reports the killed job there)
(
  timeout 120 "$ZLUA" --nprocs 2 "$RUN" "${OFF[@]}" --steps 400 --save "$TMP/ck2" --save_at 4 > "$TMP/killed" 2>&1 &
  for _ in $(seq 1 200); do grep -q '^step 6 ' "$TMP/killed" 2>/dev/null && break; sleep 0.1; done
  pkill -KILL -f "zero_run.lua.*--steps 400"
  wait
) 2>/dev/null
run "$TMP/after2" "$ZLUA" --nprocs 2 "$RUN" "${OFF[@]}" --steps 12 --load "$TMP/ck2"
grep -E '^step ([5-9]|1[0-2]) ' "$TMP/whole" > "$TMP/tail2"
same "$TMP/tail2" "$TMP/after2" "a run killed mid-step resumes from its last checkpoint exactly"

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all offload checks passed"
