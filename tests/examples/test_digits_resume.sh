#!/usr/bin/env bash
# examples/digits through zlua.initialize: stopped at step 70 (in the
# middle of the second epoch) with a checkpoint, then resumed in a new process,
# it prints the same steps and the same final accuracy as a run that went
# through, bit for bit.
# Usage: test_digits_resume.sh <zlua> <source dir>
set -u
zlua=${1:?usage: test_digits_resume.sh <zlua> <source dir>}
src=${2:?usage: test_digits_resume.sh <zlua> <source dir>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
digits="$src/examples/digits/train.lua"
for spec in "through:--epochs 3" "first:--epochs 3 --steps 70 --out $tmp/ck" "resumed:--epochs 3 --out $tmp/ck --resume"; do
  name=${spec%%:*}
  # shellcheck disable=SC2086
  if ! "$zlua" "$digits" ${spec#*:} >"$tmp/$name" 2>"$tmp/$name.err"; then
    echo "FAIL: digits ${spec#*:} exited with an error:"
    cat "$tmp/$name.err"
    exit 1
  fi
done
if ! diff <(grep -E '^(step|accuracy)' "$tmp/through" | sed -n '71,$p') <(grep -E '^(step|accuracy)' "$tmp/resumed"); then
  echo "FAIL: the resumed run differs from the one that went through"
  exit 1
fi
echo "ok: steps 71-$(grep -c '^step' "$tmp/through") and the accuracy are bit-identical after a resume"
