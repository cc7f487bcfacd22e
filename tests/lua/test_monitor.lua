-- zlua.monitor: the CSV files byte for byte (Python's float repr, CRLF rows, the
-- header once per writer), CRC32C and TFRecord framing against published test
-- vectors, an event file parsed back by a decoder written here (its own CRC32C and
-- protobuf reader), rank 0 only, file naming, and each bad config or event with
-- its message.
local H = require 'harness'
local monitor = require 'zlua.monitor'
local csv = require 'zlua.monitor.csv'
local tensorboard = require 'zlua.monitor.tensorboard'
local util = require 'zlua.monitor.util'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local fmt, unpack = string.format, string.unpack

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local root = os.tmpname()
os.remove(root)
assert(os.execute('mkdir -p ' .. q(root)))

local read = H.read_file

local CLOCK = 1700000000.25
local function clock() return CLOCK end

-- CSV ----------------------------------------------------------------------------------

test('csv_format_value', function()
  -- Expected strings are Python's repr() of the same doubles.
  local cases = {
    { 0.25, '0.25' }, { 65536.0, '65536.0' }, { 65536, '65536' }, { -3, '-3' },
    { 0.1, '0.1' }, { 1 / 3, '0.3333333333333333' }, { 2 / 3, '0.6666666666666666' },
    { 1e-4, '0.0001' }, { 1e-5, '1e-05' }, { 1.5e-7, '1.5e-07' }, { 2.5e-4, '0.00025' },
    { 1e15, '1000000000000000.0' }, { 1e16, '1e+16' }, { 1.25e17, '1.25e+17' },
    { 123456.789, '123456.789' }, { 2 ^ -30, '9.313225746154785e-10' },
    { 1e22, '1e+22' }, { 1e23, '1e+23' }, { 5e-324, '5e-324' },
    { 1.7976931348623157e308, '1.7976931348623157e+308' }, { -2.5, '-2.5' },
    { 0.0, '0.0' }, { -0.0, '-0.0' }, { 0 / 0, 'nan' }, { math.huge, 'inf' }, { -math.huge, '-inf' },
    { 2.3025850929940455, '2.3025850929940455' }, { 0.1 + 0.2, '0.30000000000000004' },
  }
  for _, c in ipairs(cases) do
    check_eq(csv.format_value(c[1]), c[2], fmt('format_value(%a)', c[1]))
  end
  check_eq(csv.file_name('Train/Samples/train_loss'), 'Train_Samples_train_loss')
  check_eq(csv.file_name('my event/a b'), 'my_event_a_b')
end)

test('csv_files_exact', function()
  local out = root .. '/csv run'       -- a space: the directory is made through a shell
  local mon = monitor.from_config({ csv_monitor = { enabled = true, output_path = out, job_name = "it's" } })
  check(mon.enabled, 'enabled')
  mon:write_events({ { 'Train/Samples/train_loss', 2.3025850929940455, 32 },
                     { 'Train/Samples/lr', 1e-05, 32 },
                     { 'Train/Samples/loss_scale', 65536, 32 } })
  mon:write_events({ { 'Train/Samples/train_loss', 0.5, 64 },
                     { 'Train/Samples/lr', 0.0001, 64.0 },
                     { 'Train/Samples/loss_scale', 32768.0, 64 },
                     { 'plain name', 7, 64 } })
  mon:close()
  local dir = out .. "/it's/"
  check_eq(read(dir .. 'Train_Samples_train_loss.csv'), 'step,train_loss\r\n32,2.3025850929940455\r\n64,0.5\r\n')
  check_eq(read(dir .. 'Train_Samples_lr.csv'), 'step,lr\r\n32,1e-05\r\n64,0.0001\r\n')
  check_eq(read(dir .. 'Train_Samples_loss_scale.csv'), 'step,loss_scale\r\n32,65536\r\n64,32768.0\r\n')
  check_eq(read(dir .. 'plain_name.csv'), 'step,plain name\r\n64,7\r\n')
  check_error(function() mon:write_events({}) end, 'csv_monitor: write_events: the monitor is closed')

  -- A new writer (a resumed run) appends, with its own header, as DeepSpeed's does.
  local again = csv.new{ output_path = out, job_name = "it's" }
  again:write_events({ { 'Train/Samples/lr', 0.001, 96 } })
  check_eq(read(dir .. 'Train_Samples_lr.csv'), 'step,lr\r\n32,1e-05\r\n64,0.0001\r\nstep,lr\r\n96,0.001\r\n')
end)

test('paths_as_deepspeed', function()
  check_eq(util.join('', 'DeepSpeedJobName'), 'DeepSpeedJobName')
  check_eq(util.join('runs', 'job'), 'runs/job')
  check_eq(util.join('runs/', 'job'), 'runs/job')
  check_eq(util.join('runs', '/abs/job'), '/abs/job')
  -- Defaults: job_name DeepSpeedJobName under output_path.
  local mon = monitor.from_config({ csv_monitor = { enabled = true, output_path = root .. '/deep/er' } })
  mon:write_events({ { 'x', 1.0, 1 } })
  check_eq(read(root .. '/deep/er/DeepSpeedJobName/x.csv'), 'step,x\r\n1,1.0\r\n')
end)

-- CRC32C and TFRecord --------------------------------------------------------------------

-- The test's own CRC32C: bit by bit, no table.
local function crc32c_bitwise(s)
  local crc = 0xffffffff
  for i = 1, #s do
    crc = crc ~ s:byte(i)
    for _ = 1, 8 do
      local lsb = crc & 1
      crc = crc >> 1
      if lsb == 1 then crc = crc ~ 0x82f63b78 end
    end
  end
  return crc ~ 0xffffffff
end

local function masked(s)
  local c = crc32c_bitwise(s)
  local rot = ((c >> 15) | (c << 17)) & 0xffffffff
  return (rot + 0xa282ead8) & 0xffffffff
end

test('crc32c_vectors', function()
  local ascending, descending = {}, {}
  for i = 0, 31 do
    ascending[#ascending + 1] = string.char(i)
    descending[#descending + 1] = string.char(31 - i)
  end
  -- "123456789" is the CRC catalogue's check value; the others are RFC 3720's (iSCSI).
  local vectors = {
    { '123456789', 0xe3069283 }, { ('\0'):rep(32), 0x8a9136aa }, { ('\255'):rep(32), 0x62a8ab43 },
    { table.concat(ascending), 0x46dd794e }, { table.concat(descending), 0x113fdb5c }, { '', 0 },
  }
  for _, v in ipairs(vectors) do
    check_eq(tensorboard.crc32c(v[1]), v[2], fmt('crc32c of %d bytes', #v[1]))
    check_eq(crc32c_bitwise(v[1]), v[2], fmt('the test\'s crc32c of %d bytes', #v[1]))
  end
  local s = ('the quick brown fox '):rep(13)
  check_eq(tensorboard.crc32c(s), crc32c_bitwise(s), 'crc32c of 260 bytes')
  check_eq(tensorboard.masked_crc(s), masked(s), 'masked crc')
end)

test('tfrecord_framing', function()
  for _, data in ipairs({ '', 'abc', ('\0\1\2\255'):rep(100) }) do
    local len = string.pack('<I8', #data)
    local want = len .. string.pack('<I4', masked(len)) .. data .. string.pack('<I4', masked(data))
    check_eq(tensorboard.record(data), want, fmt('record of %d bytes', #data))
  end
  -- The mask worked by hand on crc32c("123456789") = 0xe3069283: rotated right by 15
  -- it is 0x2507c60d, plus 0xa282ead8 (mod 2^32) 0xc78ab0e5.
  check_eq(masked('123456789'), 0xc78ab0e5, "the test's masked crc")
  check_eq(tensorboard.masked_crc('123456789'), 0xc78ab0e5, 'masked crc')
end)

-- The test's own reader --------------------------------------------------------------------

-- TFRecords of a file -> list of data strings; framing and both CRCs checked.
local function read_records(bytes)
  local out, pos = {}, 1
  while pos <= #bytes do
    assert(pos + 11 <= #bytes, 'truncated header at ' .. pos)
    local lenbytes = bytes:sub(pos, pos + 7)
    local len = unpack('<I8', lenbytes)
    assert(unpack('<I4', bytes, pos + 8) == masked(lenbytes), 'length crc at ' .. pos)
    local data = bytes:sub(pos + 12, pos + 11 + len)
    assert(#data == len, 'truncated data at ' .. pos)
    assert(unpack('<I4', bytes, pos + 12 + len) == masked(data), 'data crc at ' .. pos)
    out[#out + 1] = data
    pos = pos + 16 + len
  end
  return out
end

-- A protobuf message -> {[field] = {values...}}: varints as integers, fixed64 and
-- fixed32 as raw 8/4-byte strings, length-delimited as strings.
local function decode(msg)
  local fields, pos = {}, 1
  local function varint()
    local v, shift = 0, 0
    while true do
      local b = msg:byte(pos)
      assert(b, 'truncated varint')
      pos = pos + 1
      v = v | ((b & 0x7f) << shift)
      if b < 0x80 then return v end
      shift = shift + 7
    end
  end
  while pos <= #msg do
    local k = varint()
    local field, wire, v = k >> 3, k & 7, nil
    if wire == 0 then
      v = varint()
    elseif wire == 1 then
      v = msg:sub(pos, pos + 7); pos = pos + 8
    elseif wire == 5 then
      v = msg:sub(pos, pos + 3); pos = pos + 4
    elseif wire == 2 then
      local n = varint()
      v = msg:sub(pos, pos + n - 1); pos = pos + n
    else
      error('unexpected wire type ' .. wire)
    end
    fields[field] = fields[field] or {}
    table.insert(fields[field], v)
  end
  return fields
end

-- Event bytes -> {wall_time, step, file_version, scalars = {{tag, value}, ...}}.
local function parse_event(data)
  local f = decode(data)
  local e = { wall_time = unpack('<d', f[1][1]), step = f[2] and f[2][1] or 0,
              file_version = f[3] and f[3][1], scalars = {} }
  if f[5] then
    local summary = decode(f[5][1])
    for _, v in ipairs(summary[1] or {}) do
      local value = decode(v)
      e.scalars[#e.scalars + 1] = { value[1][1], unpack('<f', value[2][1]) }
    end
  end
  return e
end

local function f32(v) return (unpack('<f', string.pack('<f', v))) end

test('event_file_parsed_back', function()
  local out = root .. '/tb'
  local mon = monitor.from_config({ tensorboard = { enabled = true, output_path = out, job_name = 'run1' },
                                    csv_monitor = { enabled = false } }, { clock = clock })
  local path = mon.tensorboard.path
  local dir, name = path:match('^(.*)/([^/]*)$')
  check_eq(dir, out .. '/run1')
  check_eq(name, fmt('events.out.tfevents.1700000000.%s', util.hostname()))
  local written = {}
  for step = 1, 5 do
    local samples = step * 16
    local events = { { 'Train/Samples/train_loss', 2.5 / step, samples },
                     { 'Train/Samples/lr', 1e-3 * step, samples },
                     { 'Train/Samples/loss_scale', 2.0 ^ (17 - step), samples } }
    CLOCK = 1700000000.25 + step
    mon:write_events(events)
    for _, e in ipairs(events) do written[#written + 1] = e end
  end
  -- Flushed by write_events: the records are in the file before close.
  local records = read_records(read(path))
  check_eq(#records, 1 + #written, 'records before close')
  mon:close()
  mon:close()
  check_error(function() mon:write_events({}) end, 'tensorboard: write_events: the monitor is closed')

  records = read_records(read(path))
  check_eq(#records, 1 + #written, 'records')
  local first = parse_event(records[1])
  check_eq(first.file_version, 'brain.Event:2')
  check_eq(first.wall_time, 1700000000.25)
  check_eq(first.step, 0)
  check_eq(#first.scalars, 0)
  for i, e in ipairs(written) do
    local ev = parse_event(records[i + 1])
    check_eq(ev.file_version, nil)
    check_eq(ev.step, e[3], 'step of record ' .. i)
    check_eq(ev.wall_time, 1700000000.25 + (i - 1) // 3 + 1, 'wall time of record ' .. i)
    check_eq(#ev.scalars, 1)
    check_eq(ev.scalars[1][1], e[1], 'tag of record ' .. i)
    check_eq(ev.scalars[1][2], f32(e[2]), 'value of record ' .. i)
  end
  CLOCK = 1700000000.25

  -- A second writer in the same second gets its own file.
  local w2 = tensorboard.new{ output_path = out, job_name = 'run1', clock = clock }
  check_eq(w2.path, path .. '.1')
  w2:write_events({ { 'a', -1.5, 3 } })
  w2:close()
  local r2 = read_records(read(w2.path))
  check_eq(#r2, 2)
  local ev = parse_event(r2[2])
  check_eq(ev.scalars[1][1], 'a')
  check_eq(ev.scalars[1][2], -1.5)
  check_eq(ev.step, 3)
  -- A large step takes a multi-byte varint.
  local big = parse_event(tensorboard.event{ wall_time = 0, step = 2 ^ 40 + 5, tag = 't', value = 1 })
  check_eq(big.step, (1 << 40) + 5)
end)

-- Ranks and config ---------------------------------------------------------------------------

test('rank_nonzero_writes_nothing', function()
  local out = root .. '/rank1'
  local mon = monitor.from_config({ tensorboard = { enabled = true, output_path = out },
                                    csv_monitor = { enabled = true, output_path = out } }, { rank = 1 })
  check(mon.enabled, 'enabled on every rank')
  check_eq(#mon.writers, 0)
  mon:write_events({ { 'Train/Samples/lr', 0.1, 1 } })
  mon:close()
  check(not util.exists(out), 'rank 1 creates no directory')

  local off = monitor.from_config({ tensorboard = { enabled = false }, wandb = { enabled = false, project = 'p' } })
  check(not off.enabled, 'disabled')
  off:write_events({ { 'x', 1, 1 } })
  check_eq(#monitor.from_config({}).writers, 0)
end)

test('auto_takes_the_default', function()
  local out = root .. '/auto'
  local mon = monitor.from_config({ csv_monitor = { enabled = true, output_path = out, job_name = 'auto' } })
  mon:write_events({ { 'x', 0.5, 2 } })
  check_eq(read(out .. '/DeepSpeedJobName/x.csv'), 'step,x\r\n2,0.5\r\n')
end)

test('close_on_scope_exit', function()
  local out = root .. '/scoped'
  local path
  do
    local mon <close> = monitor.from_config({ tensorboard = { enabled = true, output_path = out } }, { clock = clock })
    path = mon.tensorboard.path
    mon:write_events({ { 'x', 1, 1 } })
  end
  check_eq(#read_records(read(path)), 2)
end)

test('config_errors', function()
  check_error(function() monitor.from_config({ wandb = { enabled = true } }) end,
              'wandb monitor is not available in zlua (no network service): disable it or use csv_monitor/tensorboard')
  check_error(function() monitor.from_config({ comet = { enabled = true } }) end,
              'comet monitor is not available in zlua (no network service)')
  check_error(function() monitor.from_config({ tensorboard = { enabled = true, outputpath = 'x' } }) end,
              "monitor: unknown key 'tensorboard.outputpath' (the keys of tensorboard: enabled, job_name, output_path)")
  check_error(function() monitor.from_config({ csv_monitor = { enabled = 'yes' } }) end,
              'monitor: csv_monitor.enabled must be a boolean, got "yes"')
  check_error(function() monitor.from_config({ csv_monitor = { enabled = true, output_path = 3 } }) end,
              'monitor: csv_monitor.output_path must be a string, got 3')
  check_error(function() monitor.from_config({ tensorboard = true }) end,
              'monitor: tensorboard must be a table (a JSON object), got true')
  check_error(function() monitor.from_config({ wandb = { team = 5 } }) end,
              'monitor: wandb.team must be a string, got 5')
  check_error(function() monitor.from_config('ds_config.json') end,
              'monitor.from_config: expected a config table, got string')
  check_error(function() monitor.from_config({}, { rank = -1 }) end,
              'monitor: rank must be a non-negative integer, got -1')
  -- A directory that cannot be made.
  local file = root .. '/a_file'
  io.open(file, 'w'):close()
  check_error(function() monitor.from_config({ csv_monitor = { enabled = true, output_path = file } }) end,
              "csv_monitor: cannot create the directory '" .. file .. "/DeepSpeedJobName'")
  check_error(function() tensorboard.new{ output_path = file, job_name = 'j' } end,
              "tensorboard: cannot create the directory '" .. file .. "/j'")
end)

test('event_errors', function()
  local mon = monitor.from_config({ tensorboard = { enabled = true, output_path = root .. '/bad' },
                                    csv_monitor = { enabled = true, output_path = root .. '/bad' } },
                                  { clock = clock })
  local cases = {
    { 'not a list', 'write_events: expected a list of events {{name, value, step}, ...}, got string' },
    { { 7 }, 'write_events: event 1 must be a table {name, value, step}, got number' },
    { { { 'ok', 1, 1 }, { nil, 1, 1 } }, 'write_events: event 2: the name must be a non-empty string, got nil' },
    { { { '', 1, 1 } }, "write_events: event 1: the name must be a non-empty string, got ''" },
    { { { 'loss', '0.5', 1 } }, "write_events: event 1 ('loss'): the value must be a number, got string" },
    { { { 'loss', 0.5, 1.5 } }, "write_events: event 1 ('loss'): the step must be an integer, got 1.5" },
    { { { 'loss', 0.5 } }, "write_events: event 1 ('loss'): the step must be an integer, got nil" },
  }
  for _, c in ipairs(cases) do
    check_error(function() mon:write_events(c[1]) end, 'tensorboard: ' .. c[2])
    check_error(function() mon.csv:write_events(c[1]) end, 'csv_monitor: ' .. c[2])
  end
  mon:close()
end)

os.execute('rm -rf ' .. q(root))
H.done()
