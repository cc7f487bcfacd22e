--[[ zlua.zero: DeepSpeed's zero.Init and zero.GatheredParameters.

  local model = zlua.zero.Init(config, function() return nn.GPT{...} end [, {args = args}])
    Builds the model with every parameter partitioned as it is made (at the
    end of its module's constructor): each rank keeps only its chunk, so no
    rank ever holds the whole model. Every rank draws the same random numbers
    as a one-process build with the same seed, so the values are identical.
    Partitions only when the config says stage 3 (otherwise fn just runs).
    With offload_param.device = "nvme" (DeepSpeed's remote_device) the chunks
    go to a file under its nvme_path as they are made, so not even the
    partitions stay in memory. args fill the config's "auto" values as
    zlua.initialize's do (give them the same table, hidden_size included).

  zlua.zero.GatheredParameters(params, fn [, modifier_rank])
    Gathers the parameters (a tensor or a list), runs fn, then partitions
    them again. With modifier_rank, that rank's changes are broadcast and kept
    (in the f32 masters too when an engine owns the parameters); without it a
    partitioned parameter's changes are discarded, as in DeepSpeed. At stages
    0-2 the parameters are whole already and fn changes them in place (kept
    until the next step rewrites them from the masters, at stage 0 in f32 for
    good: there the parameters are the masters). Returns fn's results. ]]

local zl = require 'zlua'
local registry = require 'zlua.zero.registry'
local layout = require 'zlua.zero.layout'
local dist = require 'zlua.dist'

local fmt = string.format

local zero = {}

function zero.Init(cfg_src, fn, opts)
  if type(fn) ~= 'function' then zl.raise('zero.Init(config, fn): fn must be a function that builds the model') end
  if opts ~= nil and type(opts) ~= 'table' then zl.raise('zero.Init(config, fn, opts): opts must be a table') end
  local cfg = require('zlua.config').load(cfg_src, { world_size = dist.world_size(), args = opts and opts.args })
  if cfg.zero_optimization.stage ~= 3 then return fn() end
  local Module = require 'zlua.nn.Module'
  local state = require 'zlua.zero.state'
  local store = zl.core.zero_init_new(state.c_config(cfg, 'adam'))
  local before = Module.set_post_init(function(m)
    for _, p in pairs(m._parameters) do
      if not registry.get(p) and p:numel() > 0 then
        local shape = p:shape()
        store:partition(p)
        registry.set_init(p, store, shape)
      end
    end
  end)
  local res = table.pack(pcall(fn))
  Module.set_post_init(before)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- Whole values of p for the duration of fn: from a zero.Init store or a stage-3 engine.
local function gather(p)
  local r = registry.get(p)
  if not r then return nil end
  if r.store then r.store:gather(p) else r.state:gather(r.entry) end
  return r
end

-- fn's changes (broadcast from the modifier) become p's chunk again.
local function scatter(p, r, modifier)
  if r.store then
    r.store:scatter(p, modifier)
    return
  end
  local z = r.state
  if modifier ~= nil then z.c:update_param(p, modifier) end
  if z.stage == 3 then z:release(r.entry) end
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
  local store = registry.init_store(p)
  if not store then return false end
  store:unpartition(p)
  registry.set_init(p, nil)
  return true
end

--- At stage 3, the frozen parameters (requires_grad false) of `params` that
--- no engine trains stay partitioned, or become so when built whole on a CPU:
--- each is gathered (in `dtype`, default f32) only while an op reads it and
--- holds no gradient or optimizer state. Collective. Returns their count and
--- the elements this rank holds of them.
function zero.partition_frozen(params, cfg, dtype, on_host)
  if cfg.zero_optimization.stage ~= 3 then return 0, 0 end
  local fresh
  local count, held = 0, 0
  for _, p in ipairs(params) do
    local r = registry.get(p)
    if not p:requires_grad() and not (r and r.state) then
      local store = r and r.store
      if not store and on_host and p:numel() > 0 then
        local state = require 'zlua.zero.state'
        fresh = fresh or zl.core.zero_init_new(state.c_config(cfg, 'adam'))
        store = fresh
        local shape = p:shape()
        store:partition(p)
        registry.set_init(p, store, shape)
      end
      if store then
        store:gather_on_use(p, dtype)
        count = count + 1
        held = held + layout.chunk(registry.get(p).numel, dist.world_size())
      end
    end
  end
  return count, held
end

--- zero.numel(p), zero.shape(p): p's elements and shape whole, whether this
--- rank holds it whole or only its chunk (DeepSpeed's p.ds_numel, p.ds_shape).
function zero.numel(p)
  local r = registry.get(p)
  if r and r.numel then return r.numel end
  if r and r.entry and r.entry.n then return r.entry.n end
  return p:numel()
end

function zero.shape(p)
  local r = registry.get(p)
  local s = r and (r.shape or (r.entry and r.entry.shape))
  return s and table.move(s, 1, #s, 1, {}) or p:shape()
end

--- True when p is partitioned by zero.Init or a stage-3 engine.
function zero.is_partitioned(p)
  local r = registry.get(p)
  return r ~= nil and (r.store ~= nil or (r.state ~= nil and r.state.stage == 3))
end

return zero
