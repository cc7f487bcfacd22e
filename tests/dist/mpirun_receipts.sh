#!/usr/bin/env bash
# mpirun for the tests that start C programs as ranks, under the rule of
# zlua's launcher (lua/src/launch.c): each rank that finalises MPI through the
# engine leaves a receipt of its exit status (engine/comm/mpi_receipt.c), and
# a failure mpirun reports for a job whose ranks all did so and exited 0 (Open
# MPI 4's "exiting improperly" with PID 0: its runtime lost the rank's
# finalisation) is not the test's.
# Usage: mpirun_receipts.sh <mpirun> <its arguments, -np N or -n N among them>
np=
prev=
for a in "$@"; do
  case $prev in -np | -n | --np | --n) np=$a ;; esac
  prev=$a
done
ZLUA_RANK_RECEIPTS=$(mktemp -d) || exit 1
export ZLUA_RANK_RECEIPTS
"$@"
rc=$?
if [ "$rc" != 0 ] && [ -n "$np" ]; then
  clean=1
  for ((r = 0; r < np; r++)); do
    [ "$(cat "$ZLUA_RANK_RECEIPTS/rank.$r" 2>/dev/null)" = 0 ] || clean=0
  done
  if [ "$clean" = 1 ]; then
    echo "mpirun_receipts: every rank finalised MPI and exited 0; mpirun's failure above is Open MPI's runtime race"
    rc=0
  fi
fi
rm -rf "$ZLUA_RANK_RECEIPTS"
exit "$rc"
