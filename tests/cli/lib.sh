# Shared by the command-line tests (sourced): counting checks that print what
# the command showed when one fails. The caller sets $out, $err and $rc.
passed=0
failed=0

check() {   # check <name> <command...>
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: $name"
        echo "  status: $rc"
        echo "  stdout: $(printf '%s' "$out" | head -20)"
        echo "  stderr: $(printf '%s' "$err" | head -20)"
    fi
}

has() { [[ $1 == *"$2"* ]]; }

# mpi_test_setup <zlua> <script name>: $ZLUA made absolute (the tests run in a
# temporary folder, entered here and removed at exit); without mpirun the test
# is skipped (exit 77, CTest's skip).
mpi_test_setup() {
    ZLUA=${1:?usage: $2 <path to zlua>}
    case $ZLUA in
        /*) ;;
        */*) ZLUA=$PWD/$ZLUA ;;
    esac
    if ! command -v mpirun >/dev/null; then
        echo "skipped: no mpirun on PATH (Debian package openmpi-bin)"
        exit 77
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cd "$tmp" || exit 1
}
