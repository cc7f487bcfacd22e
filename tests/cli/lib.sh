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
