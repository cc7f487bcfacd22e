--[[ zlua.zero.state: the model states of one rank under ZeRO stage 0-3, and
  the optimizer step over them. Buffers (S = the rank's partition, P chunks
  per parameter, see zlua.zero.layout):
    master  f32 [S]      this rank's chunks of every trained parameter; the
                         optimizer steps one view per parameter (its chunk)
    moments              the optimizer's own state, made for those views
                         (master and moments live in files under nvme_path
                         with offload_optimizer.device = "nvme", brought in a
                         sub-group at a time: zlua.offload.swapper)
    grads   [S] or [P*S] stages 0-1: the full gradient (partition q at q*S);
                         stages 2-3: this rank's partition only
    full    [P*S]        stages 0-2: the working parameters, each padded to
                         P*k so that every chunk is one slice; the modules'
                         parameters are views of it (in f32 at stage 0 it is
                         the master itself)
    work    [S]          stage 3 in bf16/fp16: this rank's working chunks
                         (with offload_param.device = "nvme" only those within
                         max_in_cpu; the rest live in a file: zlua.offload.params)
  Under bf16/fp16 the optimizer writes each chunk's rounded value into the
  working buffer in the same fused pass; stages 1-2 then all-gather the
  chunks in buckets of allgather_bucket_size, stage 3 gathers a parameter
  when an op is about to read it (zlua.zero.params). ]]

local zl = require 'zlua'
local layout = require 'zlua.zero.layout'
local reduce = require 'zlua.zero.reduce'
local registry = require 'zlua.zero.registry'
local wire = require 'zlua.zero.wire'

local core = zl.core
local fmt = string.format
local copy_range = core.copy_range

local Z = {}
Z.__index = Z

local DTYPES = { fp32 = 'f32', fp16 = 'f16', bf16 = 'bf16' }
local SIZE = { f32 = 4, f16 = 2, bf16 = 2 }

-- A flat view of a parameter's data, outside autograd (to be released).
local function flat_of(p, n)
  local d = p:detach()
  local f = d:view(n)
  d:release()
  return f
end

--- Z.new{optimizer=, module=, config=, rank=, world=, half=, dist=}
function Z.new(o)
  local self = setmetatable({}, Z)
  local cfg = o.config
  local zc = cfg.zero_optimization
  self.stage, self.world, self.rank = zc.stage, o.world, o.rank
  self.dist, self.opt, self.half = o.dist, o.optimizer, o.half
  self.wdtype = o.half or 'f32'
  self.gdtype = DTYPES[cfg.data_types and cfg.data_types.grad_accum_dtype] or self.wdtype
  self.comm_time = 0
  self.allgather_cap = math.max(layout.ALIGN, math.floor(zc.allgather_bucket_size))
  local P = self.stage == 0 and 1 or self.world
  local q = self.stage == 0 and 0 or self.rank

  if self.stage >= 1 and self.opt.__name == 'Lamb' then
    zl.raise(fmt('zlua.initialize: Lamb scales each parameter by its own trust ratio, which needs the whole '
      .. 'parameter; ZeRO stage %d splits parameters over ranks (use stage 0, or Adam/AdamW/SGD)', self.stage))
  end

  local names = {}
  for name, p in o.module:named_parameters() do names[p:id()] = name end
  local list, seen = {}, {}
  for gi, g in ipairs(self.opt.param_groups) do
    for _, p in ipairs(g.params) do
      if seen[p] then
        zl.raise(fmt('zlua.initialize: parameter %s appears in more than one place of the optimizer\'s param groups '
          .. '(groups %d and %d)', names[p:id()] or '?', seen[p], gi))
      end
      seen[p] = gi
    end
  end
  -- Frozen parameters (requires_grad false) are not trained: they stay whole and are never stepped.
  for gi, g in ipairs(self.opt.param_groups) do
    for _, p in ipairs(g.params) do
      if not p:requires_grad() then goto frozen end
      local info = registry.init_record(p)
      local dt = info and info.dtype or p:dtype()
      if dt ~= 'f32' then
        zl.raise(fmt('zlua.initialize: parameter %s is %s; the engine makes its working copies from f32 parameters',
          names[p:id()] or '?', dt))
      end
      list[#list + 1] = { tensor = p, numel = info and info.n or p:numel(), shape = info and info.shape or p:shape(),
        group = gi, name = names[p:id()] or ('param' .. (#list + 1)) }
      ::frozen::
    end
  end
  local L = layout.new(list, P, q)
  self.layout, self.entries = L, L.entries
  local S = L.size
  for _, e in ipairs(self.entries) do
    if self.stage < 3 and registry.init_record(e.p) then
      zl.raise(fmt('zlua.initialize: %s was built by zlua.zero.Init (partitioned for stage 3) and the config '
        .. 'asks for stage %d', e.name, self.stage))
    end
  end
  -- Offload needs stage 1 or more, as in DeepSpeed (zlua.config warns at stage 0).
  self.nvme = zc.offload_optimizer.device == 'nvme' and self.stage >= 1
  self.pnvme = zc.offload_param.device == 'nvme' and self.stage == 3
  self.f32_copy = not self.half and (self.nvme or self.pnvme or self.stage == 1 or self.stage == 2)
  self.states = {}

  -- e's first master values (its chunk, zero-padded) into dst.
  local function fill(e, dst, at)
    local info = registry.init_record(e.p)
    if e.own > 0 then
      local flat = info and registry.chunk(info) or flat_of(e.p, e.n)
      copy_range(dst, at, flat, info and 0 or e.lo, e.own)
      flat:release()
    end
    if info then registry.drop_chunk(info) end
  end
  if not self.nvme then
    self.master = zl.zeros(S)
    self.master:set_category('optimizer')
    for _, e in ipairs(self.entries) do fill(e, self.master, e.off) end
  end

  if self.stage <= 2 then
    if self.stage == 0 and not self.half then
      self.full = self.master
    else
      self.full = zl.zeros(P * S, self.wdtype)
      self.full:set_category('params')
    end
  elseif self.half or self.nvme or self.pnvme then
    local resident = S
    if self.pnvme then
      self.pswap = require('zlua.offload.params').new(self, zc.offload_param, cfg.aio)
      resident = self.pswap.resident
    end
    self.work = zl.zeros(resident, self.wdtype)
    self.work:set_category('params')
    if self.master and not self.nvme then
      for _, e in ipairs(self.entries) do self:store_working(e, self.master:narrow(1, e.off + 1, e.k)) end
    end
  end

  -- The optimizer steps one chunk view per parameter, in its groups' order
  -- (placeholders stand in its groups for masters that live on NVMe).
  local idx = 0
  for _, g in ipairs(self.opt.param_groups) do
    for i, p in ipairs(g.params) do
      local e = self.entries[idx + 1]
      if e and e.p == p then
        idx = idx + 1
        e.mv = self.master and self.master:narrow(1, e.off + 1, e.k)
        e.wv = self:chunk_of(e)
        g.params[i] = e.mv or zl.empty(0)
      end
    end
  end
  if self.nvme then
    local oc = zc.offload_optimizer
    self.swapper = require('zlua.offload.swapper').new(self, oc, cfg.aio, zc.sub_group_size)
    for _, e in ipairs(self.entries) do self.states[e.index] = { step = 0 } end
    local work = self.work
    self.swapper:initialize(function(e, mv)
      fill(e, mv, 0)
      if work then self:store_working(e, mv) end
    end)
  end

  -- The gradient buffer last: with NVMe offload zero.Init's chunks have gone
  -- to the files by now, so the two are never in memory together.
  local gsize = self.stage == 1 and P * S or S
  self.grads = zl.zeros(gsize, self.gdtype)
  self.grads:set_category('grads')
  self.gbase = self.stage == 1 and q * S or 0
  for _, e in ipairs(self.entries) do e.gv = self.grads:narrow(1, self.gbase + e.off + 1, e.k) end

  if self.stage <= 2 then
    zl.no_grad(function()
      for _, e in ipairs(self.entries) do
        local base = P * e.off
        if self.full ~= self.master then
          local flat = flat_of(e.p, e.n)
          copy_range(self.full, base, flat, 0, e.n)
          flat:release()
        end
        local region = self.full:narrow(1, base + 1, e.n)
        local data = region:view(e.shape)
        e.p:set_data(data)
        region:release()
        data:release()
      end
    end)
  else
    self.params = require('zlua.zero.params').new(self, zc)
  end

  self.reducer = reduce.new(self, zc)
  for _, e in ipairs(self.entries) do
    -- Gradients reach the bucket unrounded; they are rounded once, after the sum over ranks.
    e.p:set_grad_dtype('f32')
    e.p:register_hook(function() self.reducer:add(e) end)
    registry.bind(e.p, self, e)
  end
  return self
end

--- The working chunk of e that the optimizer writes (a k-element slice;
--- nil for a chunk that lives on NVMe).
function Z:chunk_of(e)
  local P, q = self.layout.P, self.layout.q
  if self.full then return self.full:narrow(1, P * e.off + q * e.k + 1, e.k) end
  if e.pswap then return nil end
  return self.work and self.work:narrow(1, e.off + 1, e.k) or e.mv
end

--- e's working chunk from src (f32, k elements; rounded to the working dtype).
function Z:store_working(e, src)
  if e.pswap then
    local buf, commit = self.pswap:write_buffer(e)
    copy_range(buf, 0, src, 0, e.k)
    commit()
  else
    copy_range(self:chunk_of(e), 0, src, 0, e.k)
  end
end

--- e's working chunk to read (stage 3 gathers from it) and a function to call
--- once the read is over (it gives back the swap buffer of an NVMe chunk).
function Z:working_chunk(e)
  if e.pswap then return self.pswap:read(e) end
  return e.wv, nil
end

--- The optimizer state of e's chunk (nil before its first step).
function Z:state_of(e) return self.states[e.index] end

--- The names of the state tensors the optimizer keeps per chunk, sorted.
function Z:state_keys()
  if self.swapper then return { table.unpack(self.swapper.keys) } end
  local keys = {}
  for _, st in pairs(self.states) do
    for k, v in pairs(st) do if zl.is_tensor(v) then keys[#keys + 1] = k end end
    break
  end
  table.sort(keys)
  return keys
end

--- e's optimizer state, made now when it has none (a checkpoint being loaded).
function Z:ensure_state(e)
  local st = self.states[e.index]
  if not st then
    st = self.opt:init_state(e.mv)
    st.step = 0
    self.states[e.index] = st
    self.opt.state[e.mv:id()] = st
  end
  return st
end

--- Drop e's optimizer state (a checkpoint saved before its first step).
function Z:drop_state(e)
  if self.nvme then
    local st = self.states[e.index]
    st.step = 0
    for _, v in pairs(st) do if zl.is_tensor(v) then v:zero_() end end
    return
  end
  self.states[e.index] = nil
  self.opt.state[e.mv:id()] = nil
end

-- One optimizer update of e's chunk (its master in memory).
function Z:update_entry(e, scale)
  local st = self.states[e.index] or self:ensure_state(e)
  st.step = st.step + 1
  local wv, commit = e.wv, nil
  if e.pswap then wv, commit = self.pswap:write_buffer(e) end
  self.opt:update(e.mv, e.gv, st, self.opt.param_groups[e.group], scale, self.half and wv or nil)
  if self.f32_copy then copy_range(wv, 0, e.mv, 0, e.k) end
  if commit then commit() end
end

--- fn(e, state) for every entry (those in `only` when given) with its master
--- and state in memory; written back to NVMe afterwards when `write`.
function Z:each_master(fn, write, only)
  if self.swapper then return self.swapper:each(fn, write, only) end
  for _, e in ipairs(self.entries) do
    if not only or only[e] then fn(e, self.states[e.index]) end
  end
end

-- Stages 1-2: every rank's chunks into every rank's full buffer, in buckets
-- of at most allgather_bucket_size elements (the send and receive buffers).
function Z:allgather_full()
  local P, q, es = self.layout.P, self.layout.q, self.entries
  if P == 1 then return end
  local cap = math.max(layout.ALIGN, self.allgather_cap // P)
  local i = 1
  local t0 = core.now()
  while i <= #es do
    local j, len = i, es[i].k
    while j < #es and len + es[j + 1].k <= cap do j, len = j + 1, len + es[j + 1].k end
    if not self.gsend or self.gsend:numel() < len then
      self.gsend = zl.empty(len, self.wdtype)
      self.grecv = zl.empty(P * len, self.wdtype)
      self.gsend:set_category('comm')
      self.grecv:set_category('comm')
    end
    local send, recv = self.gsend:narrow(1, 1, len), self.grecv:narrow(1, 1, P * len)
    local base = es[i].off
    for k = i, j do
      local e = es[k]
      copy_range(send, e.off - base, self.full, P * e.off + q * e.k, e.k)
    end
    self.dist.all_gather(recv, send)
    for k = i, j do
      local e = es[k]
      for r = 0, P - 1 do
        if r ~= q then copy_range(self.full, P * e.off + r * e.k, recv, r * len + e.off - base, e.k) end
      end
    end
    i = j + 1
  end
  self.comm_time = self.comm_time + (core.now() - t0)
end

--- After backward: the last bucket reduced and every collective waited for.
function Z:finish_backward() self.reducer:drain() end

--- Stage 3: a new forward begins (the parameter trace restarts).
function Z:begin_forward()
  if self.params then self.params:begin_forward() end
end

-- This rank's share of the gradient: what it checks and what its optimizer reads.
function Z:own_grads()
  if self.stage == 1 then return self.grads:narrow(1, self.gbase + 1, self.layout.size) end
  return self.grads
end

--- fp16: an inf or NaN on any rank (every rank gets the same answer).
function Z:overflow()
  local found = core.grad_nonfinite({ self:own_grads() })
  if self.world == 1 then return found end
  local t = zl.full({ 1 }, found and 1 or 0)
  self.dist.all_reduce(t, 'max')
  return t:item() > 0
end

--- The squared L2 norm of the whole (averaged, still loss-scaled) gradient:
--- each rank's partition summed in f64, the partitions added in rank order.
function Z:grad_norm_sq()
  local s = core.grad_norm_sq({ self:own_grads() })
  if self.layout.P == 1 then return s end
  local sum = 0.0
  for _, row in ipairs(wire.all_gather(self.dist, self.world, { s })) do sum = sum + row[1] end
  return sum
end

--- One optimizer step over this rank's chunks, then the working parameters
--- brought up to date on every rank.
function Z:step(grad_scale)
  if self.swapper then
    self.swapper:step(function(e) self:update_entry(e, grad_scale) end)
  else
    for _, e in ipairs(self.entries) do self:update_entry(e, grad_scale) end
  end
  if self.pswap then self.pswap:flush() end
  self:publish()
end

--- The working parameters from the masters' chunks (after a step or a load).
function Z:publish()
  if self.full then
    self:allgather_full()
  else
    self.params:after_step()
  end
end

--- After masters were loaded: the working chunks take their rounded values.
function Z:sync_working()
  if self.half or self.f32_copy then
    self:each_master(function(e) self:store_working(e, e.mv) end)
  end
  if self.pswap then self.pswap:flush() end
  self:publish()
end

function Z:zero_grads() self.grads:zero_() end

--- The whole f32 master of a trained parameter (gathered from every rank's
--- chunk; collective when the masters are partitioned).
function Z:full_master(p)
  local e = registry.get(p)
  e = e and e.state == self and e.entry
  if not e then zl.raise('get_full_fp32_param: the tensor is not a parameter this engine trains') end
  local chunk = zl.empty(e.k)
  self:each_master(function(x) copy_range(chunk, 0, x.mv, 0, e.k) end, false, { [e] = true })
  if self.layout.P == 1 then return chunk:narrow(1, 1, e.n):view(e.shape) end
  local full = zl.empty(self.layout.P * e.k)
  self.dist.all_gather(full, chunk)
  return full:narrow(1, 1, e.n):view(e.shape)
end

--- Bytes this rank holds, by kind (the categories of the ZeRO paper).
function Z:memory_report()
  local ws, gs = SIZE[self.wdtype], SIZE[self.gdtype]
  local rep = { params = 0, grads = self.grads:numel() * gs, master = 0, moments = 0, buffers = 0 }
  if self.full then
    rep.params = self.full:numel() * ws
    if self.master and self.full ~= self.master then rep.master = self.master:numel() * 4 end
  else
    rep.params = (self.work and self.work:numel() * ws or 0) + self.params:gathered_bytes()
    if self.pswap then
      local mem, disk = self.pswap:bytes()
      rep.params = rep.params + mem
      rep.nvme = (rep.nvme or 0) + disk
    end
    rep.master = self.master and self.master:numel() * 4 or 0
  end
  for _, st in pairs(self.states) do
    for _, v in pairs(st) do
      if zl.is_tensor(v) then rep.moments = rep.moments + v:numel() * 4 end
    end
  end
  rep.bucket_buffers = { reduce = self.reducer:bytes(),
    allgather = self.gsend and (self.gsend:numel() + self.grecv:numel()) * ws or 0 }
  rep.buffers = rep.bucket_buffers.reduce + rep.bucket_buffers.allgather
  if self.swapper then
    -- Masters and moments are on NVMe; the swap buffers hold a sub-group at a time.
    local mem, disk = self.swapper:bytes()
    rep.bucket_buffers.swap = mem
    rep.buffers = rep.buffers + mem
    rep.nvme = (rep.nvme or 0) + disk
  end
  rep.model_states = rep.params + rep.grads + rep.master + rep.moments
  rep.partition_elements = self.layout.size
  return rep
end

return Z
