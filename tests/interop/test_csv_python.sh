#!/usr/bin/env bash
# zlua.monitor's CSV files against the bytes Python's csv module writes for the
# same events, the way DeepSpeed's csv_monitor calls it (a file per event
# name opened for append, the header row once per writer, writerow([step,
# value])): random doubles of every magnitude, integers, nan and inf, over two
# writers (a resumed run). Skips (exit 77, CTest's skip) without python3.
# Usage: test_csv_python.sh <path to zlua>
set -u
ZLUA=${1:?usage: test_csv_python.sh <path to zlua>}
if ! python3 -c 'import csv' 2>/dev/null; then
    echo "skipped: no python3"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Writes zlua's files under $tmp/zlua/job and the events as a manifest:
# writer, name, step, then the value as i:<integer> or f:<hex float>.
cat > "$tmp/write.lua" <<'LUA'
local monitor = require "zlua.monitor"
local out = arg[1]
local manifest = assert(io.open(out .. "/manifest", "w"))
math.randomseed(12345)
local names = { "Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/loss_scale", "eval acc" }
local specials = { 0.0, -0.0, 0 / 0, math.huge, -math.huge, 1e16, 1e-5, 1e-4, 65536.0, 0.1 }
local function value(i)
  if i <= #specials then return specials[i] end
  local r = math.random(4)
  if r == 1 then return math.random(-100000, 100000) end
  if r == 2 then return string.unpack("<d", string.pack("<I8", math.random(0, 0x7fefffffffffffff))) end
  return (math.random() - 0.5) * 10.0 ^ math.random(-12, 20)
end
local i = 0
for writer = 1, 2 do
  local mon = monitor.from_config({ csv_monitor = { enabled = true, output_path = out .. "/zlua", job_name = "job" } })
  for step = 1, 300 do
    local events = {}
    for _, name in ipairs(names) do
      i = i + 1
      local v = value(i)
      events[#events + 1] = { name, v, step * 8 }
      manifest:write(writer, "\t", name, "\t", step * 8, "\t",
                     math.type(v) == "integer" and ("i:" .. v) or string.format("f:%a", v), "\n")
    end
    mon:write_events(events)
  end
  mon:close()
end
manifest:close()
LUA
"$ZLUA" "$tmp/write.lua" "$tmp" || { echo "FAIL: zlua could not write the CSV files"; exit 1; }

python3 - "$tmp" <<'EOF'
import csv, os, sys

root = sys.argv[1]
want_dir = os.path.join(root, "python")
os.makedirs(want_dir)
written = {}   # per writer: file names that have their header
for line in open(os.path.join(root, "manifest")):
    writer, name, step, v = line.rstrip("\n").split("\t")
    value = int(v[2:]) if v.startswith("i:") else float.fromhex(v[2:])
    base = name.replace("/", "_").replace(" ", "_")
    with open(os.path.join(want_dir, base + ".csv"), "a+") as f:
        w = csv.writer(f)
        if base not in written.setdefault(writer, set()):
            written[writer].add(base)
            w.writerow(["step", name.split("/")[-1]])
        w.writerow([int(step), value])

failed = 0
names = sorted(os.listdir(want_dir))
got_names = sorted(os.listdir(os.path.join(root, "zlua", "job")))
if names != got_names:
    failed += 1
    print("FAIL: files %r, expected %r" % (got_names, names))
for n in names:
    want = open(os.path.join(want_dir, n), "rb").read()
    path = os.path.join(root, "zlua", "job", n)
    got = open(path, "rb").read() if os.path.exists(path) else b""
    if got != want:
        failed += 1
        wl, gl = want.split(b"\r\n"), got.split(b"\r\n")
        k = next((i for i in range(min(len(wl), len(gl))) if wl[i] != gl[i]), min(len(wl), len(gl)))
        print("FAIL: %s line %d: %r, expected %r" % (n, k + 1, gl[k:k + 1], wl[k:k + 1]))
rows = sum(1 for _ in open(os.path.join(root, "manifest")))
print("csv: %d rows in %d files against Python's csv module: %s" % (rows, len(names), "ok" if not failed else "%d files differ" % failed))
sys.exit(1 if failed else 0)
EOF
