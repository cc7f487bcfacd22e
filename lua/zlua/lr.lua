-- zlua.lr: DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR,
-- OneCycle, LRRangeTest) over any optimizer with a param_groups array, with DeepSpeed's
-- parameter names, defaults, per-step values and state_dict.
--
-- The formulas, the defaults and the range checks of the parameters are the engine's
-- (zlua/schedule.h, whose comment gives the parity target: DeepSpeed 0.16.5's
-- lr_schedules.py with the later fixes that turn a crash into a sane value). This module is
-- DeepSpeed's object API around them: the names and types of the parameters, the
-- optimizer's param groups, the position and the state_dict. Where DeepSpeed only logs a
-- warning for a mistake that changes the schedule (an unknown warmup_type) an error is
-- raised instead; a schedule that is valid but likely not meant (WarmupDecayLR whose total
-- is below its warmup) gets DeepSpeed's warning, from rank 0, through lr.warn.

local core = require 'zlua.core'
local nearest = require 'zlua.util.nearest'

local lr = {}

--- Receives each schedule's warning line; a script may replace it (to log or to collect).
function lr.warn(line)
  io.stderr:write('zlua: warning: ', line, '\n')
end

-- Step semantics, as DeepSpeed's: last_batch_iteration (t) starts at -1 and a constructor
-- given t = -1 writes the values at t = -1 into the optimizer (the minimum lr, or 0 for
-- WarmupCosineLR); each step() then advances t by one and writes the lr for the new t.
-- The engine steps the scheduler after each applied optimizer step, so the k-th optimizer
-- step runs at t = k - 2 and the first two both run at the minimum lr. A constructor given
-- t >= 0 (resuming) leaves the optimizer untouched until the first step().

local function fail(fmt, ...)
  error(string.format(fmt, ...), 0)
end

local function show(v)
  if type(v) == 'string' then
    return string.format('%q', v)
  end
  if type(v) == 'table' and getmetatable(v) == nil then
    local parts, n = {}, 0
    for _ in pairs(v) do n = n + 1 end
    if n ~= #v then
      return tostring(v)
    end
    for i = 1, #v do parts[i] = show(v[i]) end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  return tostring(v)
end

local function copy(list)
  local out = {}
  for i = 1, #list do out[i] = list[i] end
  return out
end

-- Rejects unknown keys (sorted, so the message does not depend on hash order) and returns
-- the params table, or an empty one when the caller passed none.
local function read_params(name, keys, params)
  if params == nil then
    return {}
  end
  if type(params) ~= 'table' then
    fail('%s: params must be a table, got %s', name, show(params))
  end
  local known, unknown = {}, {}
  for _, k in ipairs(keys) do known[k] = true end
  for k in pairs(params) do
    if type(k) ~= 'string' then
      fail('%s: parameter names must be strings, got %s', name, show(k))
    end
    if not known[k] then unknown[#unknown + 1] = k end
  end
  if #unknown > 0 then
    table.sort(unknown)
    fail("%s: unknown parameter '%s' (nearest valid key: '%s')", name, unknown[1],
      nearest.find(unknown[1], keys))
  end
  return params
end

-- The type checks: what a Lua value must be to reach the engine. The ranges are the
-- engine's to check.

local function check_number(name, key, v)
  if math.type(v) == nil or v ~= v or v == math.huge or v == -math.huge then
    fail('%s: %s must be a finite number, got %s', name, key, show(v))
  end
  return v + 0.0
end

-- Integral floats such as 2e3 count as integers, as everywhere in zlua's configs.
local function check_integer(name, key, v)
  local i = math.type(v) and math.tointeger(v)
  if not i then
    fail('%s: %s must be an integer, got %s', name, key, show(v))
  end
  return i
end

local function check_boolean(name, key, v)
  if type(v) ~= 'boolean' then
    fail('%s: %s must be true or false, got %s', name, key, show(v))
  end
  return v
end

-- A number applies to every param group; a list gives one value per group.
local function check_per_group(name, key, v, ngroups)
  if type(v) ~= 'table' then
    return check_number(name, key, v)
  end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  if n ~= #v or n ~= ngroups then
    fail('%s: %s must have one value per param group (%d), got %s', name, key, ngroups, show(v))
  end
  local out = {}
  for i = 1, ngroups do out[i] = check_number(name, key .. '[' .. i .. ']', v[i]) end
  return out
end

local function check_warmup_type(name, key, v)
  if v ~= 'log' and v ~= 'linear' then
    fail("%s: warmup_type must be 'log' or 'linear', got %s", name, show(v))
  end
  return v
end

-- Each parameter's type; the others are numbers.
local CHECK = {
  warmup_min_lr = check_per_group, warmup_max_lr = check_per_group, cycle_min_lr = check_per_group,
  cycle_max_lr = check_per_group, cycle_min_mom = check_per_group, cycle_max_mom = check_per_group,
  lr_range_test_min_lr = check_per_group,
  warmup_num_steps = check_integer, total_num_steps = check_integer,
  cycle_first_stair_count = check_integer, cycle_second_stair_count = check_integer,
  lr_range_test_step_size = check_integer,
  warmup_type = check_warmup_type, cycle_momentum = check_boolean, lr_range_test_staircase = check_boolean,
}

-- last_batch_iteration is the object's, not the engine's: checked here.
local function check_position(name, v)
  local t = check_integer(name, 'last_batch_iteration', v)
  if t < -1 then
    fail('%s: last_batch_iteration must be at least -1, got %s', name, show(v))
  end
  return t
end

-- Like DeepSpeed's get_torch_optimizer, a wrapper holding the real optimizer in .optimizer
-- (the mixed-precision one) is accepted and the inner optimizer's groups are scheduled.
local function resolve_optimizer(name, optimizer)
  local kind = type(optimizer)
  if kind ~= 'table' and kind ~= 'userdata' then
    fail('%s: optimizer must be an object with param_groups, got %s', name, show(optimizer))
  end
  if type(optimizer.param_groups) ~= 'table' then
    local inner = optimizer.optimizer
    local ik = type(inner)
    if (ik == 'table' or ik == 'userdata') and type(inner.param_groups) == 'table' then
      optimizer = inner
    else
      fail('%s: optimizer has no param_groups array', name)
    end
  end
  for i, g in ipairs(optimizer.param_groups) do
    if type(g) ~= 'table' then
      fail('%s: optimizer.param_groups[%d] must be a table, got %s', name, i, show(g))
    end
  end
  return optimizer
end

-- DeepSpeed's update_lr: zips groups with lrs, returns what the groups now hold.
local function write_lrs(groups, lrs)
  for i = 1, math.min(#groups, #lrs) do groups[i].lr = lrs[i] end
  local out = {}
  for i, g in ipairs(groups) do out[i] = g.lr end
  return out
end

local Schedule = {}
Schedule.__index = Schedule

-- A new object of cls over optimizer, and the parameters given, type-checked, by name;
-- absent ones take the engine's defaults.
local function prepare(cls, optimizer, params)
  local name = cls.name
  local p = read_params(name, cls.keys, params)
  for _, key in ipairs(cls.required) do
    if p[key] == nil then fail('%s: %s is required', name, key) end
  end
  local self = setmetatable({}, cls)
  self.optimizer = resolve_optimizer(name, optimizer)
  local given = {}
  for _, key in ipairs(cls.keys) do
    if key ~= 'last_batch_iteration' and p[key] ~= nil then
      given[key] = (CHECK[key] or check_number)(name, key, p[key], #self.optimizer.param_groups)
    end
  end
  self.last_batch_iteration = check_position(name, p.last_batch_iteration or -1)
  return self, given
end

-- The engine's schedule from the parameters, and the fields a caller reads: the warmup as
-- it runs (raised to 2 when below) and total_num_steps.
local function build(self, given)
  self.c = core.lr_schedule(self.name, #self.optimizer.param_groups, given)
  local caveat = self.c:caveat()
  if caveat and core.dist_rank() == 0 then lr.warn(caveat) end
  if self.warmup then
    self.warmup_num_steps = self.c:warmup_steps()
  end
  self.total_num_steps = given.total_num_steps
  return self
end

function Schedule:__tostring()
  return string.format('%s(last_batch_iteration=%d)', self.name, self.last_batch_iteration)
end

-- The lrs for the current last_batch_iteration, one per group.
function Schedule:get_lr()
  return self.c:lrs(self.last_batch_iteration)
end

-- Advances to last_batch_iteration (default: the next one) and writes that step's lrs into
-- the optimizer's param groups.
function Schedule:step(last_batch_iteration)
  local t = self.last_batch_iteration + 1
  if last_batch_iteration ~= nil then
    t = check_position(self.name, last_batch_iteration)
  end
  self.last_batch_iteration = t
  self._last_lr = write_lrs(self.optimizer.param_groups, self:get_lr())
end

-- The lrs last written into the optimizer, one per param group.
function Schedule:get_last_lr()
  if self._last_lr == nil then
    fail('%s: get_last_lr() needs a step() first', self.name)
  end
  return copy(self._last_lr)
end

-- Only the position is saved, as DeepSpeed does: the schedule itself comes from the config.
function Schedule:state_dict()
  return { last_batch_iteration = self.last_batch_iteration }
end

-- Restores the position; the optimizer's lrs change at the next step(), as in DeepSpeed.
function Schedule:load_state_dict(sd)
  if type(sd) ~= 'table' then
    fail('%s: load_state_dict expects a table, got %s', self.name, show(sd))
  end
  self.last_batch_iteration = check_position(self.name, sd.last_batch_iteration)
end

-- A constructor given t = -1 writes the values there and records them as the last lrs
-- (all but OneCycle's).
local function start(self)
  if self.last_batch_iteration == -1 then
    self._last_lr = write_lrs(self.optimizer.param_groups, self:get_lr())
  end
  return self
end

-- A schedule class: its DeepSpeed name, its parameters in DeepSpeed's order (which the
-- nearest-key hint follows) and those without a default.
local function class(name, keys, required)
  local c = setmetatable({}, {
    __index = Schedule,
    __call = function(cls, optimizer, params) return cls.new(optimizer, params) end,
  })
  c.__index = c
  c.__name = name
  c.__tostring = Schedule.__tostring
  c.name = name
  c.keys = keys
  c.required = required or {}
  for _, k in ipairs(keys) do
    if k == 'warmup_num_steps' then c.warmup = true end
  end
  function c.new(optimizer, params) return start(build(prepare(c, optimizer, params))) end
  return c
end

local WarmupLR = class('WarmupLR', { 'warmup_min_lr', 'warmup_max_lr', 'warmup_num_steps',
  'warmup_type', 'last_batch_iteration' })

local WarmupDecayLR = class('WarmupDecayLR', { 'total_num_steps', 'warmup_min_lr', 'warmup_max_lr',
  'warmup_num_steps', 'warmup_type', 'last_batch_iteration' }, { 'total_num_steps' })

-- Scales each group's lr as found at construction; the optimizer's lr is the peak.
local WarmupCosineLR = class('WarmupCosineLR', { 'total_num_steps', 'warmup_min_ratio',
  'warmup_num_steps', 'cos_min_ratio', 'warmup_type', 'last_batch_iteration' }, { 'total_num_steps' })

function WarmupCosineLR.new(optimizer, params)
  local self, given = prepare(WarmupCosineLR, optimizer, params)
  given.lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    given.lr[i] = check_number(self.name, 'param_groups[' .. i .. '].lr', g.lr)
  end
  return start(build(self, given))
end

local OneCycle = class('OneCycle', { 'cycle_min_lr', 'cycle_max_lr', 'decay_lr_rate',
  'cycle_first_step_size', 'cycle_second_step_size', 'cycle_first_stair_count',
  'cycle_second_stair_count', 'decay_step_size', 'cycle_momentum', 'cycle_min_mom', 'cycle_max_mom',
  'decay_mom_rate', 'last_batch_iteration' }, { 'cycle_min_lr', 'cycle_max_lr' })

-- DeepSpeed cycles momentum only for optimizers whose defaults carry betas (the Adam
-- family); for others (SGD's momentum) it warns and leaves momentum alone.
local function has_betas(optimizer)
  local d = optimizer.defaults
  if type(d) == 'table' then
    return d.betas ~= nil
  end
  local g = optimizer.param_groups[1]
  return g ~= nil and g.betas ~= nil
end

-- The betas at the current step, one {beta1, 0.99} per group, or nil when momentum is not
-- cycled.
function OneCycle:get_mom()
  if not self.cycle_momentum then
    return nil
  end
  return self.c:betas(self.last_batch_iteration)
end

local function write_betas(self)
  local moms = self:get_mom()
  if moms then
    local groups = self.optimizer.param_groups
    for i = 1, math.min(#groups, #moms) do groups[i].betas = moms[i] end
  end
end

-- DeepSpeed's None for the second half's size and stair count means the first half's.
function OneCycle.new(optimizer, params)
  local self, given = prepare(OneCycle, optimizer, params)
  if given.cycle_second_step_size == nil then given.cycle_second_step_size = given.cycle_first_step_size end
  if given.cycle_second_stair_count == nil then given.cycle_second_stair_count = given.cycle_first_stair_count end
  self.cycle_momentum = given.cycle_momentum ~= false
  if self.cycle_momentum and not has_betas(self.optimizer) then
    lr.warn('OneCycle: cycle_momentum is disabled because the optimizer has no betas')
    self.cycle_momentum = false
  end
  given.cycle_momentum = self.cycle_momentum
  build(self, given)
  -- DeepSpeed's OneCycle writes the minimum lr and the minimum momentum at t = -1 but,
  -- unlike the others, records no last lr: get_last_lr() fails until the first step().
  if self.last_batch_iteration == -1 then
    write_lrs(self.optimizer.param_groups, self:get_lr())
    write_betas(self)
  end
  return self
end

function OneCycle:step(last_batch_iteration)
  Schedule.step(self, last_batch_iteration)
  write_betas(self)
end

local LRRangeTest = class('LRRangeTest', { 'lr_range_test_min_lr', 'lr_range_test_step_size',
  'lr_range_test_step_rate', 'lr_range_test_staircase', 'last_batch_iteration' })

lr.WarmupLR = WarmupLR
lr.WarmupDecayLR = WarmupDecayLR
lr.WarmupCosineLR = WarmupCosineLR
lr.OneCycle = OneCycle
lr.LRRangeTest = LRRangeTest
lr.names = { 'LRRangeTest', 'OneCycle', 'WarmupLR', 'WarmupDecayLR', 'WarmupCosineLR' }

-- Builds a schedule from a DeepSpeed config section's type and params.
function lr.create(type_name, optimizer, params)
  for _, known in ipairs(lr.names) do
    if type_name == known then
      return lr[known].new(optimizer, params)
    end
  end
  fail("zlua.lr: unknown scheduler type %s (nearest valid type: '%s')", show(type_name),
    nearest.find(tostring(type_name), lr.names))
end

return lr
