--[[ zlua.engine.verify: what a checkpoint must be, checked before anything is
  written (a save refuses what could not be loaded back) and before anything
  is changed (a load refuses a folder it could not take whole). Every error
  names the file and the key at fault.

    verify.tag(tag, op [, from])        a tag that names a folder inside DIR
    verify.client_state(v)              what engine.json can hold and give back
    verify.read(path, max)              a small file of the checkpoint, whole
    verify.open(path [, files])         engine.json read, checked field by field,
                                        and every file against its manifest
                                        entry (files = false: not the files)
  Only regular files inside the checkpoint's folder are opened: a link, a
  FIFO or a device file is an error naming it, never a read that blocks. ]]

local zl = require 'zlua'
local json = require 'zlua.json'

local core = zl.core
local fmt, mtype = string.format, math.type

local M = {}

M.FORMAT = 'zlua-checkpoint-2'
-- A tag's folder name plus its temporary's (".TAG.tmp-PID") must stay within
-- NAME_MAX (255 bytes).
M.TAG_MAX = 200
M.LATEST_MAX = 1024
M.ENGINE_JSON_MAX = 64 << 20
-- Where engine.json's own CRC-32 is kept (a decimal number and a newline).
local CRC_FILE_MAX = 64
-- Largest values a count in engine.json may take: beyond them a product
-- (samples = batches x ranks x batch) could overflow.
local COUNT_MAX = 1 << 53

-- s for a message: control bytes as \xNN, other bytes too when s is not UTF-8, cut at 60.
local function show(s)
  if type(s) ~= 'string' then return tostring(s) end
  local cut = #s > 60
  s = s:sub(1, 60)
  s = s:gsub(utf8.len(s) and '%c' or '[%c\128-\255]', function(c) return fmt('\\x%02X', c:byte()) end)
  return '"' .. s .. (cut and '..."' or '"')
end
M.show = show

--- verify.tag(tag, op [, from]): raises "<op>: <from> tag ... " unless tag can
--- name a checkpoint folder inside DIR and come back unchanged from `latest`.
function M.tag(tag, op, from)
  local what = from and fmt('the tag in %s', from) or 'tag'
  local function no(why) zl.raise(fmt('%s: %s %s %s', op, what, show(tag), why)) end
  if type(tag) ~= 'string' then
    zl.raise(fmt('%s: %s must be a string, got %s', op, what, type(tag)))
  end
  if tag == '' then no('is empty') end
  if tag:find('\0', 1, true) then no(fmt('holds a NUL byte (byte %d), which would cut the folder name there',
    tag:find('\0', 1, true))) end
  if #tag > M.TAG_MAX then no(fmt('is %d bytes long; a tag is at most %d', #tag, M.TAG_MAX)) end
  if tag:find('/', 1, true) then no('holds "/": a tag names one folder inside the save folder') end
  if tag:sub(1, 1) == '.' then no('starts with ".": a tag names a visible folder, never "." or ".."') end
  if not utf8.len(tag) then no('is not valid UTF-8') end
  if tag:find('%c') then no('holds a control character') end
  if tag:find('^%s') or tag:find('%s$') then no('starts or ends with a space, which `latest` would lose') end
end

--- verify.client_state(v): raises naming the first entry engine.json could not
--- hold or give back as it was (a mixed table, NaN, a function, bytes that are
--- not UTF-8, nesting deeper than json.decode reads).
function M.client_state(v)
  -- engine.json's object is one level, client_state the next.
  local max_depth = json.MAX_DEPTH - 1
  local function walk(x, path, depth)
    local t = type(x)
    if t == 'table' then
      if depth > max_depth then
        zl.raise(fmt('save_checkpoint: %s nests tables %d deep; client_state holds at most %d levels '
          .. '(engine.json would not load)', path, depth, max_depth))
      end
      local strings, ints = false, false
      for k, y in pairs(x) do
        if type(k) == 'string' then
          strings = true
          if not utf8.len(k) then
            zl.raise(fmt('save_checkpoint: %s has the key %s, which is not valid UTF-8 (JSON text must be)', path, show(k)))
          end
        elseif mtype(k) == 'integer' and k >= 1 and k <= #x then ints = true
        else zl.raise(fmt('save_checkpoint: %s has the key %s; client_state tables are arrays or have string keys', path, tostring(k))) end
        walk(y, path .. (type(k) == 'string' and '.' .. k or '[' .. k .. ']'), depth + 1)
      end
      if strings and ints then
        zl.raise(fmt('save_checkpoint: %s mixes array entries and string keys (JSON has no such table)', path))
      end
    elseif t == 'number' and (x ~= x or x == math.huge or x == -math.huge) then
      zl.raise(fmt('save_checkpoint: %s is %s, which JSON cannot hold', path, tostring(x)))
    elseif t == 'string' then
      if not utf8.len(x) then
        zl.raise(fmt('save_checkpoint: %s is %s, which is not valid UTF-8 (JSON text must be; save bytes in a tensor)',
          path, show(x)))
      end
    elseif t ~= 'number' and t ~= 'boolean' then
      zl.raise(fmt('save_checkpoint: %s is a %s; client_state holds only tables, strings, numbers and booleans '
        .. '(save tensors in the model)', path, zl.is_tensor(x) and 'tensor' or t))
    end
  end
  walk(v, 'client_state', 1)
end

--- verify.call(op, f, ...): f(...), its error (the engine's, which names the
--- file) raised again as "<op>: <message>" at the script's line.
function M.call(op, f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] then zl.raise(op .. ': ' .. tostring(r[2]):gsub('^[^\n]-:%d+: ', '', 1)) end
  return table.unpack(r, 2, r.n)
end

--- verify.read(path, max [, op]) -> the bytes of a regular file of at most max
--- bytes (no link, FIFO or device), or nil and 'missing' when there is none.
function M.read(path, max, op)
  if core.path_kind(path) == nil then return nil, 'missing' end
  return M.call(op or 'load_checkpoint', core.read_file, path, max, true)
end

-- Checks on engine.json's fields: each raises "load_checkpoint: <file>: <key> ...".
local Check = {}
Check.__index = Check

function Check:fail(key, msg, ...)
  zl.raise(fmt('load_checkpoint: %s: %s ' .. msg, self.file, key, ...))
end

-- A JSON object (array false) or list (array true): json.decode marks lists with json.array.
function Check:table(key, v, array)
  if type(v) ~= 'table' or v == json.null then self:fail(key, 'must be %s, got %s', array and 'a list' or 'an object',
    v == json.null and 'null' or type(v)) end
  local list = getmetatable(v) == json.array
  if array and not list then self:fail(key, 'must be a list, got an object') end
  if not array and list then self:fail(key, 'must be an object, got a list') end
  return v
end

function Check:int(key, v, lo, hi)
  if mtype(v) ~= 'integer' then self:fail(key, 'must be an integer, got %s', v == json.null and 'null'
    or type(v) == 'number' and tostring(v) or type(v)) end
  if (lo and v < lo) or (hi and v > hi) then
    self:fail(key, 'is %d, outside %s..%s', v, lo and tostring(lo) or '', hi and tostring(hi) or '')
  end
  return v
end

function Check:str(key, v)
  if type(v) ~= 'string' then self:fail(key, 'must be a string, got %s', v == json.null and 'null' or type(v)) end
  return v
end

-- A hyperparameter of a param group: a number, a boolean, a string, or a list of numbers (betas).
function Check:hyper(key, v)
  local t = type(v)
  if t == 'number' or t == 'boolean' or t == 'string' then return end
  if t == 'table' and v ~= json.null then
    for i, x in ipairs(self:table(key, v, true)) do
      if type(x) ~= 'number' then self:fail(key .. '[' .. i .. ']', 'must be a number, got %s', type(x)) end
    end
    return
  end
  self:fail(key, 'must be a number, boolean, string or list of numbers, got %s', v == json.null and 'null' or t)
end

-- The optimizer block: type, param groups, per-parameter scalars, the names of
-- the state tensors and the partition, with every count against the others.
local function check_optimizer(c, so, global_steps)
  c:table('optimizer', so)
  c:str('optimizer.type', so.type)
  local groups = c:table('optimizer.param_groups', so.param_groups, true)
  if #groups == 0 then c:fail('optimizer.param_groups', 'is empty') end
  for gi, g in ipairs(groups) do
    local key = fmt('optimizer.param_groups[%d]', gi)
    c:table(key, g)
    for k, v in pairs(g) do c:hyper(key .. '.' .. k, v) end
  end
  local z = c:table('optimizer.zero', so.zero)
  c:int('optimizer.zero.stage', z.stage, 0, 3)
  c:int('optimizer.zero.world_size', z.world_size, 1, COUNT_MAX)
  c:int('optimizer.zero.partitions', z.partitions, 1, COUNT_MAX)
  c:int('optimizer.zero.align', z.align, 1, 1 << 20)
  local params = c:table('optimizer.zero.params', z.params, true)
  for i, p in ipairs(params) do
    local key = fmt('optimizer.zero.params[%d]', i)
    c:table(key, p)
    c:str(key .. '.name', p.name)
    local n = 1
    for d, s in ipairs(c:table(key .. '.shape', p.shape, true)) do
      c:int(fmt('%s.shape[%d]', key, d), s, 0, COUNT_MAX)
      n = (s == 0 or n <= COUNT_MAX // s) and n * s or c:fail(key .. '.shape', 'holds more than 2^53 elements')
    end
    if c:int(key .. '.numel', p.numel, 0, COUNT_MAX) ~= n then
      c:fail(key .. '.numel', 'is %d, but its shape holds %d elements', p.numel, n)
    end
    c:int(key .. '.group', p.group, 1, #groups)
    -- Chunk length k: zlua.zero.layout's, ceil(numel / partitions) rounded up to align.
    local k = (n + z.partitions - 1) // z.partitions
    k = (k + z.align - 1) // z.align * z.align
    if c:int(key .. '.k', p.k, 0) ~= k then
      c:fail(key .. '.k', 'is %d; %d elements in %d partitions aligned to %d make chunks of %d', p.k, n, z.partitions,
        z.align, k)
    end
  end
  local state = c:table('optimizer.state', so.state)
  for k, sc in pairs(state) do
    local i = math.tointeger(tonumber(k))
    if type(k) ~= 'string' or not i or tostring(i) ~= k or i < 1 or i > #params then
      c:fail('optimizer.state', 'has the key %s, which names no parameter (1..%d)', show(k), #params)
    end
    local key = 'optimizer.state.' .. k
    c:table(key, sc)
    for sk in pairs(sc) do
      if sk ~= 'step' then c:fail(key, 'holds %s; the only saved scalar is step', show(sk)) end
    end
    c:int(key .. '.step', sc.step, 0, global_steps)
  end
  for i, k in ipairs(c:table('optimizer.tensor_keys', so.tensor_keys, true)) do
    if type(k) ~= 'string' or not k:find('^[%a_][%w_]*$') then
      c:fail(fmt('optimizer.tensor_keys[%d]', i), 'is %s, not a state name', show(k))
    end
  end
end

-- The files the manifest must list, exactly: the model, and each partition's shard.
local function expected_files(state)
  local files = { ['model.safetensors'] = true }
  if state.optimizer then
    for r = 0, state.optimizer.zero.partitions - 1 do files[fmt('optim_rank%d.safetensors', r)] = true end
  end
  return files
end

local function check_manifest(c, state, path, check_files)
  local m = state.manifest
  if m == nil or m == json.null then
    c:fail('manifest', 'is %s: without it the files cannot be checked, so the checkpoint is refused',
      m == nil and 'missing' or 'null')
  end
  c:table('manifest', m)
  local listed = 0
  for _ in pairs(m) do listed = listed + 1 end
  -- The partition count against the files listed, before anything counts up to it.
  if state.optimizer and state.optimizer.zero.partitions > listed then
    c:fail('optimizer.zero.partitions', 'is %d, but the manifest lists %d files (the model and one per partition)',
      state.optimizer.zero.partitions, listed)
  end
  local want = expected_files(state)
  for f in pairs(m) do
    if not want[f] then c:fail('manifest', 'lists %s, which is no file of this checkpoint', show(f)) end
  end
  for f in pairs(want) do
    local e = m[f]
    if e == nil then c:fail('manifest', 'does not list %s', f) end
    c:table('manifest.' .. f, e)
    c:int(fmt('manifest["%s"].crc32', f), e.crc32, 0, 0xFFFFFFFF)
    c:int(fmt('manifest["%s"].bytes', f), e.bytes, 0)
  end
  if check_files == false then return end
  -- Every file before any is read: a damaged one is named before anything changes.
  for f in pairs(want) do
    local fpath = path .. '/' .. f
    if core.path_kind(fpath) == nil then zl.raise(fmt('load_checkpoint: %s is missing', fpath)) end
    local crc, bytes = M.call('load_checkpoint', core.file_crc32, fpath, true)
    local e = m[f]
    if bytes ~= e.bytes then
      zl.raise(fmt('load_checkpoint: %s is %d bytes, the checkpoint wrote %d (truncated or replaced)', fpath, bytes,
        e.bytes))
    end
    if crc ~= e.crc32 then
      zl.raise(fmt('load_checkpoint: %s is damaged (CRC-32 %08x, written as %08x)', fpath, crc, e.crc32))
    end
  end
end

--- verify.check_state(state, file [, path, check_files]): engine.json's
--- decoded value, every field checked; with path, its files too.
function M.check_state(state, file, path, check_files)
  local c = setmetatable({ file = file }, Check)
  if type(state) ~= 'table' or state.format ~= M.FORMAT then
    zl.raise(fmt('load_checkpoint: %s is not a zlua checkpoint (format %s, expected %s)', file,
      type(state) == 'table' and show(state.format) or type(state), M.FORMAT))
  end
  c:str('tag', state.tag)
  local steps = c:int('global_steps', state.global_steps, 0, COUNT_MAX)
  c:int('global_samples', state.global_samples, 0, COUNT_MAX)
  c:int('skipped_steps', state.skipped_steps, 0, steps)
  c:int('micro_steps', state.micro_steps, 0, COUNT_MAX)
  local ws = c:int('world_size', state.world_size, 1, 1 << 24)
  c:str('precision', state.precision)
  local rng = c:table('rng', state.rng, true)
  if #rng ~= ws then c:fail('rng', 'lists %d ranks, the checkpoint has %d', #rng, ws) end
  for r, g in ipairs(rng) do
    c:table(fmt('rng[%d]', r), g)
    c:int(fmt('rng[%d].seed', r), g.seed)
    c:int(fmt('rng[%d].offset', r), g.offset)
  end
  if state.client_state ~= nil then c:table('client_state', state.client_state) end
  if state.optimizer ~= nil then check_optimizer(c, state.optimizer, steps) end
  -- The scheduler's position and the loss scaler's state, as their loaders
  -- check them, so that neither refuses after the weights were changed.
  if state.lr_scheduler ~= nil then
    c:table('lr_scheduler', state.lr_scheduler)
    c:int('lr_scheduler.last_batch_iteration', state.lr_scheduler.last_batch_iteration, -1)
  end
  local ls = state.loss_scaler
  if ls ~= nil then
    c:table('loss_scaler', ls)
    if type(ls.cur_scale) ~= 'number' or not (ls.cur_scale > 0 and ls.cur_scale < math.huge) then
      c:fail('loss_scaler.cur_scale', 'must be a finite number > 0, got %s', tostring(ls.cur_scale))
    end
    local it = c:int('loss_scaler.cur_iter', ls.cur_iter, 0)
    c:int('loss_scaler.last_overflow_iter', ls.last_overflow_iter, -1, it - 1)
    c:int('loss_scaler.cur_hysteresis', ls.cur_hysteresis, 1, (1 << 31) - 1)
  end
  local dl = state.dataloader
  if dl ~= nil then
    c:table('dataloader', dl)
    if dl.epoch ~= nil then c:int('dataloader.epoch', dl.epoch, 0, COUNT_MAX) end
    c:int('dataloader.batches', dl.batches or 0, 0, COUNT_MAX)
    c:int('dataloader.world_size', dl.world_size, 1, 1 << 24)
    local mb = c:int('dataloader.micro_batch_size', dl.micro_batch_size, 1, COUNT_MAX)
    if (dl.batches or 0) > COUNT_MAX // dl.world_size // mb then
      c:fail('dataloader.batches', 'is %d: with %d ranks of %d samples, more samples than can be counted',
        dl.batches, dl.world_size, mb)
    end
  end
  if path then check_manifest(c, state, path, check_files) end
  return state
end

--- verify.open(path [, check_files]) -> state: PATH/engine.json read (bounded,
--- a regular file), its CRC-32 checked, decoded, every field checked, and
--- (unless check_files is false) every file against the manifest. Nothing is
--- changed; every error names the file.
function M.open(path, check_files)
  local jpath = path .. '/engine.json'
  local text, why = M.read(jpath, M.ENGINE_JSON_MAX)
  if not text then zl.raise(fmt('load_checkpoint: %s is %s', jpath, why)) end
  local want = M.read(jpath .. '.crc32', CRC_FILE_MAX)
  if not want or tonumber(want) ~= core.crc32(text) then
    zl.raise(fmt('load_checkpoint: %s is damaged (its CRC-32 does not match %s.crc32)', jpath, jpath))
  end
  local ok, state = pcall(json.decode, text, jpath)
  if not ok then zl.raise(fmt('load_checkpoint: %s is corrupt: %s', jpath, tostring(state))) end
  return M.check_state(state, jpath, path, check_files)
end

return M
