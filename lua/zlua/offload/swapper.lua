--[[ zlua.offload.swapper: ZeRO-Infinity's optimizer state on NVMe
  (offload_optimizer.device = "nvme"). A rank's f32 masters and optimizer
  moments live in files under nvme_path, one file per sub-group of
  consecutive parameter chunks (at most sub_group_size elements): the master,
  then each state tensor, each region starting on a 4096-byte boundary. The
  optimizer step brings one sub-group at a time into aligned buffers
  (libaio, O_DIRECT), updates it, and writes it back; with pipeline_read the
  next sub-groups are read while this one is updated, and the next step's
  first ones during its forward and backward; with pipeline_write the writes
  run meanwhile (the last ones into the next forward). Buffers: buffer_count of them, each
  the size of the largest sub-group, so buffer_count // (tensors per
  sub-group) sub-groups fit in memory at once (one at least, two when
  pipelining).

  Nothing else keeps a resident copy: each() brings sub-groups in for
  checkpoints, loads and GatheredParameters the same way. ]]

local zl = require 'zlua'
local aio_mod = require 'zlua.offload.aio'

local fmt = string.format

local S = {}
S.__index = S

local BLOCK = 4096

local function round_block(bytes) return (bytes + BLOCK - 1) // BLOCK * BLOCK end

--- swapper.new(z, offload_cfg, aio_cfg, sub_group_size): z is the ZeRO state
--- (its layout entries, optimizer, rank).
function S.new(z, oc, aio_cfg, sub_group_size)
  local self = setmetatable({}, S)
  self.z = z
  self.keys = {}
  local probe = z.opt:init_state(zl.zeros(1))
  for k, v in pairs(probe) do if zl.is_tensor(v) then self.keys[#self.keys + 1] = k end end
  table.sort(self.keys)
  self.ntensors = 1 + #self.keys
  self.dir = aio_mod.swap_folder(oc.nvme_path, fmt('optimizer/rank%d', z.rank), 'offload_optimizer')
  self.aio = aio_mod.new(aio_cfg)
  self.pipeline = oc.pipeline_read or oc.pipeline_write
  self.pipeline_read, self.pipeline_write = oc.pipeline_read, oc.pipeline_write

  -- Sub-groups of consecutive entries.
  local groups, cur = {}, nil
  local cap = math.max(1, math.floor(sub_group_size))
  for _, e in ipairs(z.entries) do
    if not cur or cur.len + e.k > cap then
      cur = { entries = {}, off = e.off, len = 0 }
      groups[#groups + 1] = cur
    end
    cur.entries[#cur.entries + 1] = e
    e.sub = cur
    cur.len = cur.len + e.k
  end
  local maxlen = 0
  for i, g in ipairs(groups) do
    g.index = i
    g.path = fmt('%s/group%d.swp', self.dir, i)
    g.region = round_block(g.len * 4)
    maxlen = math.max(maxlen, g.len)
  end
  self.groups, self.maxlen = groups, maxlen
  local per = math.max(1, oc.buffer_count // self.ntensors)
  if self.pipeline then per = math.max(per, 2) end
  self.sets = {}
  for i = 1, per do
    local set = { tensors = {} }
    for t = 1, self.ntensors do
      set.tensors[t] = aio_mod.buffer(maxlen)
      set.tensors[t]:set_category('optimizer')
    end
    self.sets[i] = set
  end
  self.read_bytes, self.write_bytes, self.io_time = 0, 0, 0
  self.pending = {}             -- set index -> {group=, reqs=}: a write in flight
  return self
end

-- The region views of a set for sub-group g: master, then each state key.
local function views(set, g)
  local out = {}
  for t, buf in ipairs(set.tensors) do out[t] = buf:narrow(1, 1, g.len) end
  return out
end

-- Start reading (or writing) sub-group g's file through a buffer set.
local function transfer(self, set, g, write)
  local reqs = {}
  for t, v in ipairs(views(set, g)) do
    local off = (t - 1) * g.region
    reqs[t] = write and self.aio:write(g.path, v, off) or self.aio:read(g.path, v, off)
  end
  self[write and 'write_bytes' or 'read_bytes'] = self[write and 'write_bytes' or 'read_bytes']
    + self.ntensors * g.len * 4
  return reqs
end

local function wait_all(self, reqs)
  if not reqs then return end
  local t0 = zl.core.now()
  local first
  for _, r in ipairs(reqs) do
    local ok, err = pcall(r.wait, r)
    if not ok and not first then first = err end
  end
  self.io_time = self.io_time + (zl.core.now() - t0)
  if first then error('offload_optimizer: ' .. require('zlua.args').message(first), 0) end
end

-- Point the entries of g (and their optimizer state) at a buffer set.
local function bind(self, set, g)
  local v = views(set, g)
  for _, e in ipairs(g.entries) do
    local at = e.off - g.off
    e.mv = v[1]:narrow(1, at + 1, e.k)
    local st = self.z:state_of(e)
    for t, key in ipairs(self.keys) do st[key] = v[t + 1]:narrow(1, at + 1, e.k) end
  end
end

local function unbind(self, g)
  for _, e in ipairs(g.entries) do
    e.mv = nil
    local st = self.z:state_of(e)
    for _, key in ipairs(self.keys) do st[key] = nil end
  end
end

--- First write of every sub-group: masters from fill(e, master_view), moments zero.
function S:initialize(fill)
  local set = self.sets[1]
  for _, g in ipairs(self.groups) do
    for _, buf in ipairs(views(set, g)) do buf:zero_() end
    bind(self, set, g)
    for _, e in ipairs(g.entries) do fill(e, e.mv) end
    wait_all(self, transfer(self, set, g, true))
    unbind(self, g)
  end
end

--- Run fn(e, state) over every entry with its master and state in memory,
--- sub-group by sub-group; write back when `write`. `only` (a set of
--- entries) limits it to the sub-groups holding them.
function S:each(fn, write, only)
  self:drain()
  local set = self.sets[1]
  for _, g in ipairs(self.groups) do
    local wanted = not only
    if only then
      for _, e in ipairs(g.entries) do if only[e] then wanted = true end end
    end
    if wanted then
      wait_all(self, transfer(self, set, g, false))
      bind(self, set, g)
      local ok, err = pcall(function()
        for _, e in ipairs(g.entries) do
          if not only or only[e] then fn(e, self.z:state_of(e)) end
        end
      end)
      if ok and write then ok, err = pcall(wait_all, self, transfer(self, set, g, true)) end
      unbind(self, g)
      if not ok then error(err, 0) end
    end
  end
end

-- A buffer set holding nothing still needed: one without a write in flight
-- first; with wait, one whose write is then waited for.
local function free_set(self, owner, wait)
  for si = 1, #self.sets do
    if not owner[si] and not self.pending[si] then return si end
  end
  if not wait then return nil end
  for si = 1, #self.sets do
    if not owner[si] then
      wait_all(self, self.pending[si].reqs)
      self.pending[si] = nil
      return si
    end
  end
end

-- Start reading sub-group gi into a free set; false when none is free.
local function start_read(self, ready, owner, gi, wait)
  for si, w in pairs(self.pending) do
    if w.group == gi then   -- its last write must land before it is read back
      wait_all(self, w.reqs)
      self.pending[si] = nil
    end
  end
  local si = free_set(self, owner, wait)
  if not si then return false end
  owner[si] = gi
  ready[gi] = { si = si, reqs = transfer(self, self.sets[si], self.groups[gi], false) }
  return true
end

--- Wait for every read and write in flight; reads made ahead are dropped
--- (each() may change the files).
function S:drain()
  for si, w in pairs(self.pending) do
    wait_all(self, w.reqs)
    self.pending[si] = nil
  end
  for _, r in pairs(self.ready or {}) do wait_all(self, r.reqs) end
  self.ready = nil
end

--- The optimizer step over every sub-group: update(e) for each entry while
--- its sub-group is in memory. With pipeline_read the next sub-groups are
--- read while this one is updated, and the next step's first ones during its
--- forward and backward; with pipeline_write a sub-group's write runs while
--- the next one is updated (and the last ones into the next forward).
function S:step(update)
  local groups = self.groups
  local ready = self.ready or {}     -- sub-group index -> {si, reqs}: read, or being read
  self.ready = nil
  local owner = {}                   -- set index -> the sub-group it holds for later
  for gi, r in pairs(ready) do owner[r.si] = gi end
  for i, g in ipairs(groups) do
    if not ready[i] then start_read(self, ready, owner, i, true) end
    local r = ready[i]
    ready[i] = nil
    wait_all(self, r.reqs)
    if self.pipeline_read then
      local j = i + 1
      while groups[j] and (ready[j] or start_read(self, ready, owner, j, true)) do j = j + 1 end
    end
    local set = self.sets[r.si]
    bind(self, set, g)
    for _, e in ipairs(g.entries) do update(e) end
    unbind(self, g)
    local w = transfer(self, set, g, true)
    owner[r.si] = nil
    if self.pipeline_write then self.pending[r.si] = { group = i, reqs = w } else wait_all(self, w) end
  end
  if self.pipeline_read then
    local j = 1
    while groups[j] and start_read(self, ready, owner, j, false) do j = j + 1 end
  end
  self.ready = ready
end

--- Bytes in memory (the buffers) and on disk.
function S:bytes()
  local mem = 0
  for _, set in ipairs(self.sets) do
    for _, t in ipairs(set.tensors) do mem = mem + t:numel() * 4 end
  end
  local disk = 0
  for _, g in ipairs(self.groups) do disk = disk + self.ntensors * g.region end
  return mem, disk
end

function S:close()
  self:drain()
  self.aio:close()
end

return S
