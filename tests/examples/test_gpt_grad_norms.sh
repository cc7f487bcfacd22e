#!/usr/bin/env bash
# examples/gpt --grad_norms N: each layer's gradient norm every N steps, read
# through zlua.utils.safe_get_full_grad before the step. The lines are the
# same at every ZeRO stage (bit for bit at one rank), with the optimizer
# state on NVMe too; with `mpi`, at two ranks (stages 0 and 3) they match one
# rank's to 1e-5 relative.
# Usage: test_gpt_grad_norms.sh <zlua> <source dir> [mpi|none] [aio|none]
set -u
zlua=${1:?usage: test_gpt_grad_norms.sh <zlua> <source dir> [mpi] [aio]}
src=${2:?usage: test_gpt_grad_norms.sh <zlua> <source dir> [mpi] [aio]}
mpi=${3:-}
aio=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
args=(--steps 4 --n_layer 2 --n_head 2 --n_embd 32 --block_size 16 --batch 8 --sample_len 0 --grad_norms 2)

# run <name> <launcher words...> -- <extra example options...>: the norm lines into $tmp/<name>.
run() {
  local name=$1
  shift
  local launch=()
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  if ! "${launch[@]}" "$src/examples/gpt/train.lua" "${args[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
    echo "FAIL: $name exited with an error:"
    tail -5 "$tmp/$name.err"
    fails=$((fails + 1))
  fi
  grep '^grad norms before step ' "$tmp/$name.out" >"$tmp/$name" || true
}

run stage0 "$zlua" -- --zero_stage 0
cat "$tmp/stage0"
if [ "$(grep -c . "$tmp/stage0")" != 2 ] || ! grep -q '^grad norms before step 4: wte [0-9.e-]*, wpe [0-9.e-]*, blocks.1 [0-9.e-]*, blocks.2 [0-9.e-]*, ln_f [0-9.e-]*$' "$tmp/stage0"; then
  echo "FAIL: expected the norms of wte, wpe, blocks.1, blocks.2 and ln_f before steps 2 and 4"
  fails=$((fails + 1))
fi
for stage in 1 2 3; do
  run "stage$stage" "$zlua" -- --zero_stage "$stage"
  if cmp -s "$tmp/stage0" "$tmp/stage$stage"; then echo "ok: stage $stage gives stage 0's norms"; else
    echo "FAIL: stage $stage's norms differ from stage 0's:"; cat "$tmp/stage$stage"; fails=$((fails + 1)); fi
done
if [ "$aio" = aio ]; then
  printf '{"train_batch_size": 8, "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
    "zero_optimization": {"stage": 3, "sub_group_size": 2000,
    "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}}}\n' "$tmp" >"$tmp/nvme.json"
  run nvme "$zlua" -- --config "$tmp/nvme.json"
  if [ "$(grep -c . "$tmp/nvme")" = 2 ]; then echo "ok: stage 3 with the optimizer state on NVMe prints the norms"; else
    echo "FAIL: no norms with the optimizer state on NVMe"; fails=$((fails + 1)); fi
fi
if [ "$mpi" = mpi ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  for stage in 0 3; do
    run "ranks$stage" "$zlua" --nprocs 2 -- --zero_stage "$stage"
    verdict=$(paste -d' ' "$tmp/stage0" "$tmp/ranks$stage" | awk '
      { n = NF / 2; for (i = 7; i <= n; i += 2) { a = $i + 0; if (a < 0) a = -a; if (a == 0) a = 1e-30;
        d = $i - $(i + n); if (d < 0) d = -d; r = d / a; if (r > mx) mx = r; c++ } }
      END { if (c == 0) print "FAIL no norms"; else printf "%s %.3g\n", mx <= 1e-5 ? "ok" : "FAIL", mx }')
    echo "${verdict%% *}: two ranks at stage $stage against one rank: max relative difference ${verdict#* }"
    case $verdict in ok*) ;; *) fails=$((fails + 1)) ;; esac
  done
fi
[ "$fails" = 0 ]
