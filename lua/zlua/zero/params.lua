--[[ zlua.zero.params: stage 3's parameters. Each rank keeps only its chunk
  of every parameter; a parameter's data is empty until an op is about to
  read it (the use hook, in forward and in backward), when its P chunks are
  all-gathered into a whole tensor. The first micro-step records the order in
  which parameters are read; later ones follow it and gather the next
  parameters ahead (stage3_prefetch_bucket_size elements, asynchronously)
  while at most stage3_max_live_parameters elements are gathered. After an op
  a parameter is released unless it is persistent (at most
  stage3_param_persistence_threshold elements: gathered once per step and
  kept) or read again within stage3_max_reuse_distance elements of the trace.
  A trace that no longer matches is dropped and recorded again. ]]

local zl = require 'zlua'

local Q = {}
Q.__index = Q

function Q.new(z, zc)
  local self = setmetatable({}, Q)
  self.z = z
  self.P = z.layout.P
  self.prefetch = zc.stage3_prefetch_bucket_size
  self.persist = zc.stage3_param_persistence_threshold
  self.max_live = zc.stage3_max_live_parameters
  self.max_reuse = zc.stage3_max_reuse_distance
  self.fetch_allreduce = zc.stage3_use_all_reduce_for_fetch_params
  self.log_trace = zc.log_trace_cache_warnings
  self.steps = 0
  self.async = true
  self.live = 0                 -- elements of non-persistent parameters gathered or in flight
  self.peak_live = 0
  self.recording, self.trace, self.pos = {}, nil, 1
  self.empty = zl.empty(0, z.wdtype)
  local persisted = 0
  for _, e in ipairs(z.entries) do
    -- Small parameters stay whole, up to stage3_model_persistence_threshold elements in all.
    e.persistent = e.n <= self.persist and persisted + e.n <= zc.stage3_model_persistence_threshold
    if e.persistent then persisted = persisted + e.n end
    e.status = 'released'
    e.active = 0
    zl.no_grad(function() e.p:set_data(self.empty) end)
    e.p:set_category('params')
    e.p:register_use_hook(function(_, ev) return self:on_use(e, ev) end)
  end
  self:gather_persistent()
  return self
end

-- Start gathering e's chunks (asynchronously when prefetching). A chunk on
-- NVMe prefetched is only read ahead here; its gather follows in complete(),
-- in the trace's order on every rank like every other gather.
function Q:start(e, async)
  local out = zl.empty(self.P * e.k, self.z.wdtype)
  out:set_category('params')
  e.gathered = out
  e.status = 'inflight'
  if not e.persistent then
    self.live = self.live + e.n
    if self.live > self.peak_live then self.peak_live = self.live end
  end
  if e.pswap and async then
    e.read_src, e.read_req, e.src_done = self.z.pswap:read_async(e)
    e.async = false
    return
  end
  self:gather_from(e, async, self.z:working_chunk(e))
end

-- The collective of e's gather from its chunk src (done() gives an NVMe chunk's buffer back).
function Q:gather_from(e, async, src, done)
  local out = e.gathered
  local t0 = zl.core.now()
  if self.fetch_allreduce then
    -- Every rank's chunk in its place of a zeroed whole, summed.
    out:zero_()
    zl.core.copy_range(out, self.z.layout.q * e.k, src, 0, e.k)
    e.req = self.z.dist.all_reduce(out, 'sum', async)
  else
    e.req = self.z.dist.all_gather(out, src, async)
  end
  -- An NVMe chunk's buffer is given back once the gather no longer reads it.
  e.src_done = done
  if done and not async then
    done()
    e.src_done = nil
  end
  self.z.comm_time = self.z.comm_time + (zl.core.now() - t0)
  e.async = async
end

-- An NVMe chunk read ahead: wait for the read, then gather (blocking).
function Q:finish_read(e)
  local req, src, done = e.read_req, e.read_src, e.src_done
  e.read_req, e.read_src, e.src_done = nil, nil, nil
  local ok, err = pcall(req.wait, req)
  if not ok then
    done()
    error(err, 0)
  end
  self:gather_from(e, false, src, done)
end

-- e's data is the gathered tensor (waiting for the gather if needed).
function Q:complete(e)
  if e.status == 'available' then return end
  if e.status == 'released' then self:start(e, false) end
  if e.read_req then self:finish_read(e) end
  if e.async then
    local t0 = zl.core.now()
    e.req:wait()
    self.z.comm_time = self.z.comm_time + (zl.core.now() - t0)
  end
  if e.src_done then
    e.src_done()
    e.src_done = nil
  end
  e.req = nil
  local part = e.gathered:narrow(1, 1, e.n)
  local data = part:view(e.shape)
  zl.no_grad(function() e.p:set_data(data) end)
  part:release()
  data:release()
  e.status = 'available'
end

function Q:release(e)
  if e.status == 'released' then return end
  if e.read_req then
    pcall(e.read_req.wait, e.read_req)
    e.read_req, e.read_src = nil, nil
  end
  if e.status == 'inflight' and e.async then e.req:wait() end
  if e.src_done then
    e.src_done()
    e.src_done = nil
  end
  e.req = nil
  zl.no_grad(function() e.p:set_data(self.empty) end)
  e.gathered:release()
  e.gathered = nil
  e.status = 'released'
  if not e.persistent then self.live = self.live - e.n end
end

function Q:gather_persistent()
  for _, e in ipairs(self.z.entries) do
    if e.persistent then
      self:release(e)
      self:complete(e)
    end
  end
end

-- Gather what the trace says comes next, within the prefetch and live limits.
function Q:prefetch_from(pos)
  local budget = self.prefetch
  local t = self.trace
  for j = pos, #t do
    local e = t[j]
    if e.status == 'released' then
      if e.n > budget or self.live + e.n > self.max_live then return end
      if e.pswap and not self.z.pswap:available() then return end
      budget = budget - e.n
      self:start(e, self.async)
    end
  end
end

-- Keep e after its use when the trace reads it again soon.
function Q:reused_soon(e)
  local t = self.trace
  if not t then return false end
  local dist = 0
  for j = self.pos, #t do
    if t[j] == e then return dist <= self.max_reuse and self.live <= self.max_live end
    dist = dist + t[j].n
    if dist > self.max_reuse then return false end
  end
  return false
end

function Q:on_use(e, ev)
  if ev == 'before_forward' or ev == 'before_backward' then
    if self.trace then
      if self.trace[self.pos] ~= e then
        -- The model read parameters in another order: record afresh.
        if self.log_trace then
          io.stderr:write(string.format('zlua: ZeRO-3: invalidate trace cache @ step %d: expected parameter %s, got %s\n',
            self.steps, self.trace[self.pos] and self.trace[self.pos].name or '(end of trace)', e.name))
        end
        local rec = {}
        for j = 1, self.pos - 1 do rec[j] = self.trace[j] end
        self.trace, self.recording = nil, rec
      else
        self.pos = self.pos + 1
      end
    end
    if self.recording then self.recording[#self.recording + 1] = e end
    self:complete(e)
    e.active = e.active + 1
    if self.trace then self:prefetch_from(self.pos) end
  elseif ev == 'after_forward' or ev == 'after_backward' then
    e.active = e.active - 1
    if e.active == 0 and not e.persistent and not self:reused_soon(e) then self:release(e) end
  end
end

--- A forward begins: the trace restarts (the first micro-step's record becomes the trace).
function Q:begin_forward()
  if self.recording and #self.recording > 0 then
    self.trace, self.recording = self.recording, nil
  end
  self.pos = 1
  if self.trace then self:prefetch_from(1) end
end

--- After the optimizer step every gathered copy is stale: release them and
--- gather the persistent parameters again.
function Q:after_step()
  self.steps = self.steps + 1
  for _, e in ipairs(self.z.entries) do
    if not e.persistent then self:release(e) end
  end
  self:gather_persistent()
end

--- Gather every parameter (GatheredParameters and checkpoints of a whole model).
function Q:gather(e) self:complete(e) end

function Q:gathered_bytes()
  local b = 0
  for _, e in ipairs(self.z.entries) do
    if e.gathered then b = b + e.gathered:numel() * (self.z.wdtype == 'f32' and 4 or 2) end
  end
  return b
end

return Q
