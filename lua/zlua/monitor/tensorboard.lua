--[[ zlua.monitor.tensorboard: DeepSpeed's tensorboard monitor, writing the
  TensorBoard event file itself (no TensorFlow, no protobuf library) as
  torch's SummaryWriter.add_scalar does: one Event per scalar.

  local tensorboard = require 'zlua.monitor.tensorboard'
  local w = tensorboard.new{output_path = 'runs', job_name = 'digits'}
  w:write_events({{'Train/Samples/train_loss', 0.25, 64}})   -- flushed
  w:close()

  The file, output_path/job_name/events.out.tfevents.<unix time>.<host>, is
  a sequence of TFRecords:
    uint64 length (little-endian) | uint32 masked crc32c(length bytes)
    | data | uint32 masked crc32c(data)
  with masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32), and
  data an Event protobuf. The first Event carries the file version
  "brain.Event:2"; each scalar is an Event with a Summary holding one Value.
  The fields written, by number and wire type:
    Event   { 1 wall_time: double, 2 step: int64 (varint),
              3 file_version: string, 5 summary: Summary }
    Summary { 1 value: repeated Value }
    Value   { 1 tag: string, 2 simple_value: float (fixed32) }
  Fields at their default (step 0) are left out, as protobuf's proto3
  encoders do. ]]

local util = require 'zlua.monitor.util'

local fmt, pack, byte, char = string.format, string.pack, string.byte, string.char

local tensorboard = {}

-- CRC32C (Castagnoli, reflected polynomial 0x82f63b78), one table lookup per byte.
local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if c & 1 == 1 then c = (c >> 1) ~ 0x82f63b78 else c = c >> 1 end
  end
  CRC_TABLE[i] = c
end

--- tensorboard.crc32c(s): the CRC32C of the bytes of s, as an integer in 0..2^32-1.
function tensorboard.crc32c(s)
  local crc, T = 0xffffffff, CRC_TABLE
  for i = 1, #s do
    crc = T[(crc ~ byte(s, i)) & 0xff] ~ (crc >> 8)
  end
  return crc ~ 0xffffffff
end

--- tensorboard.masked_crc(s): the TFRecord mask applied to crc32c(s).
function tensorboard.masked_crc(s)
  local c = tensorboard.crc32c(s)
  return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
end

--- tensorboard.record(data): data framed as one TFRecord.
function tensorboard.record(data)
  local len = pack('<I8', #data)
  return len .. pack('<I4', tensorboard.masked_crc(len)) .. data .. pack('<I4', tensorboard.masked_crc(data))
end

-- Protobuf encoding, only what Event needs.
local function varint(v)
  local out = {}
  while v & ~0x7f ~= 0 do
    out[#out + 1] = char((v & 0x7f) | 0x80)
    v = v >> 7
  end
  out[#out + 1] = char(v)
  return table.concat(out)
end

local function key(field, wire) return varint((field << 3) | wire) end

local function bytes_field(field, s) return key(field, 2) .. varint(#s) .. s end

--- tensorboard.event{wall_time =, step = 0, file_version = | tag =, value =}:
--- the bytes of one Event: either the file-version record or one scalar.
function tensorboard.event(e)
  local parts = { key(1, 1), pack('<d', e.wall_time) }
  if e.step and e.step ~= 0 then
    parts[#parts + 1] = key(2, 0) .. varint(e.step)
  end
  if e.file_version then
    parts[#parts + 1] = bytes_field(3, e.file_version)
  else
    local value = bytes_field(1, e.tag) .. key(2, 5) .. pack('<f', e.value)
    parts[#parts + 1] = bytes_field(5, bytes_field(1, value))
  end
  return table.concat(parts)
end

local Writer = {}
Writer.__index = Writer

--- tensorboard.new{output_path = '', job_name = 'DeepSpeedJobName' [, clock
--- = os.time]}: a writer with a new event file in output_path/job_name
--- (created now; relative to the current directory when output_path is
--- empty, as DeepSpeed's default). clock() gives the wall time of each Event
--- in seconds since the epoch; os.time's whole seconds unless the caller has
--- a finer clock. A name already taken (two writers in one second) gets a
--- suffix .1, .2, ...
function tensorboard.new(opts)
  local who = 'tensorboard'
  local dir = util.join(opts.output_path or '', opts.job_name or 'DeepSpeedJobName')
  util.make_dir(who, dir)
  local clock = opts.clock or os.time
  local now = clock()
  local base = fmt('%s/events.out.tfevents.%010d.%s', dir, math.floor(now), util.hostname())
  local path, n = base, 0
  while util.exists(path) do
    n = n + 1
    path = base .. '.' .. n
  end
  local f, err = io.open(path, 'wb')
  if not f then util.raise(fmt('%s: cannot create %s', who, err)) end
  local self = setmetatable({ path = path, file = f, clock = clock }, Writer)
  self:_write(tensorboard.record(tensorboard.event{ wall_time = now, file_version = 'brain.Event:2' }))
  self:flush()
  return self
end

function Writer:_write(s)
  local ok, err = self.file:write(s)
  if not ok then util.raise(fmt("tensorboard: writing '%s': %s", self.path, tostring(err))) end
end

--- w:write_events({{name, value, step}, ...}): one scalar Event per entry
--- (the value stored as a float32), then a flush, as DeepSpeed's monitor.
function Writer:write_events(events)
  local who = 'tensorboard: write_events'
  if not self.file then util.raise(who .. ': the monitor is closed') end
  util.events(who, events)
  local now = self.clock()
  local out = {}
  for i = 1, #events do
    local name, value, step = util.event(who, events, i)
    out[i] = tensorboard.record(tensorboard.event{ wall_time = now, step = step, tag = name, value = value })
  end
  self:_write(table.concat(out))
  self:flush()
end

--- w:flush(): hands what was written to the operating system.
function Writer:flush()
  if not self.file then return end
  local ok, err = self.file:flush()
  if not ok then util.raise(fmt("tensorboard: writing '%s': %s", self.path, tostring(err))) end
end

--- w:close(): flushes and closes the file; closing twice is harmless.
function Writer:close()
  if not self.file then return end
  local f = self.file
  self.file = nil
  local ok, err = f:close()
  if not ok then util.raise(fmt("tensorboard: closing '%s': %s", self.path, tostring(err))) end
end

return tensorboard
