--[[ zlua.monitor: DeepSpeed's monitors (its MonitorMaster) from the config's
  tensorboard, csv_monitor, wandb and comet blocks.

  local monitor = require 'zlua.monitor'
  local mon = monitor.from_config(config, {rank = 0})
  if mon.enabled then
    mon:write_events({{'Train/Samples/train_loss', loss, engine.global_samples}})
  end
  mon:close()                       -- or: local mon <close> = monitor.from_config(...)

  As in DeepSpeed: only rank 0 writes (other ranks get a monitor whose
  write_events does nothing); mon.enabled says whether any monitor is
  enabled, on every rank; the blocks' keys and defaults are DeepSpeed's
  ({enabled = false, output_path = '', job_name = 'DeepSpeedJobName'} for
  tensorboard and csv_monitor) and a key set to "auto" takes its default,
  as DeepSpeed's config models drop "auto". Unlike DeepSpeed, an unknown key
  or a value of the wrong type is an error naming it, and wandb or comet
  enabled is an error: both need a network service zlua does not reach.
  The writers: zlua.monitor.tensorboard and zlua.monitor.csv. ]]

local util = require 'zlua.monitor.util'
local tensorboard = require 'zlua.monitor.tensorboard'
local csv = require 'zlua.monitor.csv'

local fmt = string.format

local monitor = {}

-- Each block's keys and the type each must have ('string?': a string or absent).
local BLOCKS = {
  { 'tensorboard', { enabled = 'boolean', output_path = 'string', job_name = 'string' } },
  { 'csv_monitor', { enabled = 'boolean', output_path = 'string', job_name = 'string' } },
  { 'wandb', { enabled = 'boolean', group = 'string?', team = 'string?', project = 'string' } },
  { 'comet', { enabled = 'boolean', samples_log_interval = 'number', project = 'string?',
               workspace = 'string?', api_key = 'string?', experiment_name = 'string?',
               experiment_key = 'string?', online = 'boolean?', mode = 'string?' } },
}

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function show(v)
  if type(v) == 'string' then return fmt('%q', v) end
  return tostring(v)
end

-- The block `name` of cfg with its keys checked; "auto" values dropped.
local function block(cfg, name, types)
  local b = cfg[name]
  if b == nil then return {} end
  if type(b) ~= 'table' then
    util.raise(fmt('monitor: %s must be a table (a JSON object), got %s', name, show(b)))
  end
  local out = {}
  for _, k in ipairs(sorted_keys(b)) do
    local v = b[k]
    local want = types[k]
    if not want then
      util.raise(fmt("monitor: unknown key '%s.%s' (the keys of %s: %s)", name, tostring(k), name,
                     table.concat(sorted_keys(types), ', ')))
    end
    if v ~= 'auto' then
      local base = want:gsub('%?$', '')
      if type(v) ~= base then
        util.raise(fmt('monitor: %s.%s must be a %s, got %s', name, k, base, show(v)))
      end
      out[k] = v
    end
  end
  return out
end

local function rank_of(opts)
  if opts.rank ~= nil then
    local r = math.tointeger(opts.rank)
    if not r or r < 0 then
      util.raise(fmt('monitor: rank must be a non-negative integer, got %s', show(opts.rank)))
    end
    return r
  end
  local dist = package.loaded['zlua.dist']
  if type(dist) == 'table' and type(dist.get_rank) == 'function' then return dist.get_rank() end
  return 0
end

local Monitor = {}
Monitor.__index = Monitor

--- monitor.from_config(config [, {rank =, clock =}]): a monitor for the
--- config's blocks (config: the whole config table, or any table holding
--- those keys). rank defaults to zlua.dist's when a script has loaded it,
--- else 0; clock is the TensorBoard wall clock (zlua.monitor.tensorboard).
--- Directories and the event file are created here, on rank 0 only.
function monitor.from_config(cfg, opts)
  if type(cfg) ~= 'table' then
    util.raise(fmt('monitor.from_config: expected a config table, got %s', type(cfg)))
  end
  opts = opts or {}
  local b = {}
  for _, spec in ipairs(BLOCKS) do b[spec[1]] = block(cfg, spec[1], spec[2]) end
  for _, name in ipairs({ 'wandb', 'comet' }) do
    if b[name].enabled then
      util.raise(fmt('%s monitor is not available in zlua (no network service): '
                     .. 'disable it or use csv_monitor/tensorboard', name))
    end
  end
  local rank = rank_of(opts)
  local self = setmetatable({ rank = rank, writers = {},
                              enabled = (b.tensorboard.enabled or b.csv_monitor.enabled) == true },
                            Monitor)
  if rank == 0 then
    -- DeepSpeed's order: tensorboard, then csv.
    if b.tensorboard.enabled then
      local t = b.tensorboard
      self.writers[#self.writers + 1] = tensorboard.new{ output_path = t.output_path,
                                                          job_name = t.job_name, clock = opts.clock }
      self.tensorboard = self.writers[#self.writers]
    end
    if b.csv_monitor.enabled then
      local c = b.csv_monitor
      self.writers[#self.writers + 1] = csv.new{ output_path = c.output_path, job_name = c.job_name }
      self.csv = self.writers[#self.writers]
    end
  end
  return self
end

--- mon:write_events({{name, value, step}, ...}): hands the events to every
--- writer (none on ranks other than 0). DeepSpeed's events are
--- Train/Samples/train_loss, Train/Samples/lr and (fp16) Train/Samples/loss_scale,
--- with step = global_samples.
function Monitor:write_events(events)
  for _, w in ipairs(self.writers) do w:write_events(events) end
end

--- mon:flush(): every writer's pending bytes to the operating system.
function Monitor:flush()
  for _, w in ipairs(self.writers) do w:flush() end
end

--- mon:close(): closes every writer; closing twice is harmless.
function Monitor:close()
  for _, w in ipairs(self.writers) do w:close() end
end
Monitor.__close = Monitor.close

return monitor
