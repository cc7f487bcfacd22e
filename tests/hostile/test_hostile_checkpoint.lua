-- Hostile input to checkpoints: tags, client states and names a
-- save must refuse before it writes anything; saves killed at every stage;
-- the temporaries they leave, swept by the next save or load (and only
-- they); `latest` and engine.json damaged in every field with a valid CRC;
-- FIFOs, device files and links where the checkpoint's files belong. Each
-- time: an error naming the thing at fault, within seconds, and the previous
-- checkpoint still loads bit for bit.

package.path = (arg[0]:match('^(.*)/') or '.') .. '/?.lua;' .. package.path
local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local X = require 'hostile'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

-- A folder holding the checkpoint 'good' of engine(1, 2 steps) as `latest`, and
-- the fingerprint that loading it must give.
local function with_good(name)
  local dir = X.dir(name)
  local e, x, y = X.engine(1, 2)
  e:save_checkpoint(dir, 'good', { epoch = 4 })
  local e2 = X.engine(9, 0)
  e2:load_checkpoint(dir, 'good')
  return dir, X.fingerprint(e2, x, y), x, y
end

-- The previous checkpoint is untouched: `latest` names it and it loads to the same bits.
local function still_good(dir, want, x, y, what)
  check_eq(X.read(dir .. '/latest'), 'good', what .. ': latest still names the previous checkpoint')
  local e = X.engine(7, 0)
  local ok, path, client = pcall(e.load_checkpoint, e, dir)
  check(ok and path == dir .. '/good' and client.epoch == 4, what .. ': the previous checkpoint loads: ' .. tostring(path))
  if ok then check_eq(X.fingerprint(e, x, y), want, what .. ': bit for bit') end
end

test('refused_before_anything_is_written', function()
  local dir, want, x, y = with_good('refused')
  local e = X.engine(2, 1)
  local cases = {
    { 'client_state value not UTF-8', nil, { note = 'ab\255' },
      'client_state.note is "ab\\xFF", which is not valid UTF-8' },
    { 'client_state key not UTF-8', nil, { ['k\254'] = 1 }, 'has the key "k\\xFE", which is not valid UTF-8' },
    { 'tag not UTF-8', 'step\255', nil, 'tag "step\\xFF" is not valid UTF-8' },
    { 'tag with a NUL', '\0', nil, 'tag "\\x00" holds a NUL byte (byte 1)' },
    { 'tag with a NUL inside', 'good\0x', nil, 'holds a NUL byte (byte 5)' },
    { 'tag ..', '..', nil, 'tag ".." starts with "."' },
    { 'tag with a newline', 'a\nb', nil, 'holds a control character' },
    { 'tag with a trailing space', 'a ', nil, 'starts or ends with a space' },
    { 'tag too long', string.rep('t', 201), nil, 'is 201 bytes long; a tag is at most 200' },
  }
  for _, c in ipairs(cases) do
    local ok, err = X.within(10, c[1], function() return e:save_checkpoint(dir, c[2], c[3]) end)
    check(not ok and tostring(err):find(c[4], 1, true), c[1] .. ': ' .. tostring(err))
    still_good(dir, want, x, y, c[1])
  end
  -- a dir holding a NUL would name another folder
  check_error(function() e:save_checkpoint(dir .. '\0/elsewhere', 't') end, 'holds a NUL byte (byte ' .. (#dir + 1) .. ')')
  check_error(function() e:load_checkpoint(dir .. '\0/elsewhere') end, 'holds a NUL byte')
  -- a parameter name that engine.json cannot hold: refused before the model is written
  zl.manual_seed(3)
  local m = nn.Module:extend('Odd')
  function m:__init() self['w\255'] = nn.Linear(4, 2) end
  local eo = zl.initialize { model = m(), config = { train_micro_batch_size_per_gpu = 4,
    optimizer = { type = 'AdamW' } } }
  local ok, err = pcall(eo.save_checkpoint, eo, dir, 'odd')
  check(not ok and tostring(err):find('engine.json cannot hold the state', 1, true)
    and tostring(err):find('w\\xFF.weight', 1, true), 'a name that is not UTF-8 is named: ' .. tostring(err))
  check(not zl.core.exists(dir .. '/odd'), 'nothing of it was written')
  still_good(dir, want, x, y, 'a name not UTF-8')
  check_eq(#X.entries(dir, '.'), 0, 'no temporary folder is left')
end)

test('a_config_file_name_not_utf8_does_not_stop_saves', function()
  local dir = X.dir('cfgname')
  local cfg = dir .. '/ds\255.json'
  X.write(cfg, '{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW"}}')
  zl.manual_seed(1)
  local e = zl.initialize { model = nn.Linear(4, 2), config = cfg }
  e:save_checkpoint(dir, 'one')
  local e2 = zl.initialize { model = nn.Linear(4, 2), config = cfg }
  local path = e2:load_checkpoint(dir)
  check_eq(path, dir .. '/one', 'saved and loaded')
end)

test('what_saves_loads_deep_client_state', function()
  local dir, want, x, y = with_good('deep')
  local e = X.engine(2, 1)
  local function nest(n)
    local root = {}
    local t = root
    for _ = 2, n do t.a = {}; t = t.a end
    return root
  end
  -- 199 levels under engine.json's object: saves, and loads back whole
  e:save_checkpoint(dir, 'deep199', nest(199), { save_latest = false })
  local e2 = X.engine(5, 0)
  local _, client = e2:load_checkpoint(dir, 'deep199')
  local depth, t = 0, client
  while type(t) == 'table' do depth, t = depth + 1, t.a end
  check_eq(depth, 199, 'the client state comes back 199 levels deep')
  local ok, err = X.within(10, 'deep', function() return e:save_checkpoint(dir, 'deep200', nest(200)) end)
  check(not ok and tostring(err):find('nests tables 200 deep; client_state holds at most 199 levels', 1, true),
    'one level deeper is refused: ' .. tostring(err))
  check(not zl.core.exists(dir .. '/deep200'), 'and nothing is written')
  still_good(dir, want, x, y, 'deep client_state')
end)

test('latest_is_checked', function()
  local dir, want, x, y = with_good('latest')
  local elsewhere = X.dir('elsewhere')
  X.engine(4, 1):save_checkpoint(elsewhere, 'outside')
  local e = X.engine(6, 0)
  local cases = {
    { '../elsewhere/outside', 'the tag in ' .. dir .. '/latest "../elsewhere/outside" holds "/"' },
    { '..', 'the tag in ' .. dir .. '/latest ".." starts with "."' },
    { 'go\0od', 'holds a NUL byte (byte 3)' },
    { string.rep('x', 2000), dir .. "/latest' is 2000 bytes, more than the 1024" },
    { '', 'the tag in ' .. dir .. '/latest "" is empty' },
  }
  for _, c in ipairs(cases) do
    X.write(dir .. '/latest', c[1])
    local ok, err = X.within(10, 'latest ' .. c[2], function() return e:load_checkpoint(dir) end)
    check(not ok and tostring(err):find(c[2], 1, true), 'latest ' .. c[2] .. ': ' .. tostring(err))
  end
  -- a link, a FIFO, a folder in place of latest: named, never followed or waited on
  os.remove(dir .. '/latest')
  X.sh(string.format('ln -s %s %s', H.quote(elsewhere .. '/latest'), H.quote(dir .. '/latest')))
  local ok, err = X.within(10, 'latest link', function() return e:load_checkpoint(dir) end)
  check(not ok and tostring(err):find("latest': it is a symbolic link, not a regular file", 1, true), tostring(err))
  os.remove(dir .. '/latest')
  X.mkfifo(dir .. '/latest')
  ok, err = X.within(10, 'latest FIFO', function() return e:load_checkpoint(dir) end)
  check(not ok and tostring(err):find("latest': it is a FIFO (named pipe), not a regular file", 1, true), tostring(err))
  os.remove(dir .. '/latest')
  -- the tag folder itself a link to a checkpoint elsewhere
  X.sh(string.format('ln -s %s %s', H.quote(elsewhere .. '/outside'), H.quote(dir .. '/linked')))
  check_error(function() e:load_checkpoint(dir, 'linked') end, dir .. '/linked is a link, not a checkpoint folder')
  X.write(dir .. '/latest', 'good')
  still_good(dir, want, x, y, 'latest')
end)

-- A copy of the checkpoint 'good' as 'bad', rewritten by fn; loading it must
-- fail naming `needle`, leave the engine as it was, and leave 'good' loadable.
local function refused(dir, want, x, y, fn, needle, what)
  zl.core.remove_tree(dir .. '/bad')
  X.sh(string.format('cp -r %s %s', H.quote(dir .. '/good'), H.quote(dir .. '/bad')))
  fn(dir .. '/bad')
  local e = X.engine(8, 0)
  local before = X.fingerprint(X.engine(8, 0), x, y)
  local ok, err = X.within(10, what, function() return e:load_checkpoint(dir, 'bad') end)
  check(not ok and tostring(err):find(needle, 1, true), what .. ': ' .. tostring(err))
  check_eq(X.fingerprint(e, x, y), before, what .. ': the engine is as it was')
  still_good(dir, want, x, y, what)
end

test('engine_json_fields_checked', function()
  local dir, want, x, y = with_good('fields')
  local j = dir .. '/bad/engine.json: '
  local function set(fn) return function(p) X.rewrite_json(p, fn) end end
  local cases = {
    { set(function(s) s.manifest = require('zlua.json').null end), j .. 'manifest is null', 'manifest null' },
    { set(function(s) s.manifest = nil end), j .. 'manifest is missing', 'manifest missing' },
    { set(function(s) s.manifest['../../../../../../dev/zero'] = { crc32 = 0, bytes = 0 } end),
      j .. 'manifest lists "../../../../../../dev/zero", which is no file of this checkpoint', 'manifest ../dev/zero' },
    { set(function(s) s.manifest['optim_rank0.safetensors'] = nil end),
      j .. 'manifest does not list optim_rank0.safetensors', 'manifest short' },
    { set(function(s) s.optimizer.zero.partitions = 1 << 62 end),
      j .. 'optimizer.zero.partitions is 4611686018427387904', 'partitions 2^62' },
    { set(function(s) -- consistent with itself: each chunk length recomputed for 5 partitions
      s.optimizer.zero.partitions = 5
      for _, p in ipairs(s.optimizer.zero.params) do p.k = ((p.numel + 4) // 5 + 15) // 16 * 16 end
    end),
      j .. 'optimizer.zero.partitions is 5, but the manifest lists 2 files', 'partitions beyond the files' },
    { set(function(s) s.optimizer.state['1'].step = -1 end), j .. 'optimizer.state.1.step is -1, outside 0..2', 'step < 0' },
    { set(function(s) s.optimizer.state['1'].step = 1 << 40 end), 'optimizer.state.1.step is 1099511627776, outside 0..2',
      'step > global_steps' },
    { set(function(s) s.optimizer.state['1'].step = 'two' end), j .. 'optimizer.state.1.step must be an integer, got string',
      'step a string' },
    { set(function(s) s.optimizer.state['1'].exp_avg = 5 end), j .. 'optimizer.state.1 holds "exp_avg"', 'a scalar posing as a tensor' },
    { set(function(s) s.optimizer.state['99'] = { step = 1 } end), j .. 'optimizer.state has the key "99", which names no parameter',
      'state of no parameter' },
    { set(function(s) s.optimizer.param_groups = 3 end), j .. 'optimizer.param_groups must be a list, got number', 'groups a number' },
    { set(function(s) s.optimizer.param_groups[1].lr = {} end), j .. 'optimizer.param_groups[1].lr must be a list, got an object',
      'lr an object' },
    { set(function(s) s.optimizer.param_groups[1].lr = setmetatable({ 1 }, require('zlua.json').array) end),
      'engine.json: optimizer.param_groups[1].lr is a list of 1, where the AdamW optimizer has number', 'lr a list' },
    { set(function(s) s.optimizer.param_groups[1].betas = { 0.9 } end),
      'engine.json: optimizer.param_groups[1].betas is a list of 1, where the AdamW optimizer has a list of 2', 'betas short' },
    { set(function(s) s.optimizer.param_groups[1].momentum = 0.9 end),
      'engine.json: optimizer.param_groups[1].momentum is no hyperparameter of the AdamW optimizer', 'foreign hyperparameter' },
    { set(function(s) s.optimizer.zero.params[1].numel = 7 end), j .. 'optimizer.zero.params[1].numel is 7, but its shape holds 32',
      'numel' },
    { set(function(s) s.optimizer.zero.params[1].k = 0 end), j .. 'optimizer.zero.params[1].k is 0', 'chunk length 0' },
    { set(function(s) s.optimizer.zero.params[1].group = 5 end), j .. 'optimizer.zero.params[1].group is 5, outside 1..1', 'group' },
    { set(function(s) s.optimizer.tensor_keys = { '../x' } end), j .. 'optimizer.tensor_keys[1] is "../x", not a state name',
      'tensor key' },
    { set(function(s) s.global_steps = '7' end), j .. 'global_steps must be an integer, got string', 'counter a string' },
    { set(function(s) s.skipped_steps = 3 end), j .. 'skipped_steps is 3, outside 0..2', 'more skipped than taken' },
    { set(function(s) s.rng[1] = nil end), j .. 'rng lists 0 ranks, the checkpoint has 1', 'rng short' },
    { set(function(s) s.lr_scheduler = 'x' end), j .. 'lr_scheduler must be an object, got string', 'scheduler' },
    { set(function(s) s.optimizer.type = 'SGD' end), 'holds the state of a SGD optimizer; this engine has AdamW', 'type' },
    { set(function(s) s.format = 'other' end), 'engine.json is not a zlua checkpoint (format "other"', 'format' },
    { function(p) X.write(p .. '/engine.json', '{"format": ') end, 'engine.json is damaged (its CRC-32', 'cut' },
  }
  for _, c in ipairs(cases) do refused(dir, want, x, y, c[1], c[2], c[3]) end
end)

test('engine_json_oversized_and_files_not_regular', function()
  local dir, want, x, y = with_good('kinds')
  local bad = dir .. '/bad/'
  local cases = {
    { function(p) -- a sparse file: its size is refused before a byte is read
      local f = assert(io.open(p .. '/engine.json', 'wb'))
      f:seek('set', (64 << 20) + 10)
      f:write('x')
      f:close()
    end, bad .. "engine.json' is 67108875 bytes, more than the 67108864", 'engine.json oversized' },
    { function(p) os.remove(p .. '/engine.json'); X.mkfifo(p .. '/engine.json') end,
      bad .. "engine.json': it is a FIFO (named pipe), not a regular file", 'engine.json a FIFO' },
    { function(p) os.remove(p .. '/engine.json.crc32'); X.sh('ln -s /dev/zero ' .. H.quote(p .. '/engine.json.crc32')) end,
      bad .. "engine.json.crc32': it is a symbolic link, not a regular file", 'crc file a link to /dev/zero' },
    { function(p) os.remove(p .. '/model.safetensors'); X.mkfifo(p .. '/model.safetensors') end,
      bad .. "model.safetensors': it is a FIFO (named pipe), not a regular file", 'model a FIFO' },
    { function(p)
      os.remove(p .. '/model.safetensors')
      X.sh(string.format('ln -s /dev/zero %s', H.quote(p .. '/model.safetensors')))
    end, bad .. "model.safetensors': it is a symbolic link, not a regular file", 'model a link to /dev/zero' },
    { function(p)
      os.remove(p .. '/optim_rank0.safetensors')
      X.sh(string.format('ln -s ../good/optim_rank0.safetensors %s', H.quote(p .. '/optim_rank0.safetensors')))
    end, bad .. "optim_rank0.safetensors': it is a symbolic link, not a regular file", 'shard a link' },
    { function(p) os.remove(p .. '/model.safetensors') end, bad .. 'model.safetensors is missing', 'model missing' },
    { function(p) os.remove(p .. '/engine.json') end, bad .. 'engine.json is missing', 'engine.json missing' },
  }
  for _, c in ipairs(cases) do refused(dir, want, x, y, c[1], c[2], c[3]) end
end)

test('scheduler_and_scaler_checked_before_anything_changes', function()
  local dir = X.dir('scaler')
  local fp16 = { fp16 = { enabled = true, initial_scale_power = 8 },
    scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 4 } } }
  local e, x, y = X.engine(1, 2, fp16)
  e:save_checkpoint(dir, 'good', { epoch = 4 })
  local e2 = X.engine(9, 0, fp16)
  e2:load_checkpoint(dir, 'good')
  local want = X.fingerprint(e2, x, y)
  local j = dir .. '/bad/engine.json: '
  local cases = {
    { function(s) s.loss_scaler.cur_scale = 0 end, j .. 'loss_scaler.cur_scale must be a finite number > 0, got 0' },
    { function(s) s.loss_scaler.cur_hysteresis = 0 end, j .. 'loss_scaler.cur_hysteresis is 0, outside 1..' },
    { function(s) s.loss_scaler.last_overflow_iter = s.loss_scaler.cur_iter end, j .. 'loss_scaler.last_overflow_iter is' },
    { function(s) s.loss_scaler = nil; s.loss_scaler = 'x' end, j .. 'loss_scaler must be an object, got string' },
    { function(s) s.lr_scheduler.last_batch_iteration = -5 end, j .. 'lr_scheduler.last_batch_iteration is -5, outside -1..' },
  }
  for i, c in ipairs(cases) do
    zl.core.remove_tree(dir .. '/bad')
    X.sh(string.format('cp -r %s %s', H.quote(dir .. '/good'), H.quote(dir .. '/bad')))
    X.rewrite_json(dir .. '/bad', c[1])
    local e3 = X.engine(8, 0, fp16)
    local before = X.fingerprint(X.engine(8, 0, fp16), x, y)
    check_error(function() e3:load_checkpoint(dir, 'bad') end, c[2])
    check_eq(X.fingerprint(e3, x, y), before, 'case ' .. i .. ': the engine is as it was')
  end
  local e4 = X.engine(7, 0, fp16)
  e4:load_checkpoint(dir)
  check_eq(X.fingerprint(e4, x, y), want, 'the good checkpoint still loads bit for bit')
end)

test('shards_checked_before_anything_changes', function()
  local dir, want, x, y = with_good('shards')
  -- a shard that lacks a chunk engine.json promises, its manifest entry made to match
  local function without(p, drop)
    local f = p .. '/optim_rank0.safetensors'
    local t = zl.load_safetensors(f)
    t[drop] = nil
    os.remove(f)
    zl.save_safetensors(f, t)
    local crc, bytes = zl.core.file_crc32(f)
    X.rewrite_json(p, function(s) s.manifest['optim_rank0.safetensors'] = { crc32 = crc, bytes = bytes } end)
  end
  refused(dir, want, x, y, function(p) without(p, 'state.3.exp_avg_sq') end,
    dir .. '/bad: optim_rank0.safetensors should hold state.3.exp_avg_sq, f32 of 16 elements (3.weight), and has no such tensor',
    'a moment missing')
  refused(dir, want, x, y, function(p) without(p, 'param.1') end,
    'optim_rank0.safetensors should hold param.1, f32 of 32 elements', 'a master missing')
end)

test('internal_errors_name_the_checkpoint', function()
  local dir = X.dir('internal')
  local sched = { scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 4 } } }
  X.engine(3, 1, sched):save_checkpoint(dir, 'sched')
  -- an error of Lua's own from below the checks (here a stand-in) gets the folder it came from
  local e = X.engine(3, 0, sched)
  e.lr_scheduler.load_state_dict = function() error("attempt to index a nil value (field 'x')", 0) end
  check_error(function() e:load_checkpoint(dir) end,
    'load_checkpoint: ' .. dir .. "/sched: attempt to index a nil value (field 'x')")
end)

test('stale_temporaries_swept_and_only_they', function()
  local dir = X.dir('sweep')
  local host = X.read('/proc/sys/kernel/hostname'):gsub('%s+$', '')
  -- a pid that no longer runs: a child that has exited
  local p = io.popen('sh -c "echo \\$\\$"')
  local dead = tonumber(p:read('l'))
  p:close()
  local function temp(name, marker)
    zl.core.mkdirs(dir .. '/' .. name)
    X.write(dir .. '/' .. name .. '/model.safetensors', 'partial')
    if marker then X.write(dir .. '/' .. name .. '.owner', marker) end
  end
  temp('.killed.tmp-' .. dead, string.format('zlua-temp %s %d\n', host, dead))
  X.write(dir .. '/.folder-gone.tmp-' .. dead .. '.owner', string.format('zlua-temp %s %d\n', host, dead))
  temp('.other-host.tmp-' .. dead, string.format('zlua-temp some-other-host %d\n', dead))
  temp('.running.tmp-1', string.format('zlua-temp %s %d\n', host, zl.core.getpid()))
  temp('.unmarked.tmp-' .. dead, nil)
  temp('not-hidden.tmp-' .. dead, string.format('zlua-temp %s %d\n', host, dead))
  temp('.garbled.tmp-' .. dead, 'zlua-temp\n')
  local e, x, y = X.engine(1, 1)
  e:save_checkpoint(dir, 'one')
  check(not zl.core.exists(dir .. '/.killed.tmp-' .. dead) and not zl.core.exists(dir .. '/.killed.tmp-' .. dead .. '.owner'),
    'a killed save of this host is swept by the next save, marker and all')
  check(not zl.core.exists(dir .. '/.folder-gone.tmp-' .. dead .. '.owner'), 'a marker whose folder is gone is swept')
  for _, kept in ipairs({ '.other-host.tmp-' .. dead, '.running.tmp-1', '.unmarked.tmp-' .. dead,
    'not-hidden.tmp-' .. dead, '.garbled.tmp-' .. dead }) do
    check(zl.core.exists(dir .. '/' .. kept .. '/model.safetensors'), kept .. ' is left alone')
    check(kept == '.unmarked.tmp-' .. dead or zl.core.exists(dir .. '/' .. kept .. '.owner'), kept .. ': its marker too')
  end
  -- and by the next load
  temp('.killed2.tmp-' .. dead, string.format('zlua-temp %s %d\n', host, dead))
  local e2 = X.engine(2, 0)
  e2:load_checkpoint(dir)
  check(not zl.core.exists(dir .. '/.killed2.tmp-' .. dead), 'a killed save of this host is swept by the next load')
  check_eq(X.fingerprint(e2, x, y), (function()
    local e3 = X.engine(4, 0)
    e3:load_checkpoint(dir, 'one')
    return X.fingerprint(e3, x, y)
  end)(), 'the checkpoint itself is untouched')
end)

test('zero_to_fp32_checks_what_load_checks', function()
  local dir = with_good('z2f')
  local script = H.source_dir .. '/scripts/zero_to_fp32.lua'
  local out = X.TMP .. '/z2f.safetensors'
  local function z2f(what, needle, ...)
    os.remove(out)
    local args = { ... }
    local ok, status, text = X.within(20, what, function() return H.run_script(script, dir, out, table.unpack(args)) end)
    check(ok and status == 1 and text:find(needle, 1, true), what .. ': ' .. tostring(text))
    check(not zl.core.exists(out), what .. ': nothing written')
  end
  local status, text = H.run_script(script, dir, out)
  check(status == 0 and text:find('4 tensors', 1, true), 'a good checkpoint converts: ' .. text)
  X.sh(string.format('cp -r %s %s', H.quote(dir .. '/good'), H.quote(dir .. '/bad')))
  X.rewrite_json(dir .. '/bad', function(st) st.optimizer.zero.partitions = 1 << 62 end)
  z2f('2^62 partitions', 'engine.json: optimizer.zero.partitions is 4611686018427387904', '-t', 'bad')
  zl.core.remove_tree(dir .. '/bad')
  X.sh(string.format('cp -r %s %s', H.quote(dir .. '/good'), H.quote(dir .. '/bad')))
  local f = assert(io.open(dir .. '/bad/optim_rank0.safetensors', 'r+b'))
  f:seek('end', -4)
  f:write('\255\255\255\255')
  f:close()
  z2f('a damaged shard', dir .. '/bad/optim_rank0.safetensors is damaged (CRC-32', '-t', 'bad')
  X.rewrite_json(dir .. '/bad', function(st) st.manifest = require('zlua.json').null end)
  z2f('manifest null', 'engine.json: manifest is null', '-t', 'bad')
  z2f('a tag outside', 'tag "../elsewhere" holds "/"', '-t', '../elsewhere')
  X.write(dir .. '/latest', '../../etc')
  z2f('latest outside', 'the tag in ' .. dir .. '/latest "../../etc" holds "/"')
  os.remove(dir .. '/latest')
  X.mkfifo(dir .. '/latest')
  z2f('latest a FIFO', "latest': it is a FIFO (named pipe), not a regular file")
end)

-- The child: engine(2, 3 steps) saves DIR/TAG, killed (SIGKILL) by the engine
-- just before its Nth call into the file system (zl_fs_kill_after: every
-- mkdirs, rename, exchange, atomic write, read, CRC, temporary mark or sweep,
-- and each safetensors writer call); with N beyond the last it saves and
-- prints the count.
local CHILD = [[
package.path = %q .. '/?.lua;' .. package.path
local zl = require 'zlua'
local X = require 'hostile'
local dir, tag, kill_at = arg[1], arg[2], tonumber(arg[3])
local e = X.engine(2, 3)
local base = zl.core.fs_calls()
zl.core.fs_kill_after(kill_at)
e:save_checkpoint(dir, tag, { by = 'child' })
print('calls ' .. zl.core.fs_calls() - base)
]]

test('killed_at_every_stage_of_the_save', function()
  local pristine, want, x, y = with_good('kill_pristine')
  local e_new = X.engine(2, 3)
  local dir0 = X.dir('kill_new')
  e_new:save_checkpoint(dir0, 'new', { by = 'child' })
  local e_chk = X.engine(11, 0)
  e_chk:load_checkpoint(dir0, 'new')
  local want_new = X.fingerprint(e_chk, x, y)
  local script = X.TMP .. '/kill_child.lua'
  X.write(script, string.format(CHILD, (arg[0]:match('^(.*)/') or '.')))
  local dir = X.TMP .. '/kill'
  local function run(tag, at)
    zl.core.remove_tree(dir)
    X.sh(string.format('cp -r %s %s', H.quote(pristine), H.quote(dir)))
    local _, out = H.run_script(script, dir, tag, tostring(at))
    return out
  end
  local out = run('new', 1 << 30)
  local calls = tonumber(out:match('calls (%d+)'))
  check(calls and calls >= 10, 'the child counts its file-system calls: ' .. out)
  for _, tag in ipairs({ 'new', 'good' }) do
    for at = 1, calls or 0 do
      local what = string.format('save of %s killed before call %d of %d', tag, at, calls)
      run(tag, at)
      local e = X.engine(12, 0)
      local ok, path, client = X.within(20, what, function() return e:load_checkpoint(dir) end)
      check(ok, what .. ': latest loads: ' .. tostring(path))
      if ok then
        local fp = X.fingerprint(e, x, y)
        if client.by == 'child' then
          check(fp == want_new, what .. ': the new checkpoint, bit for bit')
        else
          check(path == dir .. '/good' and fp == want, what .. ': the previous checkpoint, bit for bit')
        end
      end
      check_eq(#X.entries(dir, '.'), 0, what .. ': the load swept the temporary folder')
      -- the checkpoint not named by latest is whole too, whichever it is
      if tag == 'new' and zl.core.exists(dir .. '/new') and X.read(dir .. '/latest') ~= 'new' then
        local e2 = X.engine(13, 0)
        local ok2 = pcall(e2.load_checkpoint, e2, dir, 'new')
        check(ok2, what .. ': a complete folder new loads')
      end
    end
  end
end)

H.done()
