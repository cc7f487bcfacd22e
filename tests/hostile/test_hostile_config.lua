-- Hostile input to configs, data files and the binding's file calls: NUL
-- bytes in paths and names (a JSON \u0000 cut by C), a folder, a FIFO or an
-- oversized file given as the config, lines and keys long enough to
-- make a quadratic parser take minutes, batch sizes whose product overflows.
-- Each: an error naming the key, file or value, within seconds.

package.path = (arg[0]:match('^(.*)/') or '.') .. '/?.lua;' .. package.path
local zl = require 'zlua'
local json = require 'zlua.json'
local config = require 'zlua.config'
local H = require 'harness'
local X = require 'hostile'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local function quiet() return { warn = function() end } end

test('nul_in_config_paths', function()
  local dir = X.dir('nul_cfg')
  -- another run's swap folder under the path the NUL would cut to: never touched
  local theirs = dir .. '/zlua_swap/optimizer/rank0'
  zl.core.mkdirs(theirs)
  X.write(dir .. '/zlua_swap/.zlua_swap', 'marker\n')
  X.write(dir .. '/zlua_swap/optimizer/.zlua_swap', 'marker\n')
  X.write(theirs .. '/.zlua_swap', 'marker\n')
  X.write(theirs .. '/keep.swp', 'their data')
  local cfg = X.TMP .. '/nul.json'
  X.write(cfg, '{\n  "train_micro_batch_size_per_gpu": 4,\n  "optimizer": {"type": "AdamW"},\n'
    .. '  "zero_optimization": {"stage": 2,\n    "offload_optimizer": {"device": "nvme", "nvme_path": "'
    .. dir .. '\\u0000/mine"}}\n}\n')
  local want = cfg .. ':5: zero_optimization.offload_optimizer.nvme_path holds a NUL byte (byte ' .. (#dir + 1)
  check_error(function() config.load(cfg, quiet()) end, want)
  zl.manual_seed(1)
  local nn = require 'zlua.nn'
  check_error(function() zl.initialize { model = nn.Linear(4, 2), config = cfg } end, want)
  check_eq(X.read(theirs .. '/keep.swp'), 'their data', 'the folder the cut path names is untouched')
  -- the same from the command line
  check_error(function()
    config.load({ train_micro_batch_size_per_gpu = 4, zero_optimization = { stage = 2,
      offload_optimizer = { device = 'nvme', nvme_path = '/tmp/x' } } }, { args = { nvme_path = dir .. '\0/mine' } })
  end, 'config.load: args.nvme_path must be a folder path')
  -- any string key: a monitor's output folder
  check_error(function()
    config.load({ train_batch_size = 4, tensorboard = { enabled = true, output_path = 'runs\0x' } }, quiet())
  end, 'tensorboard.output_path holds a NUL byte (byte 5 of "runs\\x00x")')
  check_error(function() config.load(cfg .. '\0.other', quiet()) end, 'config: the file name holds a NUL byte')
end)

test('nul_in_every_binding_path_and_name', function()
  local dir = X.dir('nul_bind')
  X.write(dir .. '/f', 'x')
  local cut = dir .. '/f\0/../../../elsewhere'
  local t = zl.ones(2)
  local calls = {
    { 'mkdirs', function() zl.core.mkdirs(cut) end },
    { 'remove_tree', function() zl.core.remove_tree(dir .. '\0/..') end },
    { 'rename', function() zl.core.rename(dir .. '/f', cut) end },
    { 'exchange', function() zl.core.exchange(cut, dir .. '/f') end },
    { 'exists', function() zl.core.exists(cut) end },
    { 'file_crc32', function() zl.core.file_crc32(cut) end },
    { 'read_file', function() zl.core.read_file(cut, 10) end },
    { 'write_file_atomic', function() zl.core.write_file_atomic(cut, 'x') end },
    { 'read_csv', function() zl.read_csv(cut) end },
    { 'read_idx', function() zl.core.read_idx(cut) end },
    { 'read_text', function() zl.core.read_text(cut) end },
    { 'read_tokens', function() zl.core.read_tokens(cut, 2) end },
    { 'read_cifar10', function() zl.core.read_cifar10(cut) end },
    { 'save_safetensors', function() zl.save_safetensors(cut, { t = t }) end },
    { 'load_safetensors', function() zl.load_safetensors(cut) end },
    { 'safetensors_open', function() zl.safetensors_open(cut) end },
    { 'safetensors_writer', function() zl.safetensors_writer(cut, { { name = 't', dtype = 'f32', shape = { 2 } } }) end },
  }
  for _, c in ipairs(calls) do
    local ok, err = pcall(c[2])
    err = tostring(err)
    check(not ok and err:find(c[1] .. ": the path '" .. dir, 1, true) and err:find("' is followed by a NUL byte (byte ", 1, true)
      and err:find('a path cannot hold one', 1, true), c[1] .. ': ' .. err)
  end
  check_eq(X.read(dir .. '/f'), 'x', 'the file the cut paths name is untouched')
  -- names written into a file: a tensor name or metadata cut short would save another name
  local f = dir .. '/names.safetensors'
  check_error(function() zl.save_safetensors(f, { ['a\0b'] = t }) end,
    "save_safetensors: the tensor name 'a' is followed by a NUL byte (byte 2 of 3)")
  check_error(function() zl.save_safetensors(f, { { 'a\0b', t } }) end, "the tensor name 'a' is followed by a NUL byte")
  check_error(function() zl.save_safetensors(f, { a = t }, { ['k\0'] = 'v' }) end,
    "save_safetensors: the metadata key 'k' is followed by a NUL byte")
  check_error(function() zl.save_safetensors(f, { a = t }, { k = 'v\0w' }) end,
    "save_safetensors: the metadata value 'v' is followed by a NUL byte")
  check_error(function() zl.safetensors_writer(f, { { name = 'x\0y', dtype = 'f32', shape = { 2 } } }) end,
    "safetensors_writer: the tensor name 'x' is followed by a NUL byte")
  check(not zl.core.exists(f), 'nothing was written')
  zl.save_safetensors(f, { a = t })
  local r = zl.safetensors_open(f)
  check_error(function() r:read('a\0b') end, "read: the tensor name 'a' is followed by a NUL byte")
  r:close()
end)

test('config_file_not_a_file', function()
  local dir = X.dir('cfg_kinds')
  local ok, err = X.within(10, 'folder as config', function() return config.load(dir, quiet()) end)
  check(not ok and tostring(err):find("config: cannot read '" .. dir .. "': it is a folder, not a regular file", 1, true),
    tostring(err))
  local nn = require 'zlua.nn'
  check_error(function() zl.initialize { model = nn.Linear(2, 2), config = dir } end, 'it is a folder, not a regular file')
  X.mkfifo(dir .. '/ds.json')
  ok, err = X.within(10, 'FIFO as config', function() return config.load(dir .. '/ds.json', quiet()) end)
  check(not ok and tostring(err):find("ds.json': it is a FIFO (named pipe), not a regular file", 1, true), tostring(err))
  local big = dir .. '/big.json'
  local f = assert(io.open(big, 'wb'))
  f:seek('set', 17 << 20)
  f:write('}')
  f:close()
  ok, err = X.within(10, 'oversized config', function() return config.load(big, quiet()) end)
  check(not ok and tostring(err):find("big.json' is 17825793 bytes, more than the 16777216", 1, true), tostring(err))
  ok, err = X.within(10, 'device as data', function() return zl.read_csv('/dev/zero') end)
  check(not ok and tostring(err):find("'/dev/zero': it is a character device, not a regular file", 1, true), tostring(err))
end)

test('monitor_files_not_files', function()
  local dir = X.dir('monitors')
  local csv = require 'zlua.monitor.csv'
  local tb = require 'zlua.monitor.tensorboard'
  local w = csv.new { output_path = dir, job_name = 'job' }
  X.mkfifo(dir .. '/job/Train_loss.csv')
  local ok, err = X.within(10, 'csv row into a FIFO', function() return w:write_events({ { 'Train/loss', 0.5, 1 } }) end)
  check(not ok and tostring(err):find("csv_monitor: write_events: '" .. dir .. "/job/Train_loss.csv' is a fifo, not a "
    .. 'regular file', 1, true), tostring(err))
  check_error(function() w:write_events({ { 'Train/a\0b', 0.5, 1 } }) end,
    "csv_monitor: write_events: event 1 ('Train/a\\0b'): the name holds a NUL byte")
  w:write_events({ { 'Train/ok', 0.5, 1 } })
  check_eq(X.read(dir .. '/job/Train_ok.csv'), 'step,ok\r\n1,0.5\r\n', 'a regular row still goes in')
  X.mkfifo(dir .. '/runs')
  ok, err = X.within(10, 'tensorboard under a FIFO', function() return tb.new { output_path = dir .. '/runs' } end)
  check(not ok and tostring(err):find("cannot create the directory '" .. dir .. "/runs/DeepSpeedJobName'", 1, true),
    tostring(err))
end)

test('parsers_are_linear', function()
  -- a 300 KB config on one line: the column of each value is not counted from the line's start
  local parts = {}
  for i = 1, 20000 do parts[i] = '{"a":' .. i .. '}' end
  local text = '{"train_batch_size": 8, "x": [' .. table.concat(parts, ',') .. ']}'
  check(#text > 200000, 'the line is long')
  local ok, v = X.within(5, 'a 300 KB line', function() return json.decode(text) end)
  check(ok and #v.x == 20000 and v.x[20000].a == 20000, 'decoded')
  ok = X.within(5, 'a 300 KB config line', function() return config.parse(text, quiet()) end)
  check(ok, 'the config parses')
  -- an error at the end of it still names the column
  ok, v = X.within(5, 'an error at column 300000', function() return json.decode(text .. ' x', 'long.json') end)
  check(not ok and tostring(v):find('long.json:1:' .. (#text + 2) .. ': unexpected', 1, true), tostring(v))
  -- a 100 KB unknown key: the hint for it is not an edit distance of 100 KB x every name
  local key = string.rep('k', 100000)
  local warned
  ok = X.within(5, 'a 100 KB unknown key', function()
    return config.load({ train_batch_size = 8, [key] = 1 }, { warn = function(m) warned = m end })
  end)
  check(ok and warned and warned:find('unknown key kkkk', 1, true), 'the key is warned about')
  ok, v = X.within(5, 'a 100 KB unknown key in a strict section', function()
    return config.load({ train_batch_size = 8, zero_optimization = { [key] = 1 } }, quiet())
  end)
  check(not ok and tostring(v):find('unknown key zero_optimization.kkkk', 1, true), tostring(v))
  -- a 100 KB optimizer type
  ok, v = X.within(5, 'a 100 KB optimizer type', function()
    return config.load({ train_batch_size = 8, optimizer = { type = key } }, quiet())
  end)
  check(not ok, 'refused')
end)

test('batch_products_checked', function()
  local big = (1 << 62) + 1
  check_error(function()
    config.load({ train_micro_batch_size_per_gpu = 1 << 62, gradient_accumulation_steps = 4 }, quiet())
  end, 'train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size = 4611686018427387904 * 4 * 1 '
    .. 'does not fit a 64-bit integer')
  -- wrapped, (2^62 + 1) * 4 is 4: a triple that passed the check before
  check_error(function()
    config.load({ train_batch_size = 4, train_micro_batch_size_per_gpu = big, gradient_accumulation_steps = 4 }, quiet())
  end, '4611686018427387905 * 4 * 1 does not fit a 64-bit integer')
  check_error(function()
    config.load({ train_micro_batch_size_per_gpu = 1 << 40 }, { world_size = 1 << 30, warn = function() end })
  end, '1099511627776 * 1 * 1073741824 does not fit')
  check_error(function()
    config.load({ train_batch_size = 'auto' }, { world_size = 4, warn = function() end,
      args = { per_device_train_batch_size = 1 << 61, gradient_accumulation_steps = 8 } })
  end, '2305843009213693952 * 8 * 4 does not fit')
  local c = config.load({ train_micro_batch_size_per_gpu = 1 << 20, gradient_accumulation_steps = 1 << 20 },
    { world_size = 1 << 20, warn = function() end })
  check_eq(c.train_batch_size, 1 << 60, 'a large product that fits is kept')
end)

H.done()
