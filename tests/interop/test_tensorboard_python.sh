#!/usr/bin/env bash
# An event file written by zlua.monitor, read by TensorBoard's own reader
# (EventAccumulator): the tags, steps, values (as float32) and wall times, and
# a copy with one flipped CRC byte losing that record, which shows the reader
# checks the framing we pass. Skips (exit 77, CTest's skip) when Python lacks tensorboard.
# Usage: test_tensorboard_python.sh <path to zlua>
set -u
ZLUA=${1:?usage: test_tensorboard_python.sh <path to zlua>}
if ! python3 -c 'import tensorboard' 2>/dev/null; then
    echo "skipped: python3 cannot import tensorboard (pip install tensorboard to run this test)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Five steps of DeepSpeed's three events, then one event with another tag.
cat > "$tmp/write.lua" <<'LUA'
local monitor = require "zlua.monitor"
local out, t = arg[1], 1700000000.5
local mon = monitor.from_config({ tensorboard = { enabled = true, output_path = out, job_name = "job" } },
                                { clock = function() return t end })
for step = 1, 5 do
  t = 1700000000.5 + step
  mon:write_events({ { "Train/Samples/train_loss", 3.0 / step, 32 * step },
                     { "Train/Samples/lr", 1e-4 * step, 32 * step },
                     { "Train/Samples/loss_scale", 2.0 ^ (20 - step), 32 * step } })
end
mon:write_events({ { "eval/accuracy", 0.875, 1 << 33 } })
mon:close()
print(mon.tensorboard.path)
LUA
"$ZLUA" "$tmp/write.lua" "$tmp" > "$tmp/path" || { echo "FAIL: zlua could not write the event file"; exit 1; }

python3 - "$tmp/job" "$(cat "$tmp/path")" <<'EOF'
import os, struct, sys
import logging
logging.disable(logging.CRITICAL)   # the corrupt copy below makes the reader log a warning
from tensorboard.backend.event_processing import event_accumulator

job, path = sys.argv[1], sys.argv[2]
failed = 0

def check(cond, msg):
    global failed
    if not cond:
        failed += 1
        print("FAIL:", msg)

def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]

def load(d):
    acc = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc

acc = load(job)
tags = sorted(acc.Tags()["scalars"])
check(tags == ["Train/Samples/loss_scale", "Train/Samples/lr", "Train/Samples/train_loss", "eval/accuracy"],
      "tags: %r" % tags)
expect = {
    "Train/Samples/train_loss": [(32 * s, 3.0 / s) for s in range(1, 6)],
    "Train/Samples/lr": [(32 * s, 1e-4 * s) for s in range(1, 6)],
    "Train/Samples/loss_scale": [(32 * s, 2.0 ** (20 - s)) for s in range(1, 6)],
}
for tag, want in expect.items():
    got = acc.Scalars(tag)
    check([(e.step, e.value) for e in got] == [(s, f32(v)) for s, v in want], "%s: %r" % (tag, got))
    check([e.wall_time for e in got] == [1700000000.5 + s for s in range(1, 6)], "%s wall times" % tag)
acc_ev = acc.Scalars("eval/accuracy")
check(len(acc_ev) == 1 and acc_ev[0].step == 1 << 33 and acc_ev[0].value == 0.875, "eval/accuracy: %r" % acc_ev)
check(acc.FirstEventTimestamp() == 1700000000.5, "first event time %r" % acc.FirstEventTimestamp())

# The same file with the last record's data CRC flipped: that record is dropped.
data = bytearray(open(path, "rb").read())
data[-1] ^= 0x01
bad = os.path.join(os.path.dirname(job), "corrupt")
os.mkdir(bad)
with open(os.path.join(bad, os.path.basename(path)), "wb") as f:
    f.write(bytes(data))
acc = load(bad)
check("eval/accuracy" not in acc.Tags()["scalars"], "a record with a bad CRC was accepted")
check(len(acc.Scalars("Train/Samples/lr")) == 5, "the records before the bad one are read")

print("tensorboard %s read %s: %s" % (__import__("tensorboard").__version__, os.path.basename(path),
                                      "ok" if failed == 0 else "%d failures" % failed))
sys.exit(1 if failed else 0)
EOF
