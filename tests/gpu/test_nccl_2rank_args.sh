#!/usr/bin/env bash
# test_nccl_2rank.sh's own arguments, without GPUs: a stand-in program that
# reports a device count. A build without MPI passes no mpirun: with one GPU
# the test must skip (exit 77), with two it must say the id over MPI is
# skipped and run the id-file pairs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fake() {   # fake N: a stand-in nccl_2rank that sees N devices
  cat > "$TMP/fake$1" <<FAKE
#!/usr/bin/env bash
case "\$1" in
  device_count) echo "devices: $1" ;;
  rank_never_joins) [ "\${RANK:-}" = 0 ] && echo "rank 0: allreduce timed out after 2 s on rank 0" ;;
esac
exit 0
FAKE
  chmod +x "$TMP/fake$1"
}
fake 1
fake 2

out=$(bash "$here/test_nccl_2rank.sh" "$TMP/fake1" 2>&1)
st=$?
if [ $st -eq 77 ] && [[ $out == skipped:* ]]; then echo "ok   one GPU, no mpirun: skipped"
else echo "FAIL one GPU, no mpirun: exit $st: $out"; fails=$((fails + 1)); fi

out=$(bash "$here/test_nccl_2rank.sh" "$TMP/fake2" 2>&1)
st=$?
if [ $st -eq 0 ] && grep -q "^skip collectives, id over MPI" <<<"$out" && grep -q "^ok   collectives, id over a file" <<<"$out"
then echo "ok   two GPUs, no mpirun: the id-file pairs alone"
else echo "FAIL two GPUs, no mpirun: exit $st: $out"; fails=$((fails + 1)); fi

[ $fails = 0 ]
