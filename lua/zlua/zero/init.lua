--[[ zlua.zero: DeepSpeed's zero.Init and zero.GatheredParameters.

  local model = zlua.zero.Init(config, function() return nn.GPT{...} end)
    Builds the model with every parameter partitioned as it is made (at the
    end of its module's constructor): each rank keeps only its chunk, so no
    rank ever holds the whole model. Every rank draws the same random numbers
    as a one-process build with the same seed, so the values are identical.
    Partitions only when the config says stage 3 (otherwise fn just runs).
    With offload_param.device = "nvme" (DeepSpeed's remote_device) the chunks
    go to a file under its nvme_path as they are made, so not even the
    partitions stay in memory.

  zlua.zero.GatheredParameters(params, fn [, modifier_rank])
    Gathers the parameters (a tensor or a list), runs fn, then partitions
    them again. With modifier_rank, that rank's changes are broadcast and kept
    (in the f32 masters too when an engine owns the parameters); without it a
    partitioned parameter's changes are discarded, as in DeepSpeed. At stages
    0-2 the parameters are whole already and fn changes them in place (kept
    until the next step rewrites them from the masters, at stage 0 in f32 for
    good: there the parameters are the masters). Returns fn's results. ]]

local zl = require 'zlua'
local layout = require 'zlua.zero.layout'
local registry = require 'zlua.zero.registry'

local fmt = string.format

local zero = {}

local dist = require 'zlua.dist'

-- Chunks kept on NVMe: one file, each chunk at a 4096-byte boundary.
local Store = {}
Store.__index = Store

local function new_store(oc, aio_cfg, rank)
  local aio = require 'zlua.offload.aio'
  local path = aio.swap_folder(oc.nvme_path, fmt('init/rank%d', rank), 'zero.Init (offload_param)') .. '/chunks.swp'
  return setmetatable({ aio = aio.new(aio_cfg), path = path, next = 0, buffer = aio.buffer }, Store)
end

function Store:place(k)
  local off = self.next
  self.next = off + (k * 4 + 4095) // 4096 * 4096
  return off
end

function Store:write(offset, t) self.aio:write(self.path, t, offset):wait() end

function Store:read(offset, k)
  local t = self.buffer(k)
  self.aio:read(self.path, t, offset):wait()
  return t
end

-- Keep this rank's chunk of p (f32; in memory or in the store) and release p's data.
local function partition(p, P, q, store)
  local n, shape = p:numel(), p:shape()
  local k = layout.chunk(n, P)
  local lo, own = layout.owned(n, k, q)
  -- The chunk becomes the rank's f32 master when an engine takes the model over.
  local chunk = zl.zeros(k)
  chunk:set_category('optimizer')
  if own > 0 then
    local d = p:detach()
    local flat = d:reshape(n)
    zl.core.copy_range(chunk, 0, flat, lo, own)
    flat:release()
    d:release()
  end
  zl.no_grad(function() p:set_data(zl.empty(0)) end)
  local rec = { chunk = chunk, n = n, shape = shape, dtype = 'f32', P = P, k = k }
  if store then
    rec.remote = { store = store, offset = store:place(k) }
    store:write(rec.remote.offset, chunk)
    chunk:release()
    rec.chunk = nil
  end
  registry.set_init(p, rec)
end

function zero.Init(cfg_src, fn)
  if type(fn) ~= 'function' then zl.raise('zero.Init(config, fn): fn must be a function that builds the model') end
  local n, q = dist.world_size(), dist.rank()
  local cfg = require('zlua.config').load(cfg_src, { world_size = n })
  if cfg.zero_optimization.stage ~= 3 then return fn() end
  local Module = require 'zlua.nn.Module'
  local op = cfg.zero_optimization.offload_param
  local store = op.device == 'nvme' and new_store(op, cfg.aio, q) or nil
  local before = Module.set_post_init(function(m)
    for _, p in pairs(m._parameters) do
      if not registry.get(p) and p:numel() > 0 then partition(p, n, q, store) end
    end
  end)
  local res = table.pack(pcall(fn))
  Module.set_post_init(before)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- Whole values of p for the duration of fn: from an Init record or a stage-3 engine.
local function gather(p)
  local r = registry.get(p)
  if not r then return nil end
  if r.chunk or r.remote then
    local full = zl.empty(r.P * r.k)
    local c = registry.chunk(r)
    dist.all_gather(full, c)
    if r.remote then c:release() end
    local part = full:narrow(1, 1, r.n)
    local data = part:view(r.shape)
    zl.no_grad(function() p:set_data(data) end)
    part:release()
    data:release()
    full:release()
    return r
  end
  if r.state.params then r.state.params:gather(r.entry) end
  return r
end

-- fn's changes (broadcast from the modifier) become p's chunk again.
local function scatter(p, r, modifier)
  if modifier ~= nil then
    local det = p:detach()
    local flat = det:reshape(p:numel())
    det:release()
    dist.broadcast(flat, modifier)
    if r and (r.chunk or r.remote) then
      local lo, own = layout.owned(r.n, r.k, dist.rank())
      local c = zl.zeros(r.k)
      if own > 0 then zl.core.copy_range(c, 0, flat, lo, own) end
      registry.put_chunk(r, c)
      c:release()
    elseif r then
      local z, e = r.state, r.entry
      z:each_master(function()
        if e.own > 0 then zl.core.copy_range(e.mv, 0, flat, e.lo, e.own) end
        if z.half or z.f32_copy then z:store_working(e, e.mv) end
      end, true, { [e] = true })
    end
    flat:release()
  end
  if r and (r.chunk or r.remote) then
    zl.no_grad(function() p:set_data(zl.empty(0)) end)
  elseif r and r.state.params then
    local e = r.entry
    if not e.persistent then r.state.params:release(e) end
    if modifier ~= nil and e.persistent then
      r.state.params:release(e)
      r.state.params:gather(e)
    end
  end
end

function zero.GatheredParameters(params, fn, modifier_rank)
  if zl.is_tensor(params) then params = { params } end
  if type(params) ~= 'table' then zl.raise('zero.GatheredParameters: params must be a tensor or a list of tensors') end
  if type(fn) ~= 'function' then zl.raise('zero.GatheredParameters: fn must be a function') end
  local n = dist.world_size()
  if modifier_rank ~= nil and (math.type(modifier_rank) ~= 'integer' or modifier_rank < 0 or modifier_rank >= n) then
    zl.raise(fmt('zero.GatheredParameters: modifier_rank must be a rank in 0..%d, got %s', n - 1,
      tostring(modifier_rank)))
  end
  local recs = {}
  for i, p in ipairs(params) do
    if not zl.is_tensor(p) then zl.raise(fmt('zero.GatheredParameters: entry %d is not a tensor', i)) end
    recs[i] = gather(p) or false
  end
  local res = table.pack(pcall(fn))
  for i, p in ipairs(params) do
    if recs[i] then scatter(p, recs[i], modifier_rank) end
  end
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

--- A parameter zero.Init partitioned that no engine trains (frozen, or no
--- optimizer) becomes whole again on every rank; true when p was one.
function zero.unpartition(p)
  local r = registry.init_record(p)
  if not r then return false end
  gather(p)
  registry.drop_chunk(r)
  registry.set_init(p, nil)
  return true
end

--- True when p is partitioned by zero.Init or a stage-3 engine.
function zero.is_partitioned(p)
  local r = registry.get(p)
  return r ~= nil and (r.chunk ~= nil or r.remote ~= nil or (r.state ~= nil and r.state.params ~= nil))
end

return zero
