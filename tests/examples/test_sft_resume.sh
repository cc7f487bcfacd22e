#!/usr/bin/env bash
# examples/sft's checkpoints: a run stopped after 3 steps with --out (saving
# every 2) and resumed with --resume prints steps 4-6 and the eval perplexity
# of the run that went through, bit for bit; --resume without --out is
# refused in one line.
# Usage: test_sft_resume.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_sft_resume.sh <zlua> <source dir>}
src=${2:?usage: test_sft_resume.sh <zlua> <source dir>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sft=$src/examples/sft/train.lua
args=(--n_layer 1 --n_embd 32 --n_head 2 --print_loss 1 --max_new_tokens 0 --per_device_train_batch_size 8)
for spec in "through:--max_steps 6" "first:--max_steps 3 --save_every 2 --out $tmp/ck" \
            "resumed:--max_steps 6 --out $tmp/ck --resume"; do
  name=${spec%%:*}
  # shellcheck disable=SC2086
  if ! "$zlua" "$sft" "${args[@]}" ${spec#*:} >"$tmp/$name" 2>"$tmp/$name.err"; then
    echo "FAIL: sft ${spec#*:} exited with an error:"
    cat "$tmp/$name.err"
    exit 1
  fi
done
if ! diff <(grep -E '^(step [4-6] |epoch )' "$tmp/through") <(grep -E '^(step |epoch )' "$tmp/resumed"); then
  echo "FAIL: the resumed run differs from the one that went through"
  exit 1
fi
if [ ! -d "$tmp/ck/global_step2" ] || [ ! -d "$tmp/ck/global_step3" ]; then
  echo "FAIL: expected checkpoints after steps 2 (--save_every) and 3 (the end)"
  exit 1
fi
if "$zlua" "$sft" "${args[@]}" --resume >"$tmp/bad" 2>&1 || ! grep -q '^sft: --resume needs --out DIR' "$tmp/bad"; then
  echo "FAIL: --resume without --out was not refused in one line:"
  cat "$tmp/bad"
  exit 1
fi
echo "ok: steps 4-6 and the eval perplexity are bit-identical after a resume"
