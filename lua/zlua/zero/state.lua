--[[ zlua.zero.state: the engine's ZeRO model states, owned by the C engine
  (engine/zero, zlua/zero.h). This module translates the DeepSpeed config and
  the optimizer's param groups into the C config and hands the parameters
  over; every step after that is one C call (the hooks, buckets, gathers,
  swaps and the fused optimizer step all run in C). What remains here is the
  view the checkpoint code reads: each parameter's chunk description, and a
  walk over the masters and optimizer state. ]]

local zl = require 'zlua'
local registry = require 'zlua.zero.registry'

local core = zl.core
local fmt = string.format

local Z = {}
Z.__index = Z

local KINDS = { Adam = 'adam', AdamW = 'adam', Lamb = 'lamb', SGD = 'sgd' }
local DTYPES = { fp32 = 'f32', fp16 = 'f16', bf16 = 'bf16' }

--- Z.kind(name): the fused ZeRO kernel ('adam', 'lamb', 'sgd') of an optimizer class
--- name ('Adam', 'AdamW', 'Lamb', 'SGD'), nil for another.
function Z.kind(name) return KINDS[name] end

-- The C config from the checked DeepSpeed config.
function Z.c_config(cfg, kind, half)
  local zc = cfg.zero_optimization
  local wdtype = half or 'f32'
  return {
    stage = zc.stage, optimizer = kind, dtype = wdtype,
    grad_accum_dtype = DTYPES[cfg.data_types and cfg.data_types.grad_accum_dtype] or wdtype,
    reduce_bucket_size = math.floor(zc.reduce_bucket_size), allgather_bucket_size = math.floor(zc.allgather_bucket_size),
    overlap_comm = zc.overlap_comm, reduce_scatter = zc.reduce_scatter,
    ignore_unused_parameters = zc.ignore_unused_parameters,
    prescale_gradients = cfg.prescale_gradients, gradient_predivide_factor = cfg.gradient_predivide_factor,
    prefetch_bucket_size = zc.stage3_prefetch_bucket_size, max_live_parameters = zc.stage3_max_live_parameters,
    max_reuse_distance = zc.stage3_max_reuse_distance,
    param_persistence_threshold = zc.stage3_param_persistence_threshold,
    model_persistence_threshold = zc.stage3_model_persistence_threshold,
    use_all_reduce_for_fetch_params = zc.stage3_use_all_reduce_for_fetch_params,
    log_trace_cache_warnings = zc.log_trace_cache_warnings,
    sub_group_size = math.floor(zc.sub_group_size),
    offload_optimizer = zc.offload_optimizer, offload_param = zc.offload_param,
    aio = require('zlua.offload.aio').options(cfg.aio),
  }
end

--- Z.new{optimizer=, module=, config=, rank=, world=, half=, dist=}
function Z.new(o)
  local self = setmetatable({}, Z)
  local cfg, opt = o.config, o.optimizer
  self.opt, self.dist, self.half = opt, o.dist, o.half
  self.rank, self.world = o.rank, o.world
  local kind = Z.kind(opt.__name)
  if not kind then
    zl.raise(fmt('zlua.initialize: the optimizer %s has no fused ZeRO kernel; use Adam, AdamW, Lamb or SGD',
      tostring(opt.__name)))
  end
  self.kind = kind

  local names = {}
  for name, p in o.module:named_parameters() do names[p:id()] = name end
  -- Frozen parameters (requires_grad false) are not trained: they stay whole and are never stepped.
  local list, inits, seen_init = {}, {}, {}
  for gi, g in ipairs(opt.param_groups) do
    for _, p in ipairs(g.params) do
      if p:requires_grad() then
        list[#list + 1] = { tensor = p, group = gi, name = names[p:id()] or ('param' .. (#list + 1)) }
        local store = registry.init_store(p)
        if store and not seen_init[store] then
          seen_init[store] = true
          inits[#inits + 1] = store
        end
      end
    end
  end
  self.c = core.zero_new(Z.c_config(cfg, kind, o.half), list, opt.param_groups, inits)
  self.stage, self.layout_P, self.wdtype, self.keys = self.c:info()
  self.layout = { P = self.layout_P }
  self.entries = self.c:params()
  for i, e in ipairs(self.entries) do
    -- The script's own tensor objects, so that lookups by tensor find them.
    e.p = list[i].tensor
    registry.bind(e.p, self, e)
  end
  return self
end

--- The optimizer's hyperparameters (a scheduler may have changed them) into the C engine.
function Z:sync_hparams()
  for gi, g in ipairs(self.opt.param_groups) do self.c:set_hparams(gi, g) end
end

function Z:begin_forward() self.c:begin_forward() end
function Z:finish_backward() self.c:end_backward() end
function Z:zero_grads() self.c:zero_grad() end

--- One boundary: the overflow vote (check_overflow), the norm, clipping and
--- the step; returns overflow and the unscaled global norm.
function Z:step(loss_scale, clip, check_overflow)
  self:sync_hparams()
  local overflow, norm = self.c:step(loss_scale, clip, check_overflow)
  return overflow, norm
end

--- The names of the state tensors the optimizer keeps per chunk, sorted.
function Z:state_keys() return { table.unpack(self.keys) } end

--- fn(e, state) for every entry (those in `only`, a set of entries, when
--- given) with e.mv its f32 master chunk and state its step and state tensors
--- (nil before the first step); kept when `write`.
function Z:each_master(fn, write, only)
  local sel
  if only then
    sel = {}
    for e in pairs(only) do sel[e.index] = true end
  end
  local walked = {}
  self.c:each_chunk(write, sel, function(i, master, states)
    local e = self.entries[i]
    local steps = self.c:group_steps(e.group)
    local st = { step = steps }
    for j, key in ipairs(self.keys) do st[key] = states[j] end
    e.mv, e.st = master, st
    local ok, err = pcall(fn, e, steps > 0 and st or nil)
    e.mv, e.st = nil, nil
    walked[#walked + 1] = { e = e, st = st }
    if not ok then error(err, 0) end
  end)
  if write then
    local steps = {}
    for _, w in ipairs(walked) do
      local g = w.e.group
      steps[g] = math.max(steps[g] or 0, math.tointeger(w.st.step) or 0)
    end
    for g, s in pairs(steps) do self.c:set_group_steps(g, s) end
  end
end

--- The optimizer state of e outside a walk: its step, or nil before the first.
function Z:state_of(e)
  local steps = self.c:group_steps(e.group)
  return steps > 0 and { step = steps } or nil
end

function Z:sync_working() self.c:sync_working() end
function Z:gather(e) self.c:gather(e.p) end
function Z:release(e) self.c:release(e.p) end

--- The whole f32 master of a trained parameter (collective).
function Z:full_master(p)
  local r = registry.get(p)
  if not (r and r.state == self) then zl.raise('get_full_fp32_param: the tensor is not a parameter this engine trains') end
  return self.c:full_fp32(p)
end

--- The loss scale the step will divide the gradients by (the engine's, set
--- by it; 1 without one).
function Z:loss_scale() return self.scale_of and self.scale_of() or 1.0 end

--- One parameter's state, as DeepSpeed's deepspeed.utils gives it (the C
--- engine's zl_zero_full_grad and the rest): what is 'grad', 'fp32' or a
--- state key; whole is the full (collective) form, else this rank's part.
function Z:get(p, what, whole)
  local c = self.c
  if what == 'grad' then
    return whole and c:full_grad(p, self:loss_scale()) or c:local_grad(p, self:loss_scale())
  elseif what == 'fp32' then
    return whole and c:full_fp32(p) or c:local_fp32(p)
  end
  return whole and c:full_state(p, what) or c:local_state(p, what)
end

--- Writes one parameter's master ('fp32') or optimizer state (its key),
--- whole or this rank's part; every rank calls it.
function Z:set(p, what, value, whole)
  local c = self.c
  if what == 'fp32' then
    if whole then c:set_full_fp32(p, value) else c:set_local_fp32(p, value) end
  elseif whole then
    c:set_full_state(p, what, value)
  else
    c:set_local_state(p, what, value)
  end
end

--- Seconds spent in collectives.
function Z:comm_time() return self.c:memory().comm_seconds end

--- Bytes this rank holds, by kind (the categories of the ZeRO paper).
function Z:memory_report()
  local m = self.c:memory()
  local rep = { params = m.params, grads = m.grads, master = m.master, moments = m.moments,
    bucket_buffers = { reduce = m.reduce, allgather = m.allgather } }
  rep.buffers = m.reduce + m.allgather
  if m.swap > 0 then
    rep.bucket_buffers.swap = m.swap
    rep.buffers = rep.buffers + m.swap
  end
  if m.nvme > 0 then rep.nvme = m.nvme end
  rep.model_states = rep.params + rep.grads + rep.master + rep.moments
  rep.partition_elements = m.partition_elements
  rep.peak_live = m.peak_live
  rep.collectives = m.collectives
  rep.swap_read_bytes, rep.swap_write_bytes, rep.io_seconds = m.read_bytes, m.write_bytes, m.io_seconds
  rep.io_busy_seconds = m.io_busy_seconds
  return rep
end

return Z
