#!/usr/bin/env bash
# docs/c-api.md held to the public headers: one reference entry per ZL_API
# function, with the declared signature and under its header, none for a
# function no header declares; then the guide's complete program compiled
# with pkg-config against an install of this build, and run.
# Usage: test_c_api_docs.sh SOURCE_DIR BUILD_DIR WORK_DIR LIBDIR [C_COMPILER]
set -uo pipefail
src=$1
build=$2
work=$3
libdir=$4
cc=${5:-cc}
doc=$src/docs/c-api.md
headers=("$src"/engine/include/zlua/*.h "$src"/lua/include/zlua/*.h)
rm -rf "$work"
mkdir -p "$work"
status=0
fail() { echo "FAIL: $*" >&2; status=1; }
[ -f "$doc" ] || { echo "FAIL: $doc is missing" >&2; exit 1; }

# Each declaration, "name TAB return type TAB call form TAB zlua/header.h":
# from ZL_API to the first ';' (a declaration may span lines), whitespace
# collapsed, the call form the name and its balanced parameter list.
awk '
function trim(s) { sub(/^ +/, "", s); sub(/ +$/, "", s); return s }
function emit(d, file,    i, c, depth, start, name, ret, params) {
    d = substr(d, 1, index(d, ";") - 1)
    gsub(/[ \t]+/, " ", d)
    sub(/^ *ZL_API /, "", d)
    if (!match(d, /[A-Za-z_][A-Za-z0-9_]* ?\(/)) { print "?\t?\t" d "\t" file; return }
    name = substr(d, RSTART, RLENGTH); sub(/ ?\($/, "", name)
    ret = trim(substr(d, 1, RSTART - 1))
    start = RSTART + RLENGTH - 1; depth = 0
    for (i = start; i <= length(d); i++) {
        c = substr(d, i, 1)
        if (c == "(") depth++
        else if (c == ")" && --depth == 0) break
    }
    params = substr(d, start, i - start + 1)
    gsub(/\( /, "(", params); gsub(/ \)/, ")", params)
    print name "\t" ret "\t" name params "\t" file
}
FNR == 1 { collecting = 0; n = split(FILENAME, parts, "/"); file = parts[n - 1] "/" parts[n] }
{
    if (!collecting && $0 ~ /^[ \t]*ZL_API[ \t]/) { collecting = 1; decl = $0 }
    else if (collecting) decl = decl " " $0
    if (collecting && index($0, ";")) { emit(decl, file); collecting = 0 }
}' "${headers[@]}" >"$work/declared.tsv"

# The reference entries, "name TAB return type TAB call form TAB section TAB line",
# or "!" lines for what breaks the format: every line of the Reference section
# starting "- `" must read "- `name(...)` → `type`: ..." under a "### zlua/x.h".
awk '
/^## / { inref = ($0 == "## Reference"); next }
!inref { next }
/^### `/ { print "!\tline " NR ": an entry must be a bullet, not a heading: " $0; next }
/^### / { section = $2; next }
/^- `/ {
    n = split($0, span, "`")
    call = span[2]; gsub(/[ \t]+/, " ", call)
    name = call; sub(/\(.*/, "", name)
    if (n < 5 || call !~ /^[A-Za-z_][A-Za-z0-9_]*\(.*\)$/ || span[3] != " → ") {
        print "!\tline " NR ": not \"- `name(...)` → `type`: meaning\": " $0; next
    }
    ret = span[4]; gsub(/[ \t]+/, " ", ret)
    print name "\t" ret "\t" call "\t" section "\t" NR
}' "$doc" >"$work/documented.tsv"

ndecl=$(wc -l <"$work/declared.tsv")
nlines=$(cat "${headers[@]}" | grep -c '^[[:space:]]*ZL_API[[:space:]]')
[ "$ndecl" -eq "$nlines" ] || fail "read $ndecl declarations from $nlines ZL_API lines of the headers"
[ "$ndecl" -gt 0 ] || fail "no ZL_API declaration found in ${headers[*]}"
grep '^?' "$work/declared.tsv" | while IFS=$'\t' read -r _ _ decl file; do
  echo "FAIL: $file: cannot read the declaration '$decl'" >&2
done
grep -q '^?' "$work/declared.tsv" && status=1
grep '^!' "$work/documented.tsv" | cut -f2- | sed 's/^/FAIL: docs\/c-api.md /' >&2
grep -q '^!' "$work/documented.tsv" && status=1

# Compared by name: missing, stale, listed twice, another signature, another header.
report=$(awk -F'\t' '
FNR == NR { if ($1 != "?") { ret[$1] = $2; call[$1] = $3; hdr[$1] = $4 }; next }
$1 == "!" { next }
{
    if ($1 in seen) { print "listed twice (lines " seen[$1] " and " $5 "): " $1; next }
    seen[$1] = $5
    if (!($1 in call)) { print "stale entry (line " $5 ", no header declares it): " $1; next }
    if ($3 != call[$1]) print "line " $5 ": `" $3 "` but " hdr[$1] " declares `" call[$1] "`"
    if ($2 != ret[$1]) print "line " $5 ": " $1 " returns `" $2 "` but " hdr[$1] " declares `" ret[$1] "`"
    if ($4 != hdr[$1]) print "line " $5 ": " $1 " is under " $4 " but declared in " hdr[$1]
}
END { for (n in call) if (!(n in seen)) print "no entry: " n " (" hdr[n] ")" }
' "$work/declared.tsv" "$work/documented.tsv" | sort)
if [ -n "$report" ]; then
  echo "FAIL: docs/c-api.md disagrees with the headers:" >&2
  printf "%s\n" "$report" | sed "s/^/  /" >&2
  status=1
fi
echo "$ndecl functions declared in the headers, $(grep -vc "^!" "$work/documented.tsv") entries in docs/c-api.md"

# The complete program: the first ```c block under "## A complete program".
awk '
/^## / { here = ($0 == "## A complete program"); next }
here && !open && /^```c$/ { open = 1; next }
open && /^```$/ { exit }
open { print }' "$doc" >"$work/program.c"
if [ ! -s "$work/program.c" ]; then
  fail "docs/c-api.md has no \`\`\`c block under \"## A complete program\""
  exit $status
fi
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; fail "cmake --install $build"; exit 1; }
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
if ! $cc -std=c11 -Wall -Wextra -Werror -o "$work/program" "$work/program.c" $(pkg-config --cflags --libs zlua) \
     -Wl,-rpath,"$(pkg-config --variable=libdir zlua)" >"$work/cc.log" 2>&1; then
  cat "$work/cc.log" >&2
  fail "the complete program of docs/c-api.md does not compile ($work/program.c)"
  exit 1
fi
if ! timeout 120 "$work/program" >"$work/run.log" 2>&1; then
  cat "$work/run.log" >&2
  fail "the complete program of docs/c-api.md failed"
  exit 1
fi
cat "$work/run.log"
[ "$(tail -n 1 "$work/run.log")" = "ok" ] || fail "the complete program did not end with \"ok\""
[ $status -eq 0 ] && echo "ok   docs/c-api.md: every function has its entry, and the complete program builds and trains"
exit $status
