#!/usr/bin/env bash
# Runs every code block of README.md against this build, so the guide cannot drift:
# shell, Lua (as a file and at the prompt) and C blocks; a block of any other kind
# fails the test unless it is output (```text).
# Usage: test_readme.sh <zlua> <source dir> [C compiler]
set -u
zlua=${1:?usage: test_readme.sh <zlua> <source dir> [C compiler]}
src=$(cd "${2:?usage: test_readme.sh <zlua> <source dir> [C compiler]}" && pwd)
cc=${3:-cc}
case $zlua in /*) ;; *) zlua=$PWD/$zlua ;; esac
build=$(cd "$(dirname "$zlua")/.." && pwd)
readme=$src/README.md

# Every block runs in one temporary folder standing for the clone: the source's
# top-level entries linked in, `build` linked to this build, `zlua` on PATH and
# HOME inside it, so what the commands write stays there.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
work=$tmp/clone
mkdir -p "$work" "$tmp/bin" "$tmp/blocks" "$work/home"
for entry in "$src"/* "$src"/.ci; do
  case ${entry##*/} in build | build-*) ;; *) ln -s "$entry" "$work/${entry##*/}" ;; esac
done
ln -s "$build" "$work/build"
ln -s "$zlua" "$tmp/bin/zlua"
export PATH=$tmp/bin:$PATH HOME=$work/home
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Whether this build has MPI: `zlua -v` names the parts it was built with.
version=$("$zlua" -v) || { echo "FAIL: $zlua -v"; exit 1; }
parts=${version#*) with }
parts=${parts%% (without*}
has_mpi=0
[[ ", $parts," == *", MPI,"* ]] && has_mpi=1

failed=0
ran=0
skipped=()
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# The blocks, in order: blocks/N.info holds "LINE INFO", blocks/N.body the text.
awk -v dir="$tmp/blocks" '
  /^[ \t]*(```|~~~)/ {
    if (!open) { open = 1; n++; info = $0; sub(/^[ \t]*(```|~~~)[ \t]*/, "", info)
                 print NR " " info > (dir "/" n ".info"); printf "" > (dir "/" n ".body"); next }
    open = 0; next
  }
  open { print > (dir "/" n ".body") }
  END { if (open) { print "unclosed"; exit 1 } }' "$readme" >"$tmp/awk.out" ||
  { fail "README.md: a code block is never closed"; exit 1; }
nblocks=$(find "$tmp/blocks" -name '*.info' | wc -l)
[ "$nblocks" -gt 0 ] || { fail "README.md holds no code blocks"; exit 1; }

# The logical lines of a shell block (continuations joined, comments and blanks out).
shell_lines() {
  awk '{ if (sub(/\\$/, "")) { acc = acc $0; next } line = acc $0; acc = ""
         if (line !~ /^[ \t]*(#|$)/) print line }' "$1"
}

# run <what> <log> <command...>: in the clone's folder, under a time limit.
run() {
  local what=$1 log=$2
  shift 2
  ran=$((ran + 1))
  if ! (cd "$work" && timeout 300 "$@") >"$log" 2>&1; then
    fail "$what"
    tail -n 30 "$log"
    return 1
  fi
  echo "ok   $what"
}

# scripts/setup.sh and scripts/test.sh cannot run inside the suite (test.sh is
# the suite): they must be present and executable and do what the README says;
# setup.sh's training command must be one the README runs.
check_script() {   # check_script <README line> <script path relative to the clone>
  local at=$1 script=$2 path=$src/$2
  if [ ! -x "$path" ]; then
    fail "README.md:$at: $script is missing or not executable"
    return
  fi
  grep -q 'scripts/deps.sh"' "$path" || fail "README.md:$at: $script does not check the packages (scripts/deps.sh)"
  grep -q 'cmake --build "$build"' "$path" || fail "README.md:$at: $script does not build"
  grep -q 'ZLUA_BUILD_DIR' "$path" || fail "README.md:$at: $script does not take ZLUA_BUILD_DIR"
  case $script in
    scripts/setup.sh)
      setup_train=$(grep 'bin/zlua"' "$path" | tail -n 1 |
                    sed -e 's#"$build/bin/zlua"#zlua#' -e 's#"$root/\([^"]*\)"#\1#g')
      [ -n "$setup_train" ] || fail "README.md:$at: $script trains nothing with build/bin/zlua" ;;
    scripts/test.sh)
      grep -q 'ctest --test-dir "$build"' "$path" || fail "README.md:$at: $script does not run ctest --test-dir build"
      grep -q 'scripts/test.sh' "$src/.ci/run" || fail "README.md:$at: .ci/run does not run $script" ;;
  esac
  echo "ok   README.md:$at: $script checked (it cannot run inside the suite)"
}

# A block named in its info string (```lua train.lua) is written to that file
# for a later command, which must name it.
commands=$tmp/commands     # every shell line of the README, for the checks at the end
named=()                   # "LINE NAME" of the blocks written to files
: >"$commands"
setup_train=
for ((i = 1; i <= nblocks; i++)); do
  read -r at kind name rest <"$tmp/blocks/$i.info"
  body=$tmp/blocks/$i.body
  if [ -n "${rest:-}" ]; then
    fail "README.md:$at: a block's info string is a language and at most a file name"
    continue
  fi
  if [ -n "${name:-}" ]; then
    case $kind in
      lua | json | c) cp "$body" "$work/$name"; named+=("$at $name") ;;
      *) fail "README.md:$at: a named block must be lua, json or c, not '${kind:-none}'" ;;
    esac
    continue
  fi
  case $kind in
    text) ;;
    sh | bash)
      script=$tmp/block_$at.sh
      printf 'set -e\n' >"$script"
      needs_mpi=0
      while IFS= read -r line; do
        echo "$line" >>"$commands"
        read -r first _ <<<"$line"
        case $first in
          scripts/setup.sh | scripts/test.sh) check_script "$at" "$first"; continue ;;
        esac
        [[ $line =~ (^|[^[:alnum:]_])(zlua[[:space:]]+(--nprocs|--num_gpus|--hostfile)|mpirun)([^[:alnum:]_]|$) ]] && needs_mpi=1
        printf '%s\n' "$line" >>"$script"
      done < <(shell_lines "$body")
      [ "$(wc -l <"$script")" -gt 1 ] || continue
      if [ "$needs_mpi" = 1 ] && [ "$has_mpi" = 0 ]; then
        skipped+=("README.md:$at")
        echo "skip README.md:$at: several ranks, and this build has no MPI ($version)"
        continue
      fi
      run "README.md:$at: the shell block" "$tmp/block_$at.log" bash -x "$script"
      ;;
    lua)
      cp "$body" "$work/block_$at.lua"
      run "README.md:$at: the Lua block" "$tmp/block_$at.log" zlua "block_$at.lua"
      # The README offers these lines for the prompt too, where an error is
      # printed on stderr and the session goes on: stderr must stay empty.
      ran=$((ran + 1))
      if (cd "$work" && timeout 300 zlua -i <"block_$at.lua") >"$tmp/block_$at.prompt" \
           2>"$tmp/block_$at.prompt.err" && [ ! -s "$tmp/block_$at.prompt.err" ]; then
        echo "ok   README.md:$at: the Lua block at the prompt"
      else
        fail "README.md:$at: the Lua block at the prompt (zlua -i)"
        tail -n 30 "$tmp/block_$at.prompt.err"
      fi
      ;;
    c)
      cp "$body" "$work/block_$at.c"
      if run "README.md:$at: the C block compiled against the build" "$tmp/block_$at.cc.log" \
           "$cc" -std=c11 -Wall -Wextra -Werror -I"$src/engine/include" -I"$src/lua/include" \
           -o "block_$at" "block_$at.c" -L"$build/lua" -L"$build/engine" -lzlua-lua -lzlua \
           -Wl,-rpath,"$build/lua:$build/engine"; then
        run "README.md:$at: the C block run" "$tmp/block_$at.log" "./block_$at"
      fi
      ;;
    *) fail "README.md:$at: a \`\`\`${kind:-(no language)} block this test cannot run (mark output as \`\`\`text)" ;;
  esac
done

# Every named block is used by a command of the README.
for entry in "${named[@]}"; do
  read -r at name <<<"$entry"
  grep -qwF -- "$name" "$commands" || fail "README.md:$at: no command of the README uses $name"
done

# setup.sh's last step is a command the README shows (and so runs), and its
# output holds the held-out accuracy the README claims (about 97.5%).
if [ -n "$setup_train" ]; then
  found=
  for ((i = 1; i <= nblocks; i++)); do
    read -r at kind name rest <"$tmp/blocks/$i.info"
    case $kind in sh | bash) ;; *) continue ;; esac
    [ -z "${name:-}" ] || continue
    if shell_lines "$tmp/blocks/$i.body" | grep -qxF -- "$setup_train"; then found=$at; break; fi
  done
  if [ -z "$found" ]; then
    fail "scripts/setup.sh trains with '$setup_train', which no shell block of README.md shows"
  elif [ -f "$tmp/block_$found.log" ]; then
    accuracy=$(sed -n 's/^accuracy \([0-9.]*\)$/\1/p' "$tmp/block_$found.log" | tail -n 1)
    if awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 0.97) }'; then
      echo "ok   '$setup_train' (setup.sh's last step) reaches held-out accuracy $accuracy"
    else
      fail "'$setup_train' reached held-out accuracy '${accuracy:-none}', not the README's 97.5%"
    fi
  fi
fi

# Every page the README links to is in the tree.
while IFS= read -r link; do
  [ -e "$src/${link%%#*}" ] || fail "README.md links to $link, which is not in the tree"
done < <(grep -o '](\([^)]*\))' "$readme" | sed 's/^](\(.*\))$/\1/' | grep -v '^[a-z]*:' | sort -u)

# The packages the README says setup.sh checks are the ones scripts/deps.sh checks.
packages=$(sed -n '/^packages=(/,/)/p' "$src/scripts/deps.sh" | tr -d '()' | sed 's/packages=//')
[ -n "$packages" ] || fail "scripts/deps.sh: no packages=(...) list"
for p in $packages; do
  grep -qw -- "$p" "$readme" || fail "README.md does not name the package $p that scripts/deps.sh checks"
done

echo "$ran runs, ${#skipped[@]} blocks skipped, $failed failures"
[ "$failed" -eq 0 ] || exit 1
if [ "${#skipped[@]}" -gt 0 ]; then
  echo "skipped: ${skipped[*]} (no MPI in this build)"
  exit 77
fi
