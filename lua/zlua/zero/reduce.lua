--[[ zlua.zero.reduce: the gradient path of every stage. A parameter's
  gradient-ready hook hands its finished gradient to the bucket (and drops it
  from the parameter, so no rank keeps a full gradient past its bucket); a
  bucket full of reduce_bucket_size elements is laid out chunk by chunk
  (partition q's chunks of every gradient together, in f32) and reduced:
  all-reduced in stages 0 and 1 (every rank keeps the full gradient), reduce-
  scattered in stages 2 and 3 (each rank receives only its partition;
  with reduce_scatter = false all-reduced, each rank keeping its part). With
  overlap_comm the collective runs while backward goes on, over two buffers
  used in turn. The reduced sum, divided by the world size, is added into
  the state's gradient buffer, so micro-steps accumulate there. ]]

local zl = require 'zlua'
local layout = require 'zlua.zero.layout'

local copy_range = zl.core.copy_range

local R = {}
R.__index = R

function R.new(z, cfg)
  local self = setmetatable({}, R)
  self.z = z
  self.P = z.layout.P
  self.partitioned = z.stage >= 2
  self.scatter = self.partitioned and cfg.reduce_scatter
  self.check_unused = not cfg.ignore_unused_parameters
  self.seen = {}
  self.cap = math.max(layout.ALIGN, math.floor(cfg.reduce_bucket_size) // self.P)
  self.overlap = cfg.overlap_comm
  self.pending, self.fill = {}, 0
  self.bufs, self.turn = {}, 0
  self.inflight = {}
  self.inv = 1.0 / z.world
  return self
end

-- A bucket buffer of P * len f32 elements (and the reduce-scatter output),
-- reused while it is large enough; a parameter larger than the bucket gets
-- one of its own size.
function R:buffer(len)
  self.turn = self.turn % 2 + 1
  local slot = self.bufs[self.turn]
  if slot and slot.job then self:finish(slot.job) end
  if not slot or slot.len < len then
    local want = math.max(len, self.cap)
    slot = { len = want, data = zl.empty(self.P * want), out = self.scatter and zl.empty(want) or nil }
    slot.data:set_category('comm')
    if slot.out then slot.out:set_category('comm') end
    self.bufs[self.turn] = slot
  end
  return slot
end

--- The gradient-ready hook's work: queue e's gradient, reducing the bucket first if it would overflow.
function R:add(e)
  self.seen[e] = true
  local g0 = e.p.grad
  e.p.grad = nil
  if not g0 then return end
  local g = g0:reshape(e.n)
  g0:release()
  if self.fill > 0 and self.fill + e.k > self.cap then self:flush() end
  self.pending[#self.pending + 1] = { e = e, g = g, boff = self.fill }
  self.fill = self.fill + e.k
  if self.fill >= self.cap then self:flush() end
end

--- Reduce what the bucket holds (at the end of backward, or when full).
function R:flush()
  local items, L = self.pending, self.fill
  if #items == 0 then return end
  self.pending, self.fill = {}, 0
  local slot = self:buffer(L)
  local view = slot.data:narrow(1, 1, self.P * L)
  for _, it in ipairs(items) do
    local e = it.e
    for q = 0, self.P - 1 do
      local lo, own = layout.owned(e.n, e.k, q)
      local at = q * L + it.boff
      if own > 0 then copy_range(view, at, it.g, lo, own) end
      if own < e.k then
        -- The padding: up to a whole chunk for a parameter smaller than P chunks.
        local pad = view:narrow(1, at + own + 1, e.k - own)
        pad:zero_()
        pad:release()
      end
    end
    it.g:release()
    it.g = nil
  end
  local job = { items = items, L = L, view = view, slot = slot }
  local dist = self.z.dist
  local t0 = zl.core.now()
  if self.scatter then
    job.out = slot.out:narrow(1, 1, L)
    job.req = dist.reduce_scatter(job.out, view, 'sum', self.overlap)
  elseif self.partitioned then
    job.out = view:narrow(1, self.z.rank * L + 1, L)
    job.req = dist.all_reduce(view, 'sum', self.overlap)
  else
    job.req = dist.all_reduce(view, 'sum', self.overlap)
  end
  self.z.comm_time = self.z.comm_time + (zl.core.now() - t0)
  slot.job = job
  if not self.overlap then self:finish(job) end
end

-- Wait for a bucket's collective and add its result into the gradient buffer.
function R:finish(job)
  if job.done then return end
  job.done = true
  job.slot.job = nil
  if self.overlap then
    local t0 = zl.core.now()
    job.req:wait()
    self.z.comm_time = self.z.comm_time + (zl.core.now() - t0)
  end
  local grads, S, inv = self.z.grads, self.z.layout.size, self.inv
  for _, it in ipairs(job.items) do
    local e = it.e
    if self.partitioned then
      copy_range(grads, e.off, job.out, it.boff, e.k, inv)
    else
      for q = 0, self.P - 1 do copy_range(grads, q * S + e.off, job.view, q * job.L + it.boff, e.k, inv) end
    end
  end
end

--- After backward: reduce the rest and wait for every collective. With
--- ignore_unused_parameters = false, a trained parameter that got no
--- gradient is an error (DeepSpeed's check at stage 2).
function R:drain()
  self:flush()
  for _, slot in ipairs(self.bufs) do
    if slot.job then self:finish(slot.job) end
  end
  local seen = self.seen
  self.seen = {}
  if self.check_unused then
    for _, e in ipairs(self.z.entries) do
      if not seen[e] then
        zl.raise(string.format('engine:backward: parameter %s received no gradient (the loss does not depend on it); '
          .. 'set zero_optimization.ignore_unused_parameters to true to allow this', e.name))
      end
    end
  end
end

--- Bytes of the bucket buffers (for memory_report).
function R:bytes()
  local b = 0
  for _, slot in ipairs(self.bufs) do
    b = b + slot.data:numel() * 4 + (slot.out and slot.out:numel() * 4 or 0)
  end
  return b
end

return R
