--[[ zlua.engine.checkpoint: engine:save_checkpoint / load_checkpoint /
  save_16bit_model. Layout of a checkpoint folder:

    DIR/latest                        the newest tag (text), written last
    DIR/TAG/model.safetensors         the module's state_dict (working dtype)
    DIR/TAG/optim_rank<R>.safetensors the optimizer's f32 parameters (the masters
                                      under mixed precision) as param.<i>, and its
                                      per-parameter state as state.<i>.<key>
    DIR/TAG/engine.json (+ .crc32)    counters, hyperparameters, scheduler, loss
                                      scaler, RNG and dataloader position, the
                                      client state, parameter names, and a manifest
                                      (bytes and CRC-32 of every file)

  Crash safety: a checkpoint is written into a hidden temporary folder, every
  file fsynced, and the folder renamed to TAG (swapped with an existing TAG
  in one atomic exchange); `latest` is replaced atomically after that. A save killed at any point leaves the previous checkpoint and
  `latest` as they were. Loading parses only JSON and safetensors (nothing is
  executed) and checks every file against the manifest first, so a truncated or
  damaged file is named before anything is changed. ]]

local zl = require 'zlua'
local json = require 'zlua.json'

local core = zl.core
local fmt = string.format

local M = {}

local FORMAT = 'zlua-checkpoint-1'

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

-- Parameter names in the optimizer's order, from the module (f32 masters map
-- back to their working parameters).
local function optimizer_param_names(engine)
  local by_id = {}
  for name, p in engine.module:named_parameters() do by_id[engine.precision:master_of(p):id()] = name end
  local names = {}
  for _, g in ipairs(engine.optimizer.param_groups) do
    for _, p in ipairs(g.params) do names[#names + 1] = by_id[p:id()] or json.null end
  end
  return names
end

-- The optimizer's state_dict split into tensors (for safetensors) and the
-- rest (for JSON).
local function split_optimizer(opt)
  local sd = opt:state_dict()
  local tensors, scalars = {}, {}
  local idx = 0
  for _, g in ipairs(opt.param_groups) do
    for _, p in ipairs(g.params) do
      idx = idx + 1
      tensors[#tensors + 1] = { 'param.' .. idx, p }
    end
  end
  for i, st in pairs(sd.state) do
    local rest = {}
    local keys = {}
    for k in pairs(st) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = st[k]
      if zl.is_tensor(v) then tensors[#tensors + 1] = { fmt('state.%d.%s', i, k), v } else rest[k] = v end
    end
    scalars[tostring(i)] = rest
  end
  return tensors, { state = scalars, param_groups = sd.param_groups }
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
  core.mkdirs(dir)
  local final = join(dir, tag)
  local tmp = join(dir, fmt('.%s.tmp-%d', tag, core.getpid()))
  core.remove_tree(tmp)
  core.mkdirs(tmp)
  local ok, err = pcall(M.write_into, engine, tmp, tag, client_state)
  if not ok then
    core.remove_tree(tmp)
    error(err, 0)
  end
  if core.exists(final) then
    -- One atomic swap: at no moment is there no folder named TAG.
    core.exchange(tmp, final)
    core.remove_tree(tmp)
  else
    core.rename(tmp, final)
  end
  if not opts or opts.save_latest ~= false then core.write_file_atomic(join(dir, 'latest'), tag) end
  return final
end

-- Every file of a checkpoint into the folder tmp.
function M.write_into(engine, tmp, tag, client_state)

  local model_sd, order = engine.module:state_dict()
  local entries = {}
  for _, name in ipairs(order) do entries[#entries + 1] = { name, model_sd[name] } end
  local files = { 'model.safetensors' }
  zl.save_safetensors(join(tmp, 'model.safetensors'), entries, { format = FORMAT })

  local state = {
    format = FORMAT, tag = tag, rank = engine.rank, world_size = engine.world_size,
    precision = engine.precision.mode,
    global_steps = engine.global_steps, global_samples = engine.global_samples,
    skipped_steps = engine.skipped_steps, micro_steps = engine.micro_steps,
    client_state = client_state, config = engine.config.source or json.null,
  }
  if engine.optimizer then
    state.optimizer_type = engine.optimizer.__name
    local tensors, rest = split_optimizer(engine.optimizer)
    local name = fmt('optim_rank%d.safetensors', engine.rank)
    zl.save_safetensors(join(tmp, name), tensors, { format = FORMAT })
    files[#files + 1] = name
    state.optimizer = rest
    state.param_names = optimizer_param_names(engine)
  end
  if engine.lr_scheduler then state.lr_scheduler = engine.lr_scheduler:state_dict() end
  if engine.precision.scaler then state.loss_scaler = engine.precision.scaler:state() end
  local seed, offset = core.generator_state()
  state.rng = { seed = seed, offset = offset }
  if engine.training_dataloader then state.dataloader = engine.training_dataloader:state_dict() end
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
  for _, key in ipairs({ 'global_steps', 'global_samples', 'skipped_steps', 'micro_steps', 'world_size', 'rank' }) do
    if math.type(state[key]) ~= 'integer' then zl.raise(fmt('load_checkpoint: %s: %s is missing or not an integer', jpath, key)) end
  end
  if type(state.rng) ~= 'table' or math.type(state.rng.seed) ~= 'integer' or math.type(state.rng.offset) ~= 'integer' then
    zl.raise(fmt('load_checkpoint: %s: rng is missing or malformed', jpath))
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

local function load_optimizer(engine, path, state)
  local opt = engine.optimizer
  if state.optimizer_type ~= opt.__name then
    zl.raise(fmt('load_checkpoint: %s holds the state of a %s optimizer; this engine has %s', path,
      tostring(state.optimizer_type), tostring(opt.__name)))
  end
  local names = optimizer_param_names(engine)
  for i, name in ipairs(names) do
    if state.param_names[i] ~= name then
      zl.raise(fmt('load_checkpoint: %s: optimizer parameter %d is %s in the checkpoint and %s now (the model '
        .. 'defines its parameters in another order)', path, i, tostring(state.param_names[i]), tostring(name)))
    end
  end
  local fpath = join(path, fmt('optim_rank%d.safetensors', state.rank))
  local tensors = zl.load_safetensors(fpath)
  local sd = { state = {}, param_groups = state.optimizer.param_groups }
  local idx = 0
  for gi, g in ipairs(opt.param_groups) do
    local saved = sd.param_groups[gi]
    if not saved or #saved.params ~= #g.params then
      zl.raise(fmt('load_checkpoint: %s: param group %d holds %d parameters in the checkpoint, %d now', fpath, gi,
        saved and #saved.params or 0, #g.params))
    end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      local v = tensors['param.' .. idx]
      if not v then zl.raise(fmt('load_checkpoint: %s has no param.%d', fpath, idx)) end
      if table.concat(v:shape(), 'x') ~= table.concat(p:shape(), 'x') then
        zl.raise(fmt('load_checkpoint: %s: param.%d has shape %s, the parameter %s', fpath, idx,
          table.concat(v:shape(), 'x'), table.concat(p:shape(), 'x')))
      end
      zl.no_grad(function() p:copy_(v:reshape(p:shape())) end)
    end
  end
  for i, rest in pairs(state.optimizer.state) do
    local st = {}
    for k, v in pairs(rest) do st[k] = v end
    sd.state[tonumber(i)] = st
  end
  for name, t in pairs(tensors) do
    local i, key = name:match('^state%.(%d+)%.(.+)$')
    if i then
      local st = sd.state[tonumber(i)] or {}
      st[key] = t
      sd.state[tonumber(i)] = st
    end
  end
  opt:load_state_dict(sd)
  engine.precision:sync_working(opt)
end

--- engine:load_checkpoint(dir [, tag [, {load_optimizer_states=true,
--- load_lr_scheduler_states=true, load_module_only=false, load_module_strict=true}]])
--- -> path, client_state (nil, nil when dir has no `latest` and no tag is given).
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
  if state.world_size ~= engine.world_size then
    zl.raise(fmt('load_checkpoint: %s was saved by %d ranks and this run has %d; loading at another world size '
      .. 'arrives with ZeRO (issue 5)', path, state.world_size, engine.world_size))
  end
  local model = zl.load_safetensors(join(path, 'model.safetensors'))
  engine.module:load_state_dict(model, opts.load_module_strict ~= false)
  if opts.load_module_only then
    engine.precision:sync_masters()
    return path, state.client_state
  end
  if engine.optimizer and state.optimizer and opts.load_optimizer_states ~= false then
    load_optimizer(engine, path, state)
  else
    engine.precision:sync_masters()
  end
  if engine.lr_scheduler and state.lr_scheduler and opts.load_lr_scheduler_states ~= false then
    engine.lr_scheduler:load_state_dict(state.lr_scheduler)
  end
  if engine.precision.scaler and state.loss_scaler then engine.precision.scaler:load(state.loss_scaler) end
  engine.global_steps, engine.global_samples = state.global_steps, state.global_samples
  engine.skipped_steps, engine.micro_steps = state.skipped_steps, state.micro_steps
  core.generator_seed(nil, state.rng.seed)
  core.generator_set_offset(nil, state.rng.offset)
  if engine.training_dataloader and state.dataloader then engine.training_dataloader:load_state_dict(state.dataloader) end
  return path, state.client_state
end

--- engine:save_16bit_model(dir [, name = 'model.safetensors']): the module's
--- weights in their working dtype, one safetensors file. Returns its path.
function M.save_16bit_model(engine, dir, name)
  name = name or 'model.safetensors'
  core.mkdirs(dir)
  local sd, order = engine.module:state_dict()
  local entries = {}
  for _, k in ipairs(order) do entries[#entries + 1] = { k, sd[k] } end
  local path = join(dir, name)
  zl.save_safetensors(path, entries, { format = 'pt' })
  return path
end

M.FORMAT = FORMAT
return M
