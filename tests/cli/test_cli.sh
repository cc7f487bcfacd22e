#!/usr/bin/env bash
# The zlua executable's command line: scripts and `arg`, -e, -l, -v, -i, -,
# --, errors with tracebacks and exit statuses, usage on bad options.
# Usage: test_cli.sh <path to zlua>. Each run is bounded by `timeout`.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ZLUA=${1:?usage: test_cli.sh <path to zlua>}
case $ZLUA in   # the tests run in a temporary directory
    /*) ;;
    */*) ZLUA=$PWD/$ZLUA ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
. "$here/lib.sh"

# run [zlua args...]: stdout, stderr and status into $out, $err, $rc; stdin
# is /dev/null unless the caller redirects it.
run() {
    timeout 20 "$ZLUA" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}


cat >args.lua <<'EOF'
print(arg[0], arg[1], arg[2], #arg, select('#', ...), ...)
print(arg[-1] ~= nil, arg[3] == nil)
EOF
run args.lua a b </dev/null
check "script sees arg[0], arg[1], arg[2] and ..." \
    [ "$rc" = 0 -a "$out" = "$(printf 'args.lua\ta\tb\t2\t2\ta\tb\ntrue\ttrue')" ]

run -e 'x = 5' -- args.lua q </dev/null
check "options before the script sit at negative indices" \
    has "$out" "$(printf 'args.lua\tq\tnil\t1\t1\tq')"

run --help </dev/null
check "--help prints the usage on stdout and exits 0, running nothing" \
    eval '[ "$rc" = 0 ] && [ -z "$err" ] && has "$out" "usage: zlua [options] [script [args]]" && has "$out" "--num_accelerators"'
run -h -e 'print("chunk ran")' </dev/null
check "-h does the same, whatever follows" eval '[ "$rc" = 0 ] && ! has "$out" "chunk ran" && has "$out" "-h, --help"'
run -e 'print(1 + 1)' -e 'print(type(zl))' </dev/null
check "-e runs chunks in order; zl is preset" [ "$rc" = 0 -a "$out" = "$(printf '2\ntable')" ]

cat >seeds.lua <<'EOF'
print(seed)
EOF
run -e 'seed = 17' seeds.lua </dev/null
check "-e runs before the script" [ "$rc" = 0 -a "$out" = 17 ]

mkdir -p mods
printf 'return {v = 7}\n' >mods/mymod.lua
LUA_PATH="$tmp/mods/?.lua;;" run -l mymod -e 'print(mymod.v)' </dev/null
check "-l mod sets the global mod" [ "$rc" = 0 -a "$out" = 7 ]
LUA_PATH="$tmp/mods/?.lua;;" run -l m=mymod -e 'print(m.v, mymod)' </dev/null
check "-l g=mod sets the global g" [ "$rc" = 0 -a "$out" = "$(printf '7\tnil')" ]
run -l no_such_module_here </dev/null
check "-l of a missing module fails" eval '[ "$rc" != 0 ] && has "$err" "no_such_module_here"'

run -v </dev/null
check "-v prints the version" eval '[ "$rc" = 0 ] && [[ $out =~ ^zlua\ 0\.1\.0\ \(Lua\ 5\.4\.[0-9]+,\ OpenBLAS\ [0-9.]+\ [A-Za-z0-9_]+\)\ with\  ]]'
# and the optional parts, each once, said built with or without
parts=${out#*) with }
check "-v lists each optional part once" eval '[ "$(for p in MPI libaio CUDA NCCL oneDNN readline; do
    tr -s ",() " "\n" <<< "$parts" | grep -cx "$p"; done | sort -u)" = 1 ]'

cat >err.lua <<'EOF'
local function inner()
  error('kaput')
end
inner()
EOF
run err.lua </dev/null
check "a runtime error exits non-zero with message and traceback" \
    eval '[ "$rc" != 0 ] && has "$err" "err.lua:2: kaput" && has "$err" "stack traceback" && has "$err" "in local '"'"'inner'"'"'"'

# zlua's refusal of the user's input (zl.raise) is its one line, naming the
# script's line; ZLUA_TRACEBACK=1 adds where inside zlua it was found.
printf '{"optimizer": {"type": "AdamW", "params": {"lrr": 1}}}\n' >typo.json
printf 'local zl, nn = require "zlua", require "zlua.nn"\nzl.initialize { model = nn.Linear(2, 2), config = "typo.json" }\n' >typo.lua
run typo.lua </dev/null
check "a config typo is one line: the key, the nearest one and the script's line" \
    eval '[ "$rc" = 1 ] && [ "$err" = "zlua: typo.lua:2: typo.json:1: unknown key optimizer.params.lrr (did you mean optimizer.params.lr?)" ]'
ZLUA_TRACEBACK=1 run typo.lua </dev/null
check "ZLUA_TRACEBACK=1 shows the traceback of a config typo" \
    eval '[ "$rc" = 1 ] && has "$err" "unknown key optimizer.params.lrr" && has "$err" "stack traceback"'

run -e 'zl.rnadn(3)' </dev/null
check "a mistyped zlua function is named with the nearest one" \
    eval '[ "$rc" = 1 ] && has "$err" "attempt to call a nil value (field '"'"'rnadn'"'"') (did you mean zl.randn?)"'
run -e 'zl.zeros(2):sizee()' </dev/null
check "a mistyped tensor method is named with the nearest one" eval 'has "$err" "(did you mean x:size?)"'
run -e 'local nn = require "zlua.nn"; nn.Lienar(2, 2)' </dev/null
check "a mistyped nn module is named with the nearest one" eval 'has "$err" "(did you mean nn.Linear?)"'
run -e 'zl.qqqqqq()' </dev/null
check "a name far from every zlua name gets no guess" eval 'has "$err" "(field '"'"'qqqqqq'"'"')" && ! has "$err" "did you mean"'

printf 'local a = 1\n\nlocal b = = 2\n' >syntax.lua
run syntax.lua </dev/null
check "a syntax error names the file and line" eval '[ "$rc" != 0 ] && has "$err" "syntax.lua:3:"'

run no_such_script.lua </dev/null
check "a missing script is a clear error" \
    eval '[ "$rc" != 0 ] && has "$err" "cannot open no_such_script.lua"'

run -e 'error("from -e")' </dev/null
check "an error in -e exits non-zero" eval '[ "$rc" != 0 ] && has "$err" "from -e" && has "$err" "stack traceback"'

run -e 'os.exit(3)' </dev/null
check "os.exit sets the status" [ "$rc" = 3 ]

run - <<<'print(6*7)'
check "- runs stdin" [ "$rc" = 0 -a "$out" = 42 ]
run <<<'print(6*7)'
check "no script and stdin not a terminal: stdin runs as a chunk" [ "$rc" = 0 -a "$out" = 42 ]
run - x y <<<'print(arg[0], ...)'
check "- takes script arguments" [ "$rc" = 0 -a "$out" = "$(printf -- '-\tx\ty')" ]
run <<<'error("piped")'
check "an error in piped stdin exits non-zero" eval '[ "$rc" != 0 ] && has "$err" "piped"'

run -x </dev/null
check "an unknown option gives the usage and status 1" \
    eval '[ "$rc" = 1 ] && has "$err" "unrecognized option '"'"'-x'"'"'" && has "$err" "usage:"'
run --bogus </dev/null
check "an unknown long option gives the usage and status 1" eval '[ "$rc" = 1 ] && has "$err" "usage:"'
run -e </dev/null
check "-e without its chunk gives the usage" eval '[ "$rc" = 1 ] && has "$err" "needs an argument"'
run --nprocs zero args.lua </dev/null
check "--nprocs checks its count" eval '[ "$rc" = 1 ] && has "$err" "got '"'"'zero'"'"'"'

# SIGINT once the script runs (it says so), not at a fixed time: on a loaded
# machine start-up can take longer than any fixed delay.
"$ZLUA" -e 'io.stdout:write("running\n") io.stdout:flush() while true do end' >"$tmp/out" 2>"$tmp/err" </dev/null &
pid=$!
for _ in $(seq 100); do grep -q running "$tmp/out" 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"
( sleep 10; kill -KILL "$pid" 2>/dev/null ) &
watchdog=$!
wait "$pid"
rc=$?
kill "$watchdog" 2>/dev/null
out=$(cat "$tmp/out")
err=$(cat "$tmp/err")
check "SIGINT stops a running script with 'interrupted!' and status 1" \
    eval '[ "$rc" = 1 ] && has "$err" "interrupted!" && has "$err" "stack traceback"'

printf 'print("ran")\n' >ran.lua
run -i ran.lua <&-
check "-i script with stdin closed runs the script and exits 0" eval '[ "$rc" = 0 ] && has "$out" ran'
run -i ran.lua </dev/null
check "-i script with stdin empty runs the script and exits 0" eval '[ "$rc" = 0 ] && has "$out" ran'

run -i <<'EOF'
x = 3
x * 2
function g()
  return 5
end
g()
error('oops')
1, 'two', nil
EOF
check "-i on a pipe: values printed, multi-line, errors go on, no prompts" \
    eval '[ "$rc" = 0 ] && has "$out" "$(printf "6\n5\n1\ttwo\tnil")" && has "$err" "stdin:1: oops" && ! has "$out" "> "'

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
