#!/usr/bin/env bash
# The GPU machine's one check (docs/gpu.md): builds zlua for sm_90 against the
# unpacked Debian packages, runs every gpu.* test, compute-sanitizer's memcheck
# and racecheck over the GPU test programs, the GPT benchmark and the per-op
# micro benchmark against PyTorch on the same GPU, within a time budget.
# Usage: scripts/gpu_check.sh [LOGDIR]   (default $OUT, else build-gpu/check)
# Writes env.log, build.log, tests.log, sanitizer.log, gpt.log, ops.log and
# summary.txt there and prints the summary last; exits non-zero when a phase
# failed. Without a GPU every GPU phase says why it is skipped.
# ZLUA_CHECK_BUDGET (seconds, default 540) bounds the whole run. For a
# shorter lease: ZLUA_CHECK_PHASES (default "tests sanitizer gpt ops slow";
# slow: the gpu.* tests labelled slow, last, with the time left),
# ZLUA_CHECK_EXCLUDE (a CTest regex of gpu.* tests left out),
# ZLUA_CHECK_SANITIZE (tool:program pairs) and ZLUA_CHECK_GPT_MODES (the GPT
# benchmark's zlua modes, default engine).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
logs=${1:-${OUT:-$root/build-gpu/check}}
build=${ZLUA_BUILD_DIR:-$root/build-gpu}
budget=${ZLUA_CHECK_BUDGET:-540}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
start=$(date +%s)
summary=()
failed=0

phases=" ${ZLUA_CHECK_PHASES:-tests sanitizer gpt ops slow} "
wanted() { [[ $phases == *" $1 "* ]]; }
# Each phase's least useful time, in the order they run.
least="build:120 tests:60 sanitizer:40 gpt:90 ops:40 slow:60"

say() { summary+=("$*"); echo "== $*"; }
elapsed() { echo $(( $(date +%s) - start )); }
# Seconds phase $1 may take: what it wants ($2), within what is left of the
# budget less the least time of each wanted phase after it; never less than
# its own least time while the budget lasts.
allow() {
  local phase=$1 want=$2 left reserve=0 own=1 seen=0 p
  for p in $least; do
    [ $seen = 1 ] && wanted "${p%%:*}" && reserve=$((reserve + ${p#*:}))
    [ "${p%%:*}" = "$phase" ] && seen=1 && own=${p#*:}
  done
  left=$(( budget - $(elapsed) ))
  local t=$(( left - reserve ))
  [ "$t" -lt "$own" ] && t=$(( own < left ? own : left ))
  [ "$t" -gt "$want" ] && t=$want
  [ "$t" -lt 1 ] && t=1
  echo "$t"
}
# phase NAME STATUS DETAIL: STATUS is ok, FAIL or skip.
phase() {
  [ "$2" = FAIL ] && failed=1
  say "$(printf '%-10s %-4s %s (%ds)' "$1" "$2" "$3" "$(elapsed)")"
}
# runs NAME: whether phase NAME runs here; when not, it is said to be skipped, and why.
runs() {
  if ! wanted "$1"; then phase "$1" skip "not in ZLUA_CHECK_PHASES"; return 1; fi
  if [ -n "$why_no_gpu" ]; then phase "$1" skip "$why_no_gpu"; return 1; fi
}
# verdict NAME EXIT LOG: ok, or FAIL with the exit status.
verdict() {
  if [ "$2" -eq 0 ]; then phase "$1" ok "$3"; else phase "$1" FAIL "exit $2; $3"; fi
}
# keep PATTERN FILE: FILE's lines that match, indented, said and kept for the summary.
keep() {
  while read -r l; do say "  $l"; done < <(grep -E "$1" "$2")
}

# --- The machine -----------------------------------------------------------
{
  echo "date: $(date -u)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | head -2
} > "$logs/env.log" 2>&1
gpus=0
why_no_gpu=""
if ! command -v nvidia-smi >/dev/null; then
  why_no_gpu="no GPU here: nvidia-smi not found"
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ "$gpus" -gt 0 ] || why_no_gpu="no GPU here: nvidia-smi lists none"
fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
phase env ok "${gpu_name:-no GPU}, $gpus GPU(s), $(nproc) cores; env.log"

# NCCL and cuBLASLt from PyTorch's wheels where the toolkit lacks them: NCCL's
# wheel holds include/nccl.h and lib/libnccl.so.2 (engine/CMakeLists.txt reads
# NCCL_HOME); cuBLASLt's is a bare libcublasLt.so.<major>.
extra=()
cuda_home=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
if [ -z "${NCCL_HOME:-}" ] && ! ls "$cuda_home"/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* >/dev/null 2>&1; then
  for s in $sites; do
    h=$(find "$s/nvidia" -name nccl.h 2>/dev/null | head -1)
    if [ -n "$h" ]; then NCCL_HOME=$(dirname "$(dirname "$h")"); export NCCL_HOME; break; fi
  done
fi
[ -n "${NCCL_HOME:-}" ] && echo "NCCL_HOME=$NCCL_HOME (PyTorch's wheel)" >> "$logs/env.log"
if ! ls "$cuda_home"/lib64/libcublasLt.so* >/dev/null 2>&1; then
  for s in $sites; do
    l=$(find "$s/nvidia" -name 'libcublasLt.so*' 2>/dev/null | head -1)
    if [ -n "$l" ]; then extra+=("-DCUDA_cublasLt_LIBRARY=$l"); echo "cuBLASLt: $l (PyTorch's wheel)" >> "$logs/env.log"; break; fi
  done
fi
if [ -n "${NCCL_HOME:-}" ]; then export LD_LIBRARY_PATH=$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi

# --- Build -----------------------------------------------------------------
command -v ninja >/dev/null && [ ! -e "$build/CMakeCache.txt" ] && extra+=(-G Ninja)
extra+=(-DCMAKE_CUDA_ARCHITECTURES=90 -DZLUA_CUDA=ON)
# What the gpu.* tests and the benchmarks run, not the CPU suite's programs.
targets="zlua_exe test_cuda_tensor test_cuda_optim test_nccl nccl_2rank"
t=$(allow build 300)
if ls "$root"/.gpu-deps/*.deb >/dev/null 2>&1; then
  ZLUA_BUILD_DIR=$build ZLUA_BUILD_TARGETS=$targets timeout "$t" "$root/scripts/gpu_build.sh" "${extra[@]}" \
    > "$logs/build.log" 2>&1
else
  tg=()
  for x in $targets; do tg+=(--target "$x"); done
  { cmake -S "$root" -B "$build" "${extra[@]}" && timeout "$t" cmake --build "$build" -j"$(nproc)" "${tg[@]}"; } \
    > "$logs/build.log" 2>&1
fi
st=$?
zlua=$build/bin/zlua
if [ $st -ne 0 ] || [ ! -x "$zlua" ]; then
  phase build FAIL "exit $st; the end of build.log:"
  tail -n 25 "$logs/build.log" | sed 's/^/  /'
  summary+=("$(tail -n 5 "$logs/build.log")")
  printf '%s\n' "${summary[@]}" > "$logs/summary.txt"
  exit 1
fi
nccl=no
grep -q 'ZLUA_HAVE_NCCL' "$build"/engine/CMakeFiles/zlua_floor_comm.dir/flags.make 2>/dev/null && nccl=yes
grep -q 'ZLUA_HAVE_NCCL' "$build/build.ninja" 2>/dev/null && nccl=yes
phase build ok "sm_90, nccl: $nccl; build.log"

# --- The gpu.* tests -------------------------------------------------------
exclude=()
[ -n "${ZLUA_CHECK_EXCLUDE:-}" ] && exclude=(-E "$ZLUA_CHECK_EXCLUDE")
if wanted tests && [ -n "$why_no_gpu" ]; then
  ctest --test-dir "$build" -R '^gpu\.' > "$logs/tests.log" 2>&1
  phase tests skip "$why_no_gpu (CTest: $(grep -c '\*\*\*Skipped' "$logs/tests.log") skipped)"
elif runs tests; then
  t=$(allow tests 240)
  timeout "$t" ctest --test-dir "$build" -R '^gpu\.' -LE slow "${exclude[@]}" --output-on-failure --timeout 180 \
    > "$logs/tests.log" 2>&1
  st=$?
  res=$(grep -E 'tests passed|tests failed' "$logs/tests.log" | tail -1)
  if [ $st -eq 0 ]; then phase tests ok "$res; tests.log"; else
    phase tests FAIL "${res:-exit $st}; tests.log"
    keep '^\s*[0-9]+ - gpu\.' "$logs/tests.log"
    # Again with each op waiting for its kernel, so a fault names its op.
    t=$(allow tests 90)
    [ "$t" -gt 20 ] && ZLUA_CUDA_SYNC=1 timeout "$t" ctest --test-dir "$build" --rerun-failed -LE slow \
      --output-on-failure --timeout 80 >> "$logs/tests.log" 2>&1
  fi
fi

# --- compute-sanitizer -----------------------------------------------------
if runs sanitizer; then
  if ! command -v compute-sanitizer >/dev/null; then
    phase sanitizer skip "compute-sanitizer not found"
  else
    : > "$logs/sanitizer.log"
    bad=()
    # tool:program pairs, the programs as built (tests/gpu/test_*.c). NCCL's
    # start-up asks for attributes of kernels its build has no sm_90 image of
    # and handles the error: under test_nccl the sanitizer reports memory
    # errors only, not the API errors NCCL makes on purpose.
    for pair in ${ZLUA_CHECK_SANITIZE:-memcheck:test_cuda_tensor memcheck:test_cuda_optim racecheck:test_cuda_tensor \
                racecheck:test_cuda_optim memcheck:test_nccl}; do
      tool=${pair%%:*} prog=$(find "$build" -name "${pair#*:}" -type f -perm -u+x | head -1)
      [ -n "$prog" ] || continue
      api=()
      [ "${pair#*:}" = test_nccl ] && api=(--report-api-errors no)
      t=$(allow sanitizer 60)
      if [ "$t" -lt 15 ]; then bad+=("$pair: no time left"); continue; fi
      echo "### $tool $prog" >> "$logs/sanitizer.log"
      timeout "$t" compute-sanitizer --tool "$tool" "${api[@]}" --error-exitcode 9 "$prog" >> "$logs/sanitizer.log" 2>&1
      st=$?
      [ $st -eq 0 ] || bad+=("$pair: exit $st")
    done
    if [ ${#bad[@]} -eq 0 ]; then phase sanitizer ok "memcheck and racecheck clean; sanitizer.log"
    else phase sanitizer FAIL "$(IFS=,; echo "${bad[*]}"); sanitizer.log"; fi
  fi
fi

# --- The GPT benchmark against PyTorch -------------------------------------
if runs gpt; then
  t=$(allow gpt 200)
  (cd "$root" && timeout "$t" "$zlua" scripts/bench/gpt.lua --device cuda --configs gpu --precision f32,bf16 \
    --modes "${ZLUA_CHECK_GPT_MODES:-engine}" --threads 1 --repeat 1 --steps 6 --warmup 3) > "$logs/gpt.log" 2>&1
  verdict gpt $? gpt.log
  keep '^(gpu|config) ' "$logs/gpt.log"
fi

# --- Per-op micro benchmark ------------------------------------------------
if runs ops; then
  t=$(allow ops 100)
  (cd "$root" && timeout "$t" "$zlua" scripts/bench/gpu_ops.lua) > "$logs/ops.log" 2>&1
  st=$?
  # attention composed of GEMMs beside the flash kernels, in the same run
  t=$(allow ops 40)
  (cd "$root" && ZLUA_CUDA_FLASH=0 timeout "$t" "$zlua" scripts/bench/gpu_ops.lua --ops attention --torch=false) 2>&1 |
    sed -n 's/^attention /attention_composed /p' >> "$logs/ops.log"
  verdict ops $st ops.log
  keep '^(op |[a-z_]+ +(f32|bf16) )' "$logs/ops.log"
fi

# --- The slow gpu.* tests, with the time left ------------------------------
if runs slow; then
  t=$(allow slow 300)
  echo "### the slow tests, $t s left" >> "$logs/tests.log"
  timeout "$t" ctest --test-dir "$build" -R '^gpu\.' -L slow "${exclude[@]}" --output-on-failure --timeout 300 \
    >> "$logs/tests.log" 2>&1
  st=$?
  res=$(grep -E 'tests passed|tests failed' "$logs/tests.log" | tail -1)
  if [ $st -eq 0 ]; then phase slow ok "$res; tests.log"; elif [ $st -eq 124 ]; then
    phase slow FAIL "out of time ($t s); tests.log"; else phase slow FAIL "${res:-exit $st}; tests.log"; fi
fi

summary+=("gpu_check: $( [ $failed = 0 ] && echo passed || echo FAILED ) in $(elapsed) s; logs in $logs")
printf '%s\n' "${summary[@]}" > "$logs/summary.txt"
echo
echo "---- summary ----"
cat "$logs/summary.txt"
exit $failed
