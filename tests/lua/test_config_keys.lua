-- Every DeepSpeed key answered: walks tests/data/deepspeed_keys.txt (each key of
-- DeepSpeed 0.16.5's config with a value to try) and checks zlua's answer against
-- the table in docs/config_keys.md:
--   refused      zlua.config raises an error naming the key (or the section's
--                enabled key that refuses the whole section), its value and
--                "not implemented" / "not supported";
--   noticed      the config loads with exactly one notice, "KEY = VALUE: WHY",
--                WHY being the table's text, and zlua.initialize prints it;
--   implemented  the config loads without a notice and, unless zlua.config
--                carries the key out itself, the engine reads the key (or walks
--                over its section) while it trains two steps, saves, loads and
--                writes the 16-bit model.
-- Then what the new answers do on one rank: the notices said once per process
-- and on rank 0 only, the vocabulary_size warning, timers.throughput.enabled.

local zl = require 'zlua'
local nn = require 'zlua.nn'
local data = require 'zlua.data'
local json = require 'zlua.json'
local config = require 'zlua.config'
local notices = require 'zlua.engine.notices'
local H = require 'harness'
local test, check, check_eq = H.test, H.check, H.check_eq

local fmt = string.format
local SRC = H.source_dir
local TMP = os.tmpname()
os.remove(TMP)
zl.core.mkdirs(TMP)

local function read_lines(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = line end
  return out
end

-- The key list: { path =, text = VALUE as written, value =, context =, by_config = }.
local function read_entries()
  local entries, count = {}, {}
  for n, line in ipairs(read_lines(SRC .. '/tests/data/deepspeed_keys.txt')) do
    if line:find('%S') and not line:find('^%s*#') then
      local f = {}
      for word in line:gmatch('%S+') do f[#f + 1] = word end
      local where = 'deepspeed_keys.txt:' .. n
      local function decode(text) return (json.decode(text:gsub('%$TMP', TMP), where)) end
      local e = { path = f[1], text = f[2], value = decode(f[2]), by_config = f[4] == 'config', where = where }
      if f[3] and f[3] ~= '-' then e.context = decode(f[3]) end
      entries[#entries + 1] = e
      count[e.path] = (count[e.path] or 0) + 1
    end
  end
  -- A path on several lines is answered value by value.
  for _, e in ipairs(entries) do e.id = count[e.path] > 1 and e.path .. ' = ' .. e.text or e.path end
  return entries
end

-- The docs' table: id -> { answer =, notes = }, the ids in order, and the
-- counts line ("Counts: 223 entries, ...").
local function read_docs()
  local rows, order, counts = {}, {}, nil
  for _, line in ipairs(read_lines(SRC .. '/docs/config_keys.md')) do
    local id, answer, notes = line:match('^| `([^`]+)` | (%a+) | (.*) |$')
    if id then
      check(rows[id] == nil, 'docs/config_keys.md lists ' .. id .. ' once')
      rows[id] = { answer = answer, notes = notes }
      order[#order + 1] = id
    end
    counts = counts or line:match('^Counts: .*')
  end
  return rows, order, counts
end

local function is_object(t) return type(t) == 'table' and getmetatable(t) == nil end

local function copy(v)
  if type(v) ~= 'table' or v == json.null then return v end
  local out = setmetatable({}, getmetatable(v))
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

local function merge(dst, src)
  for k, v in pairs(src) do
    if is_object(v) and is_object(dst[k]) then merge(dst[k], v) else dst[k] = copy(v) end
  end
  return dst
end

local function set(t, path, value)
  local parts = {}
  for p in path:gmatch('[^.]+') do parts[#parts + 1] = p end
  for i = 1, #parts - 1 do
    if not is_object(t[parts[i]]) then t[parts[i]] = {} end
    t = t[parts[i]]
  end
  t[parts[#parts]] = copy(value)
end

local function config_of(e)
  local t = { train_micro_batch_size_per_gpu = 2, optimizer = { type = 'Adam' } }
  if e.context then merge(t, e.context) end
  set(t, e.path, e.value)
  return t
end

-- The config as a table that records every key read (or walked over by pairs)
-- into reads, by its path.
local function tracked(t, path, reads)
  if type(t) ~= 'table' or t == json.null then return t end
  local function at(k) return path == '' and tostring(k) or path .. '.' .. tostring(k) end
  return setmetatable({}, {
    __index = function(_, k)
      reads[at(k)] = true
      return tracked(t[k], at(k), reads)
    end,
    __newindex = function(_, k, v) t[k] = v end,
    __len = function() return #t end,
    __pairs = function()
      return function(_, k)
        local nk, nv = next(t, k)
        if nk ~= nil then
          reads[at(nk)] = true
          return nk, tracked(nv, at(nk), reads)
        end
      end, nil, nil
    end,
  })
end

-- Trains the small model two optimizer steps under the config, saves, loads and
-- writes the 16-bit model; returns the keys read and what went to stderr (its
-- stdout, the step and memory lines, is dropped).
local function train(cfg_table)
  local reads = {}
  local load = config.load
  config.load = function(src, opts) return tracked(load(src, opts), '', reads) end
  local stderr, err, stdout, out = io.stderr, io.tmpfile(), io.stdout, io.tmpfile()
  io.stderr, io.stdout = err, out
  local ok, res = pcall(function()
    zl.manual_seed(5)
    local model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    local ds = data.TensorDataset(zl.randn(8, 4), zl.randn(8, 1))
    local e, _, loader = zl.initialize { model = model, config = cfg_table, training_data = ds }
    for x, y in loader() do
      e:backward(zl.mse_loss(e(x), y))
      e:step()
    end
    local dir = TMP .. '/ckpt'
    e:save_checkpoint(dir)
    e:load_checkpoint(dir)
    e:save_16bit_model(TMP .. '/model16')
    e:destroy()
    zl.core.remove_tree(dir)
    zl.core.remove_tree(TMP .. '/model16')
  end)
  config.load = load
  io.stderr, io.stdout = stderr, stdout
  out:close()
  err:seek('set')
  local said = err:read('a')
  err:close()
  return ok, res, reads, said
end

local function count_lines(text, prefix)
  local n = 0
  for line in text:gmatch('[^\n]+') do
    if line:sub(1, #prefix) == prefix then n = n + 1 end
  end
  return n
end

-- The section gate that refuses a key with its section ("comms_logger.enabled").
local function gate_of(e)
  local section = e.path:match('^([^.]+)%.')
  local c = section and e.context and e.context[section]
  return is_object(c) and c.enabled == true and section .. '.enabled' or nil
end

-- zlua's answer for entry e, checked as the header says; returns it.
local function answer(e, doc)
  local t = config_of(e)
  local ok, cfg = pcall(config.load, t, { warn = function() end })
  if not ok then
    local err = tostring(cfg)
    local gate = gate_of(e)
    local named = err:find(e.path, 1, true) ~= nil or (gate and err:find(gate .. ' = true', 1, true) ~= nil)
    check(named, e.id .. ': the error names the key: ' .. err)
    check(err:find('not implemented', 1, true) or err:find('not supported', 1, true),
      e.id .. ': the error says it is not implemented or supported: ' .. err)
    if type(e.value) ~= 'table' and err:find(e.path, 1, true) then
      check(err:find(e.path .. ' = ' .. e.text, 1, true) ~= nil, e.id .. ': the error shows the value: ' .. err)
    end
    return 'refused'
  end
  local line = e.path .. ' = ' .. e.text .. ': '
  local mine = count_lines(table.concat(cfg.notices, '\n'), line)
  check(#cfg.notices == mine and mine <= 1, e.id .. ': one notice at most, about this key: '
    .. table.concat(cfg.notices, ' | '))
  local trained, err, reads, said = train(t)
  check(trained, e.id .. ': trains, saves and loads: ' .. tostring(err))
  if mine == 1 then
    local why = config.NOTICED[e.path] and config.NOTICED[e.path].why
    check_eq(cfg.notices[1], line .. tostring(why), e.id .. ': the notice')
    if doc and doc.answer == 'noticed' then check_eq(doc.notes, why, e.id .. ": the docs' why") end
    check_eq(count_lines(said, 'zlua: note: ' .. line), 1, e.id .. ': zlua.initialize prints the notice')
    return 'noticed'
  end
  if not e.by_config then check(reads[e.path], e.id .. ': the engine reads the key') end
  return 'implemented'
end

test('every_key_answered', function()
  local entries = read_entries()
  local docs, order, counts_line = read_docs()
  check(#entries >= 200, 'the list holds every key of the reference: ' .. #entries)
  local counts, seen = { implemented = 0, noticed = 0, refused = 0 }, {}
  for _, e in ipairs(entries) do
    check(not seen[e.id], e.where .. ': ' .. e.id .. ' listed once')
    seen[e.id] = true
    local doc = docs[e.id]
    check(doc ~= nil, e.where .. ': docs/config_keys.md has a row for ' .. e.id)
    local got = answer(e, doc)
    counts[got] = counts[got] + 1
    if doc then check_eq(got, doc.answer, e.id .. ": zlua's answer against the docs") end
  end
  for _, id in ipairs(order) do check(seen[id], 'docs/config_keys.md: ' .. id .. ' is in the key list') end
  local summary = fmt('Counts: %d entries, %d implemented, %d noticed, %d refused.', #entries,
    counts.implemented, counts.noticed, counts.refused)
  print(summary)
  check_eq(counts_line, summary, "the docs' counts")
end)

test('notices_once_on_rank_0', function()
  local lines = {}
  local write = notices.write
  notices.write = function(l) lines[#lines + 1] = l end
  local t = { train_micro_batch_size_per_gpu = 2, optimizer = { type = 'Adam' },
    zero_optimization = { stage = 3, stage3_module_granularity_threshold = 7 } }
  for _ = 1, 2 do zl.initialize { model = nn.Linear(2, 1), config = t } end
  notices.say(config.load({ train_micro_batch_size_per_gpu = 2,
    zero_optimization = { round_robin_gradients = true, stage = 2 } }), 1)
  notices.write = write
  check_eq(#lines, 1, 'two engines, one line; none from rank 1')
  check_eq(lines[1], 'zlua: note: zero_optimization.stage3_module_granularity_threshold = 7: '
    .. config.NOTICED['zero_optimization.stage3_module_granularity_threshold'].why)
  -- The value zlua has anyway says nothing.
  local cfg = config.load({ train_micro_batch_size_per_gpu = 2, zero_optimization = { contiguous_gradients = true,
    offload_optimizer = { pin_memory = false } }, communication_data_type = 'fp32' })
  check_eq(#cfg.notices, 0, 'contiguous_gradients true, pin_memory false and fp32 collectives: no notice')
end)

test('vocabulary_size_warning', function()
  local warned = {}
  config.load({ train_micro_batch_size_per_gpu = 2, vocabulary_size = 50257 },
    { warn = function(m) warned[#warned + 1] = m end })
  check_eq(warned[1], 'config: vocabulary_size = 50257 is not a multiple of 8: matrix multiplies over the '
    .. 'vocabulary may run slower on a GPU (DeepSpeed warns the same)')
  warned = {}
  config.load({ train_micro_batch_size_per_gpu = 2, vocabulary_size = 50304 },
    { warn = function(m) warned[#warned + 1] = m end })
  check_eq(#warned, 0, 'a multiple of 8: no warning')
end)

-- What one step of a Linear(2, 1) SGD engine under the config's extra keys
-- writes to stdout.
local function one_step_stdout(extra)
  local cfg = { train_micro_batch_size_per_gpu = 1, optimizer = { type = 'SGD', params = { lr = 0.1 } } }
  for k, v in pairs(extra) do cfg[k] = v end
  local out, stdout = io.tmpfile(), io.stdout
  io.stdout = out
  local ok, err = pcall(function()
    local e = zl.initialize { model = nn.Linear(2, 1), config = cfg }
    e:backward(e(zl.ones(1, 2)):sum())
    e:step()
  end)
  io.stdout = stdout
  check(ok, tostring(err))
  out:seek('set')
  local text = out:read('a')
  out:close()
  return text
end

test('throughput_in_the_step_line', function()
  check(one_step_stdout({ steps_per_print = 1 }):find('^%[Rank 0%] step=1, skipped=0, lr=%[0%.1%], mom=%[0%], '
    .. 'loss=[%d.e+-]+, samples/s=[%d.]+\n$') ~= nil, 'by default the step line ends with samples/s')
  check(one_step_stdout({ steps_per_print = 1, timers = { throughput = { enabled = false } } }):find(
    '^%[Rank 0%] step=1, skipped=0, lr=%[0%.1%], mom=%[0%], loss=[%d.e+-]+\n$') ~= nil,
    'timers.throughput.enabled false: no samples/s')
end)

test('memory_breakdown', function()
  local labels = {}
  for line in one_step_stdout({ memory_breakdown = true }):gmatch('[^\n]+') do
    local label = line:match('^%[Rank 0%] (Engine %a+ %a+): allocated [%d.]+ MB %(params [%d.]+, grads [%d.]+, '
      .. 'optimizer [%d.]+, activations [%d.]+, comm [%d.]+, other [%d.]+%), peak [%d.]+ MB$')
    check(label ~= nil, 'a memory line: ' .. line)
    labels[#labels + 1] = label
  end
  check_eq(table.concat(labels, ', '), 'Engine before forward, Engine after forward, Engine before backward, '
    .. 'Engine after backward, Engine before step, Engine after step', "DeepSpeed's six points")
end)

zl.core.remove_tree(TMP)
H.done()
