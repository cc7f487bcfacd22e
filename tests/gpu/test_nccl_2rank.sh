#!/usr/bin/env bash
# The nccl communicator on two ranks, one GPU each (CTest: gpu.test_nccl_2rank):
# the unique id over MPI (mpirun -np 2) and over $ZLUA_NCCL_ID_FILE (two ranks
# started here with RANK/WORLD_SIZE/LOCAL_RANK, as zlua's launcher sets them),
# then a rank that never joins. Exits 77 with "skipped: ..." below two GPUs.
# MPIEXEC is empty in a build without MPI (the GPU machine's): the id over MPI
# then says it is skipped and the id-file pairs run alone.
set -u
PROG=$1
MPIEXEC=${2:-}
found=$("$PROG" device_count | sed -n 's/^devices: //p')
if [ "${found%%:*}" -lt 2 ] 2>/dev/null || [ -z "$found" ]; then
  echo "skipped: the two-rank nccl test needs 2 visible CUDA devices; found ${found:-none}"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

verdict() {   # verdict OK WHAT LOG...: one line, and the logs when it failed
  local ok=$1 what=$2
  shift 2
  if [ "$ok" = 1 ]; then echo "ok   $what"; else echo "FAIL $what"; tail -n 20 "$@"; fails=$((fails + 1)); fi
}

if [ -n "$MPIEXEC" ]; then
  ok=1
  timeout 120 "$MPIEXEC" --allow-run-as-root -np 2 "$PROG" collectives > "$TMP/mpi.log" 2>&1 || ok=0
  verdict $ok "collectives, id over MPI" "$TMP/mpi.log"
else
  echo "skip collectives, id over MPI: this build has no MPI"
fi

pair() {   # pair TEST: ranks 0 and 1 of TEST sharing an id file; fails unless both pass
  local pids=() st=0
  rm -f "$TMP/id"
  for r in 0 1; do
    env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_RANK \
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r ZLUA_NCCL_ID_FILE="$TMP/id" \
      timeout 120 "$PROG" "$1" > "$TMP/$1.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || st=1; done
  return $st
}

ok=1
pair collectives || ok=0
[ -e "$TMP/id" ] && ok=0   # rank 0 removes it once both have joined
verdict $ok "collectives, id over a file" "$TMP"/collectives.*.log

ok=1
pair rank_never_joins || ok=0
grep -q "rank 0: allreduce timed out after 2 s on rank 0" "$TMP/rank_never_joins.0.log" || ok=0
verdict $ok "a rank that never joins: timeout, then abort" "$TMP"/rank_never_joins.*.log

[ "$fails" = 0 ]
