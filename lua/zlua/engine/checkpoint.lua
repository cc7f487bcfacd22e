--[[ zlua.engine.checkpoint: engine:save_checkpoint / load_checkpoint /
  save_16bit_model. Every rank calls them. Layout of a checkpoint folder:

    DIR/latest                        the newest tag (text), written last
    DIR/TAG/model.safetensors         the module's state_dict in its working
                                      dtype (stage 3 gathers one parameter at a
                                      time for rank 0 to write)
    DIR/TAG/optim_rank<R>.safetensors rank R's chunks (zlua.zero.layout) of
                                      each trained parameter: the f32 master as
                                      param.<i>, the optimizer state as
                                      state.<i>.<key>, real elements only (stage
                                      0 keeps everything, written by rank 0)
    DIR/TAG/engine.json (+ .crc32)    counters, hyperparameters, scheduler, loss
                                      scaler, every rank's RNG, the dataloader
                                      position, the client state, the partition
                                      (stage, partitions, each parameter's name,
                                      shape and chunk length) and a manifest
                                      (bytes and CRC-32 of every file)

  Loading re-partitions: each rank reads the element ranges of its own chunks
  from whichever saved chunks hold them, so a checkpoint saved at one world
  size and stage resumes at any other with no conversion step.

  Crash safety: a checkpoint is written into a hidden temporary folder, every
  file fsynced, and the folder renamed to TAG (swapped with an existing TAG
  in one atomic exchange); `latest` is replaced atomically after that. A save
  killed at any point leaves the previous checkpoint and `latest` as they
  were. The ranks agree on every outcome, so one rank's failure is every
  rank's error. Loading parses only JSON and safetensors (nothing is
  executed) and checks every file against the manifest first, so a truncated
  or damaged file is named before anything is changed. ]]

local zl = require 'zlua'
local json = require 'zlua.json'
local layout = require 'zlua.zero.layout'
local wire = require 'zlua.engine.wire'

local core = zl.core
local fmt = string.format

local M = {}

local FORMAT = 'zlua-checkpoint-2'

local function join(a, b) return a:sub(-1) == '/' and a .. b or a .. '/' .. b end

local function read_file(path)
  local f, err = io.open(path, 'rb')
  if not f then return nil, err end
  local s = f:read('a')
  f:close()
  return s
end

local function check_tag(tag)
  if type(tag) ~= 'string' or tag == '' or tag:find('/', 1, true) or tag:sub(1, 1) == '.' then
    zl.raise(fmt('save_checkpoint: tag must be a non-empty name without "/" that does not start with ".", got %s',
      tostring(tag)))
  end
end

local function check_client_state(v, path)
  local t = type(v)
  if t == 'table' then
    local strings, ints = false, false
    for k, x in pairs(v) do
      if type(k) == 'string' then strings = true
      elseif math.type(k) == 'integer' and k >= 1 and k <= #v then ints = true
      else zl.raise(fmt('save_checkpoint: %s has the key %s; client_state tables are arrays or have string keys', path, tostring(k))) end
      check_client_state(x, path .. '.' .. tostring(k))
    end
    if strings and ints then
      zl.raise(fmt('save_checkpoint: %s mixes array entries and string keys (JSON has no such table)', path))
    end
  elseif t == 'number' and (v ~= v or v == math.huge or v == -math.huge) then
    zl.raise(fmt('save_checkpoint: %s is %s, which JSON cannot hold', path, tostring(v)))
  elseif t ~= 'string' and t ~= 'number' and t ~= 'boolean' then
    zl.raise(fmt('save_checkpoint: %s is a %s; client_state holds only tables, strings, numbers and booleans '
      .. '(save tensors in the model)', path, zl.is_tensor(v) and 'tensor' or t))
  end
end

-- The ranks' agreement: true when ok is true on every rank.
local function all_ok(engine, ok)
  if engine.world_size == 1 then return ok end
  local t = zl.full({ 1 }, ok and 1 or 0, { device = engine.dist.device() })
  engine.dist.all_reduce(t, 'min')
  return t:item() > 0
end

-- Rank 0's value of a number, on every rank.
local function from_rank0(engine, v)
  return wire.all_gather(engine.dist, engine.world_size, { v })[1][1]
end

-- The module's entries for model.safetensors: {name, dtype, shape, get()},
-- get() giving the whole tensor (gathered for stage 3) and a cleanup.
local function model_entries(engine)
  local sd, order = engine.module:state_dict()
  local by_name = {}
  if engine.zero and engine.zero.stage == 3 then
    for _, e in ipairs(engine.zero.entries) do by_name[e.name] = e end
  end
  local out = {}
  for _, name in ipairs(order) do
    local t, e = sd[name], by_name[name]
    if e then
      local z = engine.zero
      out[#out + 1] = { name = name, dtype = z.wdtype, shape = e.shape, get = function()
        z:gather(e)
        return e.p, function() z:release(e) end
      end }
    else
      out[#out + 1] = { name = name, dtype = t:dtype(), shape = t:shape(), get = function() return t, nil end }
    end
  end
  return out
end

-- model.safetensors: rank 0 writes, every rank takes part in the gathers.
local function write_model(engine, path, format)
  local entries = model_entries(engine)
  local w
  local ok, err = true, nil
  if engine.rank == 0 then
    local info = {}
    for i, e in ipairs(entries) do info[i] = { name = e.name, dtype = e.dtype, shape = e.shape } end
    ok, err = pcall(function() w = zl.safetensors_writer(path, info, { format = format or FORMAT }) end)
  end
  for _, e in ipairs(entries) do
    local t, done = e.get()
    if w and ok then ok, err = pcall(w.write, w, t:cpu()) end
    if done then done() end
  end
  if w and ok then ok, err = pcall(w.commit, w) end
  if w and not ok then pcall(w.abort, w) end
  return ok, err
end

-- This rank's chunks of the masters and of the optimizer state, streamed
-- (with NVMe offload they come in a sub-group at a time).
local function write_shard(engine, path)
  local z = engine.zero
  if z.layout.P == 1 and engine.rank ~= 0 then return nil end
  local keys = z:state_keys()
  local info = {}
  for i, e in ipairs(z.entries) do
    if e.own > 0 then
      info[#info + 1] = { name = 'param.' .. i, dtype = 'f32', shape = { e.own } }
      if z:state_of(e) then
        for _, k in ipairs(keys) do info[#info + 1] = { name = fmt('state.%d.%s', i, k), dtype = 'f32', shape = { e.own } } end
      end
    end
  end
  local w = zl.safetensors_writer(path, info, { format = FORMAT })
  local ok, err = pcall(z.each_master, z, function(e, st)
    if e.own > 0 then
      local piece = e.mv:narrow(1, 1, e.own)
      w:write(piece)
      piece:release()
      if st then
        for _, k in ipairs(keys) do
          local v = st[k]:narrow(1, 1, e.own)
          w:write(v)
          v:release()
        end
      end
    end
  end)
  if ok then ok, err = pcall(w.commit, w) end
  if not ok then
    pcall(w.abort, w)
    error(err, 0)
  end
  return path
end

-- What engine.json says about the optimizer: type, groups, per-parameter
-- scalars (the step), the names of its state tensors, the partition.
local function optimizer_json(engine)
  local z, opt = engine.zero, engine.optimizer
  local groups = {}
  for gi, g in ipairs(opt.param_groups) do
    local h = {}
    for k, v in pairs(g) do
      if k ~= 'params' then h[k] = type(v) == 'table' and { table.unpack(v) } or v end
    end
    groups[gi] = h
  end
  local params, scalars = {}, {}
  for i, e in ipairs(z.entries) do
    params[i] = { name = e.name, shape = e.shape, numel = e.n, group = e.group, k = e.k }
    local st = z:state_of(e)
    if st then
      local sc = {}
      for k, v in pairs(st) do if not zl.is_tensor(v) then sc[k] = v end end
      scalars[tostring(i)] = sc
    end
  end
  return { type = opt.__name, param_groups = groups, state = scalars, tensor_keys = z:state_keys(),
    zero = { stage = z.stage, world_size = engine.world_size, partitions = z.layout.P, align = layout.ALIGN,
      params = params } }
end

-- Every rank's generator state, in rank order.
local function rng_states(engine)
  local out = {}
  for r, row in ipairs(wire.all_gather(engine.dist, engine.world_size, { core.generator_state() })) do
    out[r] = { seed = row[1], offset = row[2] }
  end
  return out
end

--- engine:save_checkpoint(dir [, tag [, client_state [, {save_latest=true}]]]) -> path
function M.save(engine, dir, tag, client_state, opts)
  if type(dir) ~= 'string' or dir == '' then zl.raise('save_checkpoint: dir must be a folder path') end
  tag = tag or ('global_step' .. engine.global_steps)
  check_tag(tag)
  client_state = client_state or {}
  check_client_state(client_state, 'client_state')
  -- Gradients of a half-done accumulation window are not saved: a save
  -- there could not resume exactly, so it is refused.
  if engine.micro_steps % engine.gas ~= 0 then
    zl.raise(fmt('save_checkpoint: %d micro-steps into an accumulation window of %d (micro step %d); save after '
      .. 'engine:step() at a boundary', engine.micro_steps % engine.gas, engine.gas, engine.micro_steps))
  end
  local rank = engine.rank
  local final = join(dir, tag)
  local ok, err = true, nil
  if rank == 0 then ok, err = pcall(core.mkdirs, dir) end
  local token = from_rank0(engine, core.getpid())
  local tmp = join(dir, fmt('.%s.tmp-%d', tag, token))
  if rank == 0 and ok then
    ok, err = pcall(function()
      core.remove_tree(tmp)
      core.mkdirs(tmp)
    end)
  end
  if not all_ok(engine, ok) then
    error(err or fmt('save_checkpoint: rank 0 could not create %s', tmp), 0)
  end
  local rng = rng_states(engine)
  ok, err = write_model(engine, join(tmp, 'model.safetensors'))
  if ok and engine.zero then
    local wrote, e2 = pcall(write_shard, engine, join(tmp, fmt('optim_rank%d.safetensors', rank)))
    ok, err = wrote, (not wrote) and e2 or nil
  end
  if not all_ok(engine, ok) then
    if rank == 0 then core.remove_tree(tmp) end
    error(err or 'save_checkpoint: another rank failed to write its part of the checkpoint (its message names it)', 0)
  end
  if rank == 0 then
    ok, err = pcall(M.finish, engine, tmp, tag, client_state, rng)
    if ok then
      ok, err = pcall(function()
        if core.exists(final) then
          -- One atomic swap: at no moment is there no folder named TAG.
          core.exchange(tmp, final)
          core.remove_tree(tmp)
        else
          core.rename(tmp, final)
        end
        if not opts or opts.save_latest ~= false then core.write_file_atomic(join(dir, 'latest'), tag) end
      end)
    end
    if not ok then core.remove_tree(tmp) end
  end
  if not all_ok(engine, ok) then
    error(err or fmt('save_checkpoint: rank 0 failed to complete %s (its message says why)', final), 0)
  end
  return final
end

-- Rank 0: engine.json with the manifest of every file the ranks wrote.
function M.finish(engine, tmp, tag, client_state, rng)
  local state = {
    format = FORMAT, tag = tag, world_size = engine.world_size,
    precision = engine.precision.mode,
    global_steps = engine.global_steps, global_samples = engine.global_samples,
    skipped_steps = engine.skipped_steps, micro_steps = engine.micro_steps,
    client_state = client_state, config = engine.config.source or json.null, rng = rng,
  }
  local files = { 'model.safetensors' }
  if engine.zero then
    state.optimizer = optimizer_json(engine)
    for r = 0, engine.zero.layout.P - 1 do files[#files + 1] = fmt('optim_rank%d.safetensors', r) end
  end
  if engine.lr_scheduler then state.lr_scheduler = engine.lr_scheduler:state_dict() end
  if engine.precision.scaler then state.loss_scaler = engine.precision.scaler:state() end
  if engine.training_dataloader then
    state.dataloader = engine.training_dataloader:state_dict()
    state.dataloader.micro_batch_size, state.dataloader.world_size = engine.micro_batch_size, engine.world_size
  end
  state.manifest = {}
  for _, f in ipairs(files) do
    local crc, bytes = core.file_crc32(join(tmp, f))
    state.manifest[f] = { crc32 = crc, bytes = bytes }
  end
  local text = json.encode(state, 1) .. '\n'
  core.write_file_atomic(join(tmp, 'engine.json'), text)
  core.write_file_atomic(join(tmp, 'engine.json.crc32'), fmt('%d\n', core.crc32(text)))
end

-- Read and verify engine.json and the files it lists; nothing is changed yet.
local function open_checkpoint(path)
  local jpath = join(path, 'engine.json')
  local text, err = read_file(jpath)
  if not text then zl.raise(fmt('load_checkpoint: cannot read %s: %s', jpath, err)) end
  local want = read_file(jpath .. '.crc32')
  if not want or tonumber(want) ~= core.crc32(text) then
    zl.raise(fmt('load_checkpoint: %s is damaged (its CRC-32 does not match %s.crc32)', jpath, jpath))
  end
  local ok, state = pcall(json.decode, text, jpath)
  if not ok then zl.raise(fmt('load_checkpoint: %s is corrupt: %s', jpath, tostring(state))) end
  if type(state) ~= 'table' or state.format ~= FORMAT then
    zl.raise(fmt('load_checkpoint: %s is not a zlua checkpoint (format %s, expected %s)', jpath,
      type(state) == 'table' and tostring(state.format) or '?', FORMAT))
  end
  for _, key in ipairs({ 'global_steps', 'global_samples', 'skipped_steps', 'micro_steps', 'world_size' }) do
    if math.type(state[key]) ~= 'integer' then zl.raise(fmt('load_checkpoint: %s: %s is missing or not an integer', jpath, key)) end
  end
  if type(state.rng) ~= 'table' or #state.rng ~= state.world_size then
    zl.raise(fmt('load_checkpoint: %s: rng is missing or does not list %d ranks', jpath, state.world_size))
  end
  for r, g in ipairs(state.rng) do
    if type(g) ~= 'table' or math.type(g.seed) ~= 'integer' or math.type(g.offset) ~= 'integer' then
      zl.raise(fmt('load_checkpoint: %s: rng of rank %d is malformed', jpath, r - 1))
    end
  end
  for f, want in pairs(state.manifest or {}) do
    local fpath = join(path, f)
    if not core.exists(fpath) then zl.raise(fmt('load_checkpoint: %s is missing', fpath)) end
    local crc, bytes = core.file_crc32(fpath)
    if bytes ~= want.bytes then
      zl.raise(fmt('load_checkpoint: %s is %d bytes, the checkpoint wrote %d (truncated or replaced)', fpath, bytes,
        want.bytes))
    end
    if crc ~= want.crc32 then
      zl.raise(fmt('load_checkpoint: %s is damaged (CRC-32 %08x, written as %08x)', fpath, crc, want.crc32))
    end
  end
  return state
end

local function bad(path, what, ...) zl.raise(fmt('load_checkpoint: %s: ' .. what, path, ...)) end

-- The saved partition against this engine's parameters.
local function check_partition(path, so, z)
  local zi = so.zero
  if type(zi) ~= 'table' or math.type(zi.partitions) ~= 'integer' or zi.partitions < 1 or type(zi.params) ~= 'table' then
    bad(path, 'engine.json has no valid partition description')
  end
  if #zi.params ~= #z.entries then
    bad(path, 'the optimizer held %d parameters, it has %d now', #zi.params, #z.entries)
  end
  for i, e in ipairs(z.entries) do
    local sp = zi.params[i]
    if type(sp) ~= 'table' or sp.name ~= e.name then
      bad(path, 'optimizer parameter %d is %s in the checkpoint and %s now (the model defines its parameters in '
        .. 'another order)', i, tostring(type(sp) == 'table' and sp.name), e.name)
    end
    if sp.numel ~= e.n or math.type(sp.k) ~= 'integer' or sp.k * zi.partitions < e.n then
      bad(path, '%s has %s elements in the checkpoint and %d now', e.name, tostring(sp.numel), e.n)
    end
  end
  return zi
end

-- Elements [a, b) of parameter i's tensor `name` into dst, from the saved
-- chunks that hold them (each in the file of the rank that owned it).
local function read_range(path, files, zi, i, name, a, b, dst)
  local sp = zi.params[i]
  for q = a // sp.k, (b - 1) // sp.k do
    local lo, own = layout.owned(sp.numel, sp.k, q)
    local s0, s1 = math.max(a, lo), math.min(b, lo + own)
    if s1 > s0 then
      local f = files[q]
      if not f then
        f = zl.safetensors_open(join(path, fmt('optim_rank%d.safetensors', q)))
        files[q] = f
      end
      dst:narrow(1, s0 - a + 1, s1 - s0):copy_(f:read(name, s0 - lo, s1 - s0))
    end
  end
end

local function load_optimizer(engine, path, state)
  local opt, z, so = engine.optimizer, engine.zero, state.optimizer
  if so.type ~= opt.__name then
    bad(path, 'it holds the state of a %s optimizer; this engine has %s', tostring(so.type), tostring(opt.__name))
  end
  local zi = check_partition(path, so, z)
  if type(so.param_groups) ~= 'table' or #so.param_groups ~= #opt.param_groups then
    bad(path, 'the optimizer had %s param groups, it has %d now', tostring(type(so.param_groups) == 'table'
      and #so.param_groups), #opt.param_groups)
  end
  local files = {}
  local ok, err = pcall(z.each_master, z, function(e)
    local i = e.index
    if e.own > 0 then read_range(path, files, zi, i, 'param.' .. i, e.lo, e.lo + e.own, e.mv:narrow(1, 1, e.own)) end
    local sc = so.state[tostring(i)]
    if type(sc) == 'table' then
      local st = z:ensure_state(e)
      for k, v in pairs(sc) do st[k] = v end
      for _, key in ipairs(so.tensor_keys) do
        if not zl.is_tensor(st[key]) then bad(path, 'the %s optimizer has no state %q', opt.__name, key) end
        st[key]:zero_()
        if e.own > 0 then
          read_range(path, files, zi, i, fmt('state.%d.%s', i, key), e.lo, e.lo + e.own, st[key]:narrow(1, 1, e.own))
        end
      end
    else
      z:drop_state(e)
    end
  end, true)
  for _, f in pairs(files) do f:close() end
  if not ok then error(err, 0) end
  for gi, h in ipairs(so.param_groups) do
    for k, v in pairs(h) do opt.param_groups[gi][k] = v end
  end
  z:sync_working()
end

-- The working weights from model.safetensors: this rank's chunks of the
-- trained parameters into their masters, everything else whole.
-- From model.safetensors: with masters = true, this rank's chunks of the
-- trained parameters into their masters; always, everything else whole
-- (buffers, frozen parameters, parameters outside the optimizer).
local function load_module(engine, path, strict, masters)
  local z = engine.zero
  local fpath = join(path, 'model.safetensors')
  if not z then
    engine.module:load_state_dict(zl.load_safetensors(fpath), strict)
    return
  end
  local f = zl.safetensors_open(fpath)
  local have = {}
  for _, it in ipairs(f:info()) do have[it.name] = it end
  local owned = {}
  for _, e in ipairs(z.entries) do owned[e.name] = true end
  local ok, err = true, nil
  if masters then
    ok, err = pcall(z.each_master, z, function(e)
      local it = have[e.name]
      if not it then bad(path, 'model.safetensors has no %s', e.name) end
      if it.numel ~= e.n then
        bad(path, 'model.safetensors holds %d elements of %s, the parameter has %d', it.numel, e.name, e.n)
      end
      if e.own > 0 then zl.core.copy_range(e.mv, 0, f:read(e.name, e.lo, e.own), 0, e.own) end
    end, true)
  end
  if ok then
    ok, err = pcall(zl.no_grad, function()
      local sd, order = engine.module:state_dict()
      for _, name in ipairs(order) do
        local t = sd[name]
        if not owned[name] then
          if have[name] then
            t:copy_(f:read(name):reshape(t:shape()):to(t:device()))
          elseif strict then
            bad(path, 'model.safetensors has no %s', name)
          end
        end
      end
    end)
  end
  f:close()
  if not ok then error(err, 0) end
  if masters then z:sync_working() end
end

-- The dataloader's position, converted to this run's ranks and micro-batch.
local function load_dataloader(engine, path, sd)
  local ws, mb = sd.world_size or engine.world_size, sd.micro_batch_size or engine.micro_batch_size
  local samples = (sd.batches or 0) * ws * mb
  local per = engine.world_size * engine.micro_batch_size
  if samples % per ~= 0 then
    bad(path, 'the dataloader had given %d samples of its pass (%d ranks x %d per batch); this run takes %d per '
      .. 'step of its %d ranks, which does not divide it', samples, ws, mb, per, engine.world_size)
  end
  engine.training_dataloader:load_state_dict { epoch = sd.epoch, batches = samples // per }
end

--- engine:load_checkpoint(dir [, tag [, {load_optimizer_states=true,
--- load_lr_scheduler_states=true, load_module_only=false, load_module_strict=true}]])
--- -> path, client_state (nil, nil when dir has no `latest` and no tag is given).
--- Any world size and stage loads a checkpoint of any other.
function M.load(engine, dir, tag, opts)
  opts = opts or {}
  if tag == nil then
    local latest = read_file(join(dir, 'latest'))
    if not latest then
      io.stderr:write(fmt('zlua: load_checkpoint: no checkpoint in %s (no "latest" file); starting fresh\n', dir))
      return nil, nil
    end
    tag = latest:match('^%s*(.-)%s*$')
  end
  local path = join(dir, tag)
  if not core.exists(path) then zl.raise(fmt('load_checkpoint: %s does not exist', path)) end
  local state = open_checkpoint(path)
  local strict = opts.load_module_strict ~= false
  if opts.load_module_only or not (engine.optimizer and state.optimizer and opts.load_optimizer_states ~= false) then
    load_module(engine, path, strict, true)
    if opts.load_module_only then return path, state.client_state end
  else
    load_optimizer(engine, path, state)
    -- load_from_fp32_weights = false: the masters restart from the 16-bit weights.
    load_module(engine, path, strict, engine.config.zero_optimization.load_from_fp32_weights == false)
  end
  if engine.lr_scheduler and state.lr_scheduler and opts.load_lr_scheduler_states ~= false then
    engine.lr_scheduler:load_state_dict(state.lr_scheduler)
  end
  if engine.precision.scaler and state.loss_scaler then engine.precision.scaler:load(state.loss_scaler) end
  engine.global_steps, engine.global_samples = state.global_steps, state.global_samples
  engine.skipped_steps, engine.micro_steps = state.skipped_steps, state.micro_steps
  local g = state.rng[engine.rank + 1] or state.rng[1]
  core.generator_seed(nil, g.seed)
  core.generator_set_offset(nil, g.offset)
  if engine.training_dataloader and state.dataloader then load_dataloader(engine, path, state.dataloader) end
  return path, state.client_state
end

--- engine:save_16bit_model(dir [, name = 'model.safetensors']): the module's
--- weights in their working dtype, one safetensors file written by rank 0
--- (stage 3 gathers each parameter in turn, when
--- stage3_gather_16bit_weights_on_model_save is set; false otherwise, as in
--- DeepSpeed). Returns its path.
function M.save_16bit_model(engine, dir, name)
  name = name or 'model.safetensors'
  local zc = engine.config.zero_optimization
  if zc.stage == 3 and not zc.stage3_gather_16bit_weights_on_model_save then
    if engine.rank == 0 then
      io.stderr:write('zlua: save_16bit_model: nothing saved: at stage 3 it needs '
        .. 'zero_optimization.stage3_gather_16bit_weights_on_model_save = true (as in DeepSpeed)\n')
    end
    return false
  end
  local path = join(dir, name)
  local ok, err = true, nil
  if engine.rank == 0 then ok, err = pcall(core.mkdirs, dir) end
  if ok then ok, err = write_model(engine, path, 'pt') end
  if not all_ok(engine, ok) then error(err or 'save_16bit_model: rank 0 failed to write ' .. path, 0) end
  return path
end

M.FORMAT = FORMAT
return M
