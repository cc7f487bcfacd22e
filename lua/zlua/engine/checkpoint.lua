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

  Crash safety: everything engine.json will hold is checked before any file
  is written (zlua.engine.verify: the tag, the client state, UTF-8, nesting,
  size), so a save that could not load is refused up front. A checkpoint is
  written into a hidden temporary folder (".TAG.tmp-PID", with a marker
  ".TAG.tmp-PID.owner" beside it naming the host and pid that made it),
  every file fsynced, engine.json read back and checked, and the folder
  renamed to TAG (swapped with an existing TAG in one atomic exchange);
  `latest` is replaced atomically after that. A save killed
  at any point leaves the previous checkpoint and `latest` as they were, and
  the next save or load in DIR removes the temporary folders of saves killed
  on this host (only those). The ranks agree on every outcome, so one rank's
  failure is every rank's error. Loading parses only JSON and safetensors
  (nothing is executed), opens only regular files inside the folder, checks
  every field of engine.json and every file against the manifest, and checks
  the model file against the engine, before anything is changed. ]]

local zl = require 'zlua'
local json = require 'zlua.json'
local layout = require 'zlua.zero.layout'
local registry = require 'zlua.zero.registry'
local wire = require 'zlua.engine.wire'
local verify = require 'zlua.engine.verify'

local core = zl.core
local fmt = string.format

local M = {}

local FORMAT = verify.FORMAT

local function join(a, b) return a:sub(-1) == '/' and a .. b or a .. '/' .. b end

local function check_dir(dir, op)
  if type(dir) ~= 'string' or dir == '' then zl.raise(op .. ': dir must be a folder path') end
  local nul = dir:find('\0', 1, true)
  if nul then zl.raise(fmt('%s: dir %s holds a NUL byte (byte %d), which would cut the path there', op,
    verify.show(dir), nul)) end
end

-- Rank 0, before a save or load: the temporaries of saves killed on this host.
-- A failure to remove one is said, and does not stop the save or load.
local function sweep(dir, op)
  local ok, err = pcall(core.temp_sweep, dir)
  if not ok then io.stderr:write(fmt('zlua: %s: warning: %s\n', op, tostring(err))) end
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

-- name -> {p =, store =, shape =, dtype =} of the frozen parameters stage 3
-- keeps partitioned (zlua.zero.partition_frozen): gathered to be read or written.
local function frozen_partitioned(engine)
  local out = {}
  if not engine.frozen_partitioned or engine.frozen_partitioned == 0 then return out end
  for name, p in engine.module:named_parameters() do
    local r = registry.get(p)
    if r and r.store then
      out[name] = { p = p, store = r.store, shape = r.shape, numel = r.numel, dtype = engine.precision.half or 'f32' }
    end
  end
  return out
end

-- The module's entries for model.safetensors: {name, dtype, shape, get()},
-- get() giving the whole tensor (gathered for stage 3) and a cleanup.
local function model_entries(engine)
  local sd, order = engine.module:state_dict()
  local by_name = {}
  if engine.zero and engine.zero.stage == 3 then
    for _, e in ipairs(engine.zero.entries) do by_name[e.name] = e end
  end
  local frozen = frozen_partitioned(engine)
  local out = {}
  for _, name in ipairs(order) do
    local t, e, f = sd[name], by_name[name], frozen[name]
    if f then
      out[#out + 1] = { name = name, dtype = f.dtype, shape = f.shape, get = function()
        f.store:gather(f.p)
        return f.p:to(f.dtype), function() f.store:scatter(f.p) end
      end }
    elseif e then
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

-- This rank's chunks of the masters and of the optimizer state (the engine
-- streams them: with NVMe offload they come in a sub-group at a time). At
-- one partition every rank holds the same, and rank 0 writes it.
local function write_shard(engine, path)
  if engine.zero.layout.P == 1 and engine.rank ~= 0 then return nil end
  engine.zero.c:save_shard(path)
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

-- What engine.json says besides the manifest: counters, hyperparameters, the
-- partition, the schedule, the scaler, every rank's generator, the data position.
local function engine_state(engine, tag, client_state, rng)
  local state = {
    format = FORMAT, tag = tag, world_size = engine.world_size,
    precision = engine.precision.mode,
    global_steps = engine.global_steps, global_samples = engine.global_samples,
    skipped_steps = engine.skipped_steps, micro_steps = engine.micro_steps,
    client_state = client_state, rng = rng,
    -- Where the config came from, for the reader: a file name that is not
    -- UTF-8 (which JSON cannot hold) is left out rather than refusing the save.
    config = engine.config.source and utf8.len(engine.config.source) and engine.config.source or json.null,
  }
  if engine.zero then state.optimizer = optimizer_json(engine) end
  if engine.lr_scheduler then state.lr_scheduler = engine.lr_scheduler:state_dict() end
  if engine.precision.scaler then state.loss_scaler = engine.precision.scaler:state() end
  if engine.training_dataloader then
    state.dataloader = engine.training_dataloader:state_dict()
    state.dataloader.micro_batch_size, state.dataloader.world_size = engine.micro_batch_size, engine.world_size
  end
  return state
end

-- engine.json's text, refused unless it decodes back and fits what a load reads.
local function engine_json(state)
  local ok, text = pcall(json.encode, state, 1)
  if not ok then zl.raise('save_checkpoint: engine.json cannot hold the state: ' .. tostring(text)) end
  text = text .. '\n'
  if #text > verify.ENGINE_JSON_MAX then
    zl.raise(fmt('save_checkpoint: engine.json would be %d bytes, more than the %d a load reads (a client_state '
      .. 'that large belongs in a file of its own)', #text, verify.ENGINE_JSON_MAX))
  end
  local back
  ok, back = pcall(json.decode, text, 'engine.json')
  if ok then ok, back = pcall(verify.check_state, back, 'engine.json') end
  if not ok then zl.raise('save_checkpoint: engine.json would not load back: ' .. tostring(back)) end
  return text
end

--- engine:save_checkpoint(dir [, tag [, client_state [, {save_latest=true}]]]) -> path
function M.save(engine, dir, tag, client_state, opts)
  check_dir(dir, 'save_checkpoint')
  tag = tag or ('global_step' .. engine.global_steps)
  verify.tag(tag, 'save_checkpoint')
  client_state = client_state or {}
  verify.client_state(client_state)
  -- Gradients of a half-done accumulation window are not saved: a save
  -- there could not resume exactly, so it is refused.
  if engine.micro_steps % engine.gas ~= 0 then
    zl.raise(fmt('save_checkpoint: %d micro-steps into an accumulation window of %d (micro step %d); save after '
      .. 'engine:step() at a boundary', engine.micro_steps % engine.gas, engine.gas, engine.micro_steps))
  end
  local rank = engine.rank
  local final = join(dir, tag)
  local rng = rng_states(engine)
  -- Everything engine.json will hold, checked before any file is written.
  local ok, err, state = true, nil, nil
  if rank == 0 then
    ok, err = pcall(function()
      state = engine_state(engine, tag, client_state, rng)
      engine_json(state)
    end)
  end
  if not all_ok(engine, ok) then
    error(err or 'save_checkpoint: rank 0 refused the state (its message says why)', 0)
  end
  if rank == 0 then
    ok, err = pcall(core.mkdirs, dir)
    if ok then sweep(dir, 'save_checkpoint') end
  end
  local token = from_rank0(engine, core.getpid())
  local tmp = join(dir, fmt('.%s.tmp-%d', tag, token))
  -- The marker (beside the folder) before the folder, and gone only once the
  -- folder is: a save killed at any moment leaves nothing the sweep misses.
  local function discard()
    pcall(core.remove_tree, tmp)
    pcall(core.temp_unmark, tmp)
  end
  if rank == 0 and ok then
    ok, err = pcall(function()
      core.remove_tree(tmp)
      core.temp_mark(tmp)
      core.mkdirs(tmp)
    end)
  end
  if not all_ok(engine, ok) then
    if rank == 0 then discard() end
    error(err or fmt('save_checkpoint: rank 0 could not create %s', tmp), 0)
  end
  ok, err = write_model(engine, join(tmp, 'model.safetensors'))
  if ok and engine.zero then
    local wrote, e2 = pcall(write_shard, engine, join(tmp, fmt('optim_rank%d.safetensors', rank)))
    ok, err = wrote, (not wrote) and e2 or nil
  end
  if not all_ok(engine, ok) then
    if rank == 0 then discard() end
    error(err or 'save_checkpoint: another rank failed to write its part of the checkpoint (its message names it)', 0)
  end
  if rank == 0 then
    ok, err = pcall(M.finish, engine, tmp, state)
    if ok then
      ok, err = pcall(function()
        if core.exists(final) then
          -- One atomic swap: at no moment is there no folder named TAG.
          core.exchange(tmp, final)
          core.remove_tree(tmp)
        else
          core.rename(tmp, final)
        end
        core.temp_unmark(tmp)
        if not opts or opts.save_latest ~= false then core.write_file_atomic(join(dir, 'latest'), tag) end
      end)
    end
    if not ok then discard() end
  end
  if not all_ok(engine, ok) then
    error(err or fmt('save_checkpoint: rank 0 failed to complete %s (its message says why)', final), 0)
  end
  return final
end

-- Rank 0: engine.json with the manifest of every file the ranks wrote, then
-- the read-back: engine.json byte for byte and as a checkpoint (every field,
-- the manifest's files as they are on disk), and each safetensors header.
function M.finish(engine, tmp, state)
  local files = { 'model.safetensors' }
  if engine.zero then
    for r = 0, engine.zero.layout.P - 1 do files[#files + 1] = fmt('optim_rank%d.safetensors', r) end
  end
  state.manifest = {}
  for _, f in ipairs(files) do
    local crc, bytes = core.file_crc32(join(tmp, f), true)
    state.manifest[f] = { crc32 = crc, bytes = bytes }
  end
  local text = engine_json(state)
  local jpath = join(tmp, 'engine.json')
  core.write_file_atomic(jpath, text)
  core.write_file_atomic(jpath .. '.crc32', fmt('%d\n', core.crc32(text)))
  if verify.read(jpath, verify.ENGINE_JSON_MAX, 'save_checkpoint') ~= text then
    zl.raise(fmt('save_checkpoint: %s does not read back as written', jpath))
  end
  verify.open(tmp, false)
  for _, f in ipairs(files) do zl.safetensors_open(join(tmp, f)):close() end
end

local function bad(path, what, ...) zl.raise(fmt('load_checkpoint: %s: ' .. what, path, ...)) end

-- The saved partition against this engine's parameters (engine.json's own
-- consistency is verify's).
local function check_partition(path, so, z)
  local zi = so.zero
  if #zi.params ~= #z.entries then
    bad(path, 'the optimizer held %d parameters, it has %d now', #zi.params, #z.entries)
  end
  for i, e in ipairs(z.entries) do
    local sp = zi.params[i]
    if sp.name ~= e.name then
      bad(path, 'optimizer parameter %d is %s in the checkpoint and %s now (the model defines its parameters in '
        .. 'another order)', i, verify.show(sp.name), e.name)
    end
    if sp.numel ~= e.n then
      bad(path, '%s has %d elements in the checkpoint and %d now', e.name, sp.numel, e.n)
    end
  end
  return zi
end

-- The optimizer's state against this engine's: nothing is changed.
local function check_optimizer(engine, path, so)
  local opt, z = engine.optimizer, engine.zero
  if so.type ~= opt.__name then
    bad(path, 'it holds the state of a %s optimizer; this engine has %s', so.type, tostring(opt.__name))
  end
  check_partition(path, so, z)
  if #so.param_groups ~= #opt.param_groups then
    bad(path, 'the optimizer had %d param groups, it has %d now', #so.param_groups, #opt.param_groups)
  end
  -- Each saved hyperparameter replaces one of the group's, of the same kind.
  for gi, h in ipairs(so.param_groups) do
    local mine = opt.param_groups[gi]
    for k, v in pairs(h) do
      local cur, key = mine[k], fmt('engine.json: optimizer.param_groups[%d].%s', gi, k)
      if cur == nil or k == 'params' then bad(path, '%s is no hyperparameter of the %s optimizer', key, opt.__name) end
      if type(v) ~= type(cur) or (type(v) == 'table' and #v ~= #cur) then
        bad(path, '%s is %s, where the %s optimizer has %s', key, type(v) == 'table' and 'a list of ' .. #v or type(v),
          opt.__name, type(cur) == 'table' and 'a list of ' .. #cur or type(cur))
      end
    end
  end
  local mine = {}
  for _, k in ipairs(z:state_keys()) do mine[k] = true end
  for _, k in ipairs(so.tensor_keys) do
    if not mine[k] then bad(path, 'the %s optimizer has no state %q', opt.__name, k) end
  end
  -- Every shard holds the chunks engine.json says it does, f32, of their lengths.
  local zi = so.zero
  for q = 0, zi.partitions - 1 do
    local name = fmt('optim_rank%d.safetensors', q)
    local f = verify.call('load_checkpoint', zl.safetensors_open, join(path, name))
    local have = {}
    for _, it in ipairs(f:info()) do have[it.name] = it end
    f:close()
    for i, sp in ipairs(zi.params) do
      local _, own = layout.owned(sp.numel, sp.k, q)
      if own > 0 then
        local want = { 'param.' .. i }
        if so.state[tostring(i)] then
          for _, k in ipairs(so.tensor_keys) do want[#want + 1] = fmt('state.%d.%s', i, k) end
        end
        for _, t in ipairs(want) do
          local it = have[t]
          if not it or it.dtype ~= 'f32' or it.numel ~= own then
            bad(path, '%s should hold %s, f32 of %d elements (%s), and %s', name, t, own, sp.name,
              it and fmt('has %s of %d', it.dtype, it.numel) or 'has no such tensor')
          end
        end
      end
    end
  end
end

-- The engine reads its chunks of the saved ones, whatever partition saved them.
local function load_optimizer(engine, path, state)
  local opt, so = engine.optimizer, state.optimizer
  local params = {}
  for i, sp in ipairs(so.zero.params) do
    local sc = so.state[tostring(i)]
    params[i] = { numel = sp.numel, k = sp.k, step = sc and sc.step or 0 }
  end
  engine.zero.c:load_shards { folder = path, partitions = so.zero.partitions, params = params, keys = so.tensor_keys }
  for gi, h in ipairs(so.param_groups) do
    for k, v in pairs(h) do opt.param_groups[gi][k] = v end
  end
end

-- model.safetensors against the module: every tensor that will be read is
-- there with the element count it needs. Returns the open file and its
-- entries by name; nothing is changed.
local function open_module(engine, path, strict, masters)
  local z = engine.zero
  local f = zl.safetensors_open(join(path, 'model.safetensors'))
  local have = {}
  for _, it in ipairs(f:info()) do have[it.name] = it end
  local owned = {}
  if z then for _, e in ipairs(z.entries) do owned[e.name] = e end end
  local sd, order = engine.module:state_dict()
  local frozen = frozen_partitioned(engine)
  local ok, err = pcall(function()
    for _, name in ipairs(order) do
      local it, e = have[name], owned[name]
      local n = e and e.n or frozen[name] and frozen[name].numel or sd[name]:numel()
      if (e and masters) or (not e and (it or strict)) then
        if not it then bad(path, 'model.safetensors has no %s', name) end
        if it.numel ~= n then
          bad(path, 'model.safetensors holds %d elements of %s, the %s has %d', it.numel, name,
            e and 'parameter' or 'tensor', n)
        end
      end
    end
  end)
  if not ok then
    f:close()
    error(err, 0)
  end
  return f, have, owned
end

-- From model.safetensors: with masters = true, this rank's chunks of the
-- trained parameters into their masters; always, everything else whole
-- (buffers, frozen parameters, parameters outside the optimizer).
local function load_module(engine, f, have, owned, masters)
  local z = engine.zero
  local ok, err = true, nil
  if masters and z then
    ok, err = pcall(z.each_master, z, function(e)
      if e.own > 0 then zl.core.copy_range(e.mv, 0, f:read(e.name, e.lo, e.own), 0, e.own) end
    end, true)
  end
  if ok then
    ok, err = pcall(zl.no_grad, function()
      local sd, order = engine.module:state_dict()
      local frozen = frozen_partitioned(engine)
      for _, name in ipairs(order) do
        local fz = frozen[name]
        if fz then
          -- every rank reads the file: each keeps its own chunk of it
          fz.store:gather(fz.p)
          fz.p:copy_(f:read(name):reshape(fz.shape))
          fz.store:scatter(fz.p, 0)
        elseif not owned[name] and have[name] then
          local t = sd[name]
          t:copy_(f:read(name):reshape(t:shape()):to(t:device()))
        end
      end
    end)
  end
  f:close()
  if not ok then error(err, 0) end
  if masters and z then z:sync_working() end
end

-- The dataloader's position in this run's ranks and micro-batch.
local function dataloader_batches(engine, path, sd)
  local ws, mb = sd.world_size, sd.micro_batch_size
  local samples = (sd.batches or 0) * ws * mb
  local per = engine.world_size * engine.micro_batch_size
  if samples % per ~= 0 then
    bad(path, 'the dataloader had given %d samples of its pass (%d ranks x %d per batch); this run takes %d per '
      .. 'step of its %d ranks, which does not divide it', samples, ws, mb, per, engine.world_size)
  end
  return samples // per
end

-- The checkpoint folder to load: DIR/TAG, a tag from `latest` when none is
-- given; nil when there is neither.
local function find(dir, tag)
  if tag == nil then
    local lpath = join(dir, 'latest')
    local latest = verify.read(lpath, verify.LATEST_MAX)
    if not latest then
      io.stderr:write(fmt('zlua: load_checkpoint: no checkpoint in %s (no "latest" file); starting fresh\n', dir))
      return nil
    end
    tag = latest:match('^%s*(.-)%s*$')
    verify.tag(tag, 'load_checkpoint', lpath)
  else
    verify.tag(tag, 'load_checkpoint')
  end
  local path = join(dir, tag)
  local kind = core.path_kind(path)
  if kind == nil then zl.raise(fmt('load_checkpoint: %s does not exist', path)) end
  if kind ~= 'folder' then
    zl.raise(fmt('load_checkpoint: %s is a %s, not a checkpoint folder', path, kind))
  end
  return path
end

-- Every check first, then the changes: a refused checkpoint leaves the engine as it was.
local function load(engine, path, opts)
  local state = verify.open(path)
  local strict = opts.load_module_strict ~= false
  local with_optimizer = not opts.load_module_only and engine.optimizer and state.optimizer
    and opts.load_optimizer_states ~= false
  -- load_from_fp32_weights = false: the masters restart from the 16-bit weights.
  local masters = not with_optimizer or engine.config.zero_optimization.load_from_fp32_weights == false
  if with_optimizer then check_optimizer(engine, path, state.optimizer) end
  local batches
  if not opts.load_module_only and engine.training_dataloader and state.dataloader then
    batches = dataloader_batches(engine, path, state.dataloader)
  end
  local f, have, owned = open_module(engine, path, strict, masters)
  if with_optimizer then
    local ok, err = pcall(load_optimizer, engine, path, state)
    if not ok then
      f:close()
      error(err, 0)
    end
  end
  load_module(engine, f, have, owned, masters)
  if opts.load_module_only then return state end
  if engine.lr_scheduler and state.lr_scheduler and opts.load_lr_scheduler_states ~= false then
    engine.lr_scheduler:load_state_dict(state.lr_scheduler)
  end
  if engine.precision.scaler and state.loss_scaler then engine.precision.scaler:load(state.loss_scaler) end
  engine.global_steps, engine.global_samples = state.global_steps, state.global_samples
  engine.skipped_steps, engine.micro_steps = state.skipped_steps, state.micro_steps
  local g = state.rng[engine.rank + 1] or state.rng[1]
  core.generator_seed(nil, g.seed)
  core.generator_set_offset(nil, g.offset)
  if batches then engine.training_dataloader:load_state_dict { epoch = state.dataloader.epoch, batches = batches } end
  return state
end

--- engine:load_checkpoint(dir [, tag [, {load_optimizer_states=true,
--- load_lr_scheduler_states=true, load_module_only=false, load_module_strict=true}]])
--- -> path, client_state (nil, nil when dir has no `latest` and no tag is given).
--- Any world size and stage loads a checkpoint of any other. Every error
--- names the checkpoint's folder or file.
function M.load(engine, dir, tag, opts)
  check_dir(dir, 'load_checkpoint')
  opts = opts or {}
  if engine.rank == 0 then sweep(dir, 'load_checkpoint') end
  local path = find(dir, tag)
  if not path then return nil, nil end
  local ok, state = pcall(load, engine, path, opts)
  if not ok then
    local msg = tostring(state)
    -- A message of the loaders below (the scheduler's, the scaler's) gets the folder it came from.
    if not msg:find('load_checkpoint: ', 1, true) then msg = fmt('load_checkpoint: %s: %s', path, msg) end
    error(msg, 0)
  end
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
