--[[ zlua.engine.checkpoint: engine:save_checkpoint / load_checkpoint /
  save_16bit_model. Every rank calls them. The folder, its files, the
  atomic write, the manifest, every check of what the engine owns and the
  re-partitioning on load are the engine's (zl_zero_save, zl_zero_ckpt_*:
  zlua/zero.h describes the layout), so a C host and a script load each
  other's checkpoints. Here is what is the script's: the module's tensors
  (model.safetensors: buffers, frozen parameters, and the parameters the
  engine gathers), the optimizer's param groups as Lua tables, the
  scheduler, the loss scaler, the dataloader's position and the client
  state, as engine.json members the engine writes as given; on load they
  are checked (zlua.engine.verify) before anything changes. ]]

local zl = require 'zlua'
local json = require 'zlua.json'
local registry = require 'zlua.zero.registry'
local verify = require 'zlua.engine.verify'

local core = zl.core
local fmt = string.format

local M = {}

local FORMAT = verify.FORMAT

local function join(a, b) return a:sub(-1) == '/' and a .. b or a .. '/' .. b end

-- A tag the engine checks, once it is a string the C side sees whole.
local function check_tag(tag, op)
  if tag == nil then return end
  if type(tag) ~= 'string' then zl.raise(fmt('%s: tag must be a string, got %s', op, type(tag))) end
  local nul = tag:find('\0', 1, true)
  if nul then
    zl.raise(fmt('%s: tag %s holds a NUL byte (byte %d), which would cut the folder name there', op,
      verify.show(tag), nul))
  end
end

local function check_dir(dir, op)
  if type(dir) ~= 'string' or dir == '' then zl.raise(op .. ': dir must be a folder path') end
  local nul = dir:find('\0', 1, true)
  if nul then zl.raise(fmt('%s: dir %s holds a NUL byte (byte %d), which would cut the path there', op,
    verify.show(dir), nul)) end
end

-- The ranks' agreement: true when ok is true on every rank.
local function all_ok(engine, ok)
  if engine.world_size == 1 then return ok end
  local t = zl.full({ 1 }, ok and 1 or 0, { device = engine.dist.device() })
  engine.dist.all_reduce(t, 'min')
  return t:item() > 0
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

-- The optimizer's param groups as engine.json keeps them: every key but params.
local function param_groups(opt)
  local groups = {}
  for gi, g in ipairs(opt.param_groups) do
    local h = {}
    for k, v in pairs(g) do
      if k ~= 'params' then h[k] = type(v) == 'table' and setmetatable({ table.unpack(v) }, json.array) or v end
    end
    groups[gi] = h
  end
  return setmetatable(groups, json.array)
end

-- engine.json's members that are the script's: the client state, the
-- scheduler, the loss scaler, the dataloader's position, the config's file.
local function members(engine, client_state)
  local m = {
    client_state = client_state,
    -- A config file name that is not UTF-8 (which JSON cannot hold) is left out rather than refusing the save.
    config = engine.config.source and utf8.len(engine.config.source) and engine.config.source or json.null,
  }
  if engine.lr_scheduler then m.lr_scheduler = engine.lr_scheduler:state_dict() end
  if engine.precision.scaler then m.loss_scaler = engine.precision.scaler:state() end
  if engine.training_dataloader then
    m.dataloader = engine.training_dataloader:state_dict()
    m.dataloader.micro_batch_size, m.dataloader.world_size = engine.micro_batch_size, engine.world_size
  end
  return m
end

local function encode(v)
  local ok, text = pcall(json.encode, v)
  if not ok then zl.raise('save_checkpoint: engine.json cannot hold the state: ' .. tostring(text)) end
  return text
end

--- engine:save_checkpoint(dir [, tag [, client_state [, {save_latest=true}]]]) -> path
function M.save(engine, dir, tag, client_state, opts)
  check_dir(dir, 'save_checkpoint')
  check_tag(tag, 'save_checkpoint')
  client_state = client_state or {}
  verify.client_state(client_state)
  -- Gradients of a half-done accumulation window are not saved: a save
  -- there could not resume exactly, so it is refused.
  if engine.micro_steps % engine.gas ~= 0 then
    zl.raise(fmt('save_checkpoint: %d micro-steps into an accumulation window of %d (micro step %d); save after '
      .. 'engine:step() at a boundary', engine.micro_steps % engine.gas, engine.gas, engine.micro_steps))
  end
  local z = engine.zero
  local args = {
    tag = tag,
    counts = { global_steps = engine.global_steps, global_samples = engine.global_samples,
               skipped_steps = engine.skipped_steps, micro_steps = engine.micro_steps },
    precision = engine.precision.mode,
    members = encode(members(engine, client_state)),
    keep_latest = opts ~= nil and opts.save_latest == false,
    write_model = function(path)
      local ok, err = write_model(engine, path)
      if not ok then error(err, 0) end
    end,
  }
  if z then
    args.optimizer = engine.optimizer.__name
    args.param_groups = encode(param_groups(engine.optimizer))
  end
  local ok, path = pcall(core.zero_save, z and z.c, dir, args)
  if not ok then zl.raise((tostring(path):gsub('^[^\n]-:%d+: ', '', 1))) end
  return path
end

local function bad(path, what, ...) zl.raise(fmt('load_checkpoint: %s: ' .. what, path, ...)) end

-- The saved param groups against this optimizer's (the engine has checked
-- their count and form): each saved hyperparameter replaces one of the
-- group's, of the same kind. Nothing is changed.
local function check_groups(engine, path, so)
  local opt = engine.optimizer
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
end

-- model.safetensors against the module: every tensor read from it here (all
-- but the engine's parameters, which the engine checks) is there with the
-- element count it needs. Returns the open file and its entries by name;
-- nothing is changed.
local function open_module(engine, path, strict)
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
      if not e and (it or strict) then
        if not it then bad(path, 'model.safetensors has no %s', name) end
        if it.numel ~= n then bad(path, 'model.safetensors holds %d elements of %s, the tensor has %d', it.numel, name, n) end
      end
    end
  end)
  if not ok then
    f:close()
    error(err, 0)
  end
  return f, have, owned
end

-- From model.safetensors, whole, what is not the engine's (buffers, frozen
-- parameters, parameters outside the optimizer).
local function load_module(engine, f, have, owned)
  local ok, err = pcall(zl.no_grad, function()
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
  f:close()
  if not ok then error(err, 0) end
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

-- Every check first (the engine's, then the script's), then the changes: a
-- refused checkpoint leaves the engine as it was.
local function load(engine, c, opts, with_optimizer)
  local path = c:path()
  local state = json.decode(c:json(), path .. '/engine.json')
  verify.check_members(state, path .. '/engine.json')
  with_optimizer = with_optimizer and state.optimizer ~= nil
  if with_optimizer then check_groups(engine, path, state.optimizer) end
  local batches
  if not opts.load_module_only and engine.training_dataloader and state.dataloader then
    batches = dataloader_batches(engine, path, state.dataloader)
  end
  local f, have, owned = open_module(engine, path, opts.load_module_strict ~= false)
  local ok, err = pcall(c.load, c)
  if not ok then
    f:close()
    error(err, 0)
  end
  if with_optimizer then
    local groups = engine.optimizer.param_groups
    for gi, h in ipairs(state.optimizer.param_groups) do
      for k, v in pairs(h) do groups[gi][k] = type(v) == 'table' and { table.unpack(v) } or v end
    end
  end
  load_module(engine, f, have, owned)
  if opts.load_module_only then return state end
  if engine.lr_scheduler and state.lr_scheduler and opts.load_lr_scheduler_states ~= false then
    engine.lr_scheduler:load_state_dict(state.lr_scheduler)
  end
  if engine.precision.scaler and state.loss_scaler then engine.precision.scaler:load(state.loss_scaler) end
  engine.global_steps, engine.global_samples = state.global_steps, state.global_samples
  engine.skipped_steps, engine.micro_steps = state.skipped_steps, state.micro_steps
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
  check_tag(tag, 'load_checkpoint')
  opts = opts or {}
  local with_optimizer = not opts.load_module_only and engine.optimizer ~= nil and opts.load_optimizer_states ~= false
  local z = engine.zero
  local ok, c = pcall(core.zero_ckpt_open, z and z.c, dir, {
    tag = tag, optimizer = engine.optimizer and engine.optimizer.__name, skip_optimizer = not with_optimizer,
    -- load_from_fp32_weights = false: the masters restart from the 16-bit weights.
    masters_from_model = engine.config.zero_optimization.load_from_fp32_weights == false,
    keep_generator = opts.load_module_only,
  })
  if not ok then zl.raise((tostring(c):gsub('^[^\n]-:%d+: ', '', 1))) end
  if not c then return nil, nil end
  local state
  ok, state = pcall(load, engine, c, opts, with_optimizer)
  local path = c:path()
  c:close()
  if not ok then
    local msg = tostring(state):gsub('^[^\n]-:%d+: ', '', 1)
    -- A message of the loaders below (the scheduler's, the scaler's) gets the folder it came from.
    if not msg:find('load_checkpoint: ', 1, true) then msg = fmt('load_checkpoint: %s: %s', path, msg) end
    zl.raise(msg)
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
