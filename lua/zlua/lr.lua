-- zlua.lr: DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR,
-- OneCycle, LRRangeTest) over any optimizer with a param_groups array, with DeepSpeed's
-- parameter names, defaults, per-step values and state_dict. Pure Lua, standard library only.
--
-- Parity target: deepspeed/runtime/lr_schedules.py as of 0.16.5 (../shared reference), with
-- the later fixes that only turn a crash or a nonsense value into a sane one (per-group lists
-- in OneCycle, OneCycle's stair counts, WarmupCosineLR holding at cos_min_ratio past its end).
-- Defaults are 0.16.5's: WarmupLR's warmup_max_lr is 1e-3 whatever the optimizer's lr.
-- Where DeepSpeed only logs a warning for a mistake that changes the schedule (an unknown
-- warmup_type, WarmupDecayLR decaying before its warmup ends) we raise an error instead.

local nearest = require 'zlua.util.nearest'

local lr = {}

-- Step semantics, as DeepSpeed's: last_batch_iteration (t) starts at -1 and a constructor
-- given t = -1 writes get_lr() at t = -1 into the optimizer (the minimum lr, or 0 for
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

local function check_number(name, key, v)
  if math.type(v) == nil or v ~= v or v == math.huge or v == -math.huge then
    fail('%s: %s must be a finite number, got %s', name, key, show(v))
  end
  return v + 0.0
end

-- Integral floats such as 2e3 count as integers, as everywhere in zlua's configs.
local function check_integer(name, key, v, min)
  local i = math.type(v) and math.tointeger(v)
  if not i then
    fail('%s: %s must be an integer, got %s', name, key, show(v))
  end
  if i < min then
    fail('%s: %s must be at least %d, got %s', name, key, min, show(v))
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
local function per_group(name, key, v, ngroups)
  if type(v) ~= 'table' then
    local x = check_number(name, key, v)
    local out = {}
    for i = 1, ngroups do out[i] = x end
    return out
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

local function check_warmup_type(name, v)
  if v ~= 'log' and v ~= 'linear' then
    fail("%s: warmup_type must be 'log' or 'linear', got %s", name, show(v))
  end
  return v
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

local function group_lrs(name, optimizer)
  local out = {}
  for i, g in ipairs(optimizer.param_groups) do
    out[i] = check_number(name, 'param_groups[' .. i .. '].lr', g.lr)
  end
  return out
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

local function class(name, parent)
  local c = setmetatable({}, {
    __index = parent or Schedule,
    __call = function(cls, optimizer, params) return cls.new(optimizer, params) end,
  })
  c.__index = c
  c.__name = name
  c.__tostring = Schedule.__tostring
  c.name = name
  return c
end

function Schedule:__tostring()
  return string.format('%s(last_batch_iteration=%d)', self.name, self.last_batch_iteration)
end

-- Advances to last_batch_iteration (default: the next one) and writes that step's lrs into
-- the optimizer's param groups.
function Schedule:step(last_batch_iteration)
  local t = self.last_batch_iteration + 1
  if last_batch_iteration ~= nil then
    t = check_integer(self.name, 'last_batch_iteration', last_batch_iteration, -1)
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
  self.last_batch_iteration = check_integer(self.name, 'last_batch_iteration',
    sd.last_batch_iteration, -1)
end

local function start(self)
  if self.last_batch_iteration == -1 then
    self._last_lr = write_lrs(self.optimizer.param_groups, self:get_lr())
  end
end

-- WarmupLR --------------------------------------------------------------------------------

local WarmupLR = class('WarmupLR')
local WARMUP_KEYS = { 'warmup_min_lr', 'warmup_max_lr', 'warmup_num_steps', 'warmup_type',
  'last_batch_iteration' }

-- Fills the warmup fields shared by WarmupLR and WarmupDecayLR. warmup_num_steps below 2 is
-- raised to 2 (DeepSpeed's clamp), which keeps 1/ln(W) finite.
local function init_warmup(self, optimizer, p)
  local name = self.name
  self.optimizer = resolve_optimizer(name, optimizer)
  local n = #self.optimizer.param_groups
  local max = p.warmup_max_lr or 0.001
  self.min_lrs = per_group(name, 'warmup_min_lr', p.warmup_min_lr or 0.0, n)
  self.max_lrs = per_group(name, 'warmup_max_lr', max, n)
  self.delta_lrs = {}
  for i = 1, n do self.delta_lrs[i] = self.max_lrs[i] - self.min_lrs[i] end
  self.warmup_num_steps = math.max(2, check_integer(name, 'warmup_num_steps',
    p.warmup_num_steps or 1000, 0))
  self.warmup_type = check_warmup_type(name, p.warmup_type or 'log')
  self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
  self.last_batch_iteration = check_integer(name, 'last_batch_iteration',
    p.last_batch_iteration or -1, -1)
end

-- Log warmup: ln(t+1)/ln(W), 0 at t = 0 and just under 1 at t = W-1; linear: t/W.
local function warmup_gamma(self, t)
  if self.warmup_type == 'log' then
    return self.inverse_log_warm_up * math.log(t + 1)
  end
  return t / self.warmup_num_steps
end

function WarmupLR.new(optimizer, params)
  local p = read_params('WarmupLR', WARMUP_KEYS, params)
  local self = setmetatable({}, WarmupLR)
  init_warmup(self, optimizer, p)
  start(self)
  return self
end

function WarmupLR:_gamma(t)
  if t < self.warmup_num_steps then
    return warmup_gamma(self, t)
  end
  return 1.0
end

-- The lrs for the current last_batch_iteration, one per group; the minimum before the start.
function WarmupLR:get_lr()
  local t = self.last_batch_iteration
  if t < 0 then
    return copy(self.min_lrs)
  end
  local gamma = self:_gamma(t)
  local out = {}
  for i, m in ipairs(self.min_lrs) do out[i] = m + self.delta_lrs[i] * gamma end
  return out
end

-- WarmupDecayLR ---------------------------------------------------------------------------

local WarmupDecayLR = class('WarmupDecayLR', WarmupLR)
local DECAY_KEYS = { 'total_num_steps', 'warmup_min_lr', 'warmup_max_lr', 'warmup_num_steps',
  'warmup_type', 'last_batch_iteration' }

function WarmupDecayLR.new(optimizer, params)
  local name = 'WarmupDecayLR'
  local p = read_params(name, DECAY_KEYS, params)
  if p.total_num_steps == nil then
    fail('%s: total_num_steps is required', name)
  end
  local self = setmetatable({}, WarmupDecayLR)
  self.total_num_steps = check_integer(name, 'total_num_steps', p.total_num_steps, 0)
  init_warmup(self, optimizer, p)
  if self.total_num_steps < self.warmup_num_steps then
    local given = p.warmup_num_steps or 1000
    local clamp = given ~= self.warmup_num_steps and ', raised to the minimum of 2' or ''
    fail('%s: total_num_steps (%d) is less than warmup_num_steps (%s%s)', name,
      self.total_num_steps, show(given), clamp)
  end
  start(self)
  return self
end

-- After warmup the lr falls linearly from the maximum to 0 at total_num_steps and stays 0.
function WarmupDecayLR:_gamma(t)
  if t < self.warmup_num_steps then
    return warmup_gamma(self, t)
  end
  local span = math.max(1.0, self.total_num_steps - self.warmup_num_steps)
  return math.max(0.0, (self.total_num_steps - t) / span)
end

-- WarmupCosineLR --------------------------------------------------------------------------

local WarmupCosineLR = class('WarmupCosineLR')
local COSINE_KEYS = { 'total_num_steps', 'warmup_min_ratio', 'warmup_num_steps', 'cos_min_ratio',
  'warmup_type', 'last_batch_iteration' }

-- Scales each group's lr as found at construction (org_lrs); the optimizer's lr is the peak.
function WarmupCosineLR.new(optimizer, params)
  local name = 'WarmupCosineLR'
  local p = read_params(name, COSINE_KEYS, params)
  if p.total_num_steps == nil then
    fail('%s: total_num_steps is required', name)
  end
  local self = setmetatable({}, WarmupCosineLR)
  self.optimizer = resolve_optimizer(name, optimizer)
  self.total_num_steps = check_integer(name, 'total_num_steps', p.total_num_steps, 0)
  self.warmup_min_ratio = check_number(name, 'warmup_min_ratio', p.warmup_min_ratio or 0.0)
  self.cos_min_ratio = check_number(name, 'cos_min_ratio', p.cos_min_ratio or 0.0001)
  self.warmup_num_steps = math.max(2, check_integer(name, 'warmup_num_steps',
    p.warmup_num_steps or 1000, 0))
  self.warmup_type = check_warmup_type(name, p.warmup_type or 'log')
  self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
  self.last_batch_iteration = check_integer(name, 'last_batch_iteration',
    p.last_batch_iteration or -1, -1)
  self.org_lrs = group_lrs(name, self.optimizer)
  start(self)
  return self
end

-- The factor applied to org_lrs: 0 before the start, warmup_min_ratio rising to 1 over the
-- warmup, then a half cosine down to cos_min_ratio at total_num_steps, held there after
-- (also when total_num_steps <= warmup_num_steps, where there is no decay window).
function WarmupCosineLR:get_lr_ratio()
  local t = self.last_batch_iteration
  if t < 0 then
    return 0.0
  end
  if t < self.warmup_num_steps then
    local ratio = warmup_gamma(self, t)
    return self.warmup_min_ratio + ratio * (1.0 - self.warmup_min_ratio)
  end
  local real_last_step = t - self.warmup_num_steps + 1
  local real_total_steps = math.max(1, self.total_num_steps - self.warmup_num_steps)
  local progress = math.min(1.0, real_last_step / real_total_steps)
  local ratio = (1 + math.cos(math.pi * progress)) / 2
  return math.max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * ratio)
end

function WarmupCosineLR:get_lr()
  local out = {}
  if self.last_batch_iteration < 0 then
    for i = 1, #self.org_lrs do out[i] = 0.0 end
    return out
  end
  local ratio = self:get_lr_ratio()
  for i, base in ipairs(self.org_lrs) do out[i] = base * ratio end
  return out
end

-- OneCycle --------------------------------------------------------------------------------

local OneCycle = class('OneCycle')
local ONE_CYCLE_KEYS = { 'cycle_min_lr', 'cycle_max_lr', 'decay_lr_rate', 'cycle_first_step_size',
  'cycle_second_step_size', 'cycle_first_stair_count', 'cycle_second_stair_count',
  'decay_step_size', 'cycle_momentum', 'cycle_min_mom', 'cycle_max_mom', 'decay_mom_rate',
  'last_batch_iteration' }

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

-- The cycle is cycle_first_step_size steps up from cycle_min_lr to cycle_max_lr (momentum
-- down from cycle_max_mom to cycle_min_mom), cycle_second_step_size steps back, then decay:
-- lr = cycle_min_lr / (1 + decay_lr_rate * k / decay_step_size) and momentum multiplied by
-- (1 + decay_mom_rate * k / decay_step_size) at k steps past the cycle. A zero rate or
-- decay_step_size holds the end values instead.
function OneCycle.new(optimizer, params)
  local name = 'OneCycle'
  local p = read_params(name, ONE_CYCLE_KEYS, params)
  for _, key in ipairs({ 'cycle_min_lr', 'cycle_max_lr' }) do
    if p[key] == nil then fail('%s: %s is required', name, key) end
  end
  local self = setmetatable({}, OneCycle)
  self.optimizer = resolve_optimizer(name, optimizer)
  local n = #self.optimizer.param_groups

  local first = check_number(name, 'cycle_first_step_size', p.cycle_first_step_size or 2000)
  if first <= 0 then
    fail('%s: cycle_first_step_size must be positive, got %s', name,
      show(p.cycle_first_step_size))
  end
  local second = first
  if p.cycle_second_step_size ~= nil then
    second = check_number(name, 'cycle_second_step_size', p.cycle_second_step_size)
    if second < 0 then
      fail('%s: cycle_second_step_size must be non-negative, got %s', name,
        show(p.cycle_second_step_size))
    end
  end
  self.first_step_size, self.second_step_size = first, second
  self.total_size = first + second
  self.step_ratio = first / self.total_size
  self.first_stair_count = check_integer(name, 'cycle_first_stair_count',
    p.cycle_first_stair_count or 0, 0)
  self.second_stair_count = self.first_stair_count
  if p.cycle_second_stair_count ~= nil then
    self.second_stair_count = check_integer(name, 'cycle_second_stair_count',
      p.cycle_second_stair_count, 0)
  end
  self.decay_step_size = check_number(name, 'decay_step_size', p.decay_step_size or 0)
  if self.decay_step_size < 0 then
    fail('%s: decay_step_size must be non-negative, got %s', name, show(p.decay_step_size))
  end

  self.min_lrs = per_group(name, 'cycle_min_lr', p.cycle_min_lr, n)
  self.max_lrs = per_group(name, 'cycle_max_lr', p.cycle_max_lr, n)
  self.decay_lr_rate = check_number(name, 'decay_lr_rate', p.decay_lr_rate or 0.0)
  self.skip_lr_decay = self.decay_step_size == 0 or self.decay_lr_rate == 0

  local cycle_momentum = true
  if p.cycle_momentum ~= nil then
    cycle_momentum = check_boolean(name, 'cycle_momentum', p.cycle_momentum)
  end
  self.min_moms = per_group(name, 'cycle_min_mom', p.cycle_min_mom or 0.8, n)
  self.max_moms = per_group(name, 'cycle_max_mom', p.cycle_max_mom or 0.9, n)
  self.decay_mom_rate = check_number(name, 'decay_mom_rate', p.decay_mom_rate or 0.0)
  self.skip_mom_decay = self.decay_step_size == 0 or self.decay_mom_rate == 0
  if cycle_momentum and not has_betas(self.optimizer) then
    warn('zlua.lr: OneCycle: cycle_momentum is disabled because the optimizer has no betas')
    cycle_momentum = false
  end
  self.cycle_momentum = cycle_momentum

  self.last_batch_iteration = check_integer(name, 'last_batch_iteration',
    p.last_batch_iteration or -1, -1)
  -- DeepSpeed's OneCycle writes the minimum lr and the minimum momentum at t = -1 but,
  -- unlike the others, records no last lr: get_last_lr() fails until the first step().
  if self.last_batch_iteration == -1 then
    write_lrs(self.optimizer.param_groups, self.min_lrs)
    if self.cycle_momentum then
      for i, g in ipairs(self.optimizer.param_groups) do
        g.betas = { self.min_moms[i], 0.99 }
      end
    end
  end
  return self
end

-- Position in the cycle as a fraction of the way from the minimum lr to the maximum. A stair
-- count quantises it from the integer offset into the cycle, so a half-cycle boundary lands
-- exactly on a stair rather than a rounding error below it.
function OneCycle:_scale_factor()
  local batch_iteration = self.last_batch_iteration + 1
  local cycle = math.floor(1 + batch_iteration / self.total_size)
  local x = 1.0 + batch_iteration / self.total_size - cycle
  local scale, stairs
  if x <= self.step_ratio then
    scale, stairs = x / self.step_ratio, self.first_stair_count
  else
    scale, stairs = (x - 1) / (self.step_ratio - 1), self.second_stair_count
  end
  if stairs > 0 then
    local pos = batch_iteration % self.total_size
    if pos <= self.first_step_size then
      pos = pos * stairs / self.first_step_size
    else
      pos = (self.total_size - pos) * stairs / self.second_step_size
    end
    scale = math.floor(pos) / stairs
  end
  return scale
end

function OneCycle:get_lr()
  local t = self.last_batch_iteration
  local out = {}
  if t < self.total_size then
    local scale = self:_scale_factor()
    for i, lo in ipairs(self.min_lrs) do out[i] = lo + (self.max_lrs[i] - lo) * scale end
    return out
  end
  if self.skip_lr_decay then
    return copy(self.min_lrs)
  end
  local factor = 1 + self.decay_lr_rate * ((t - self.total_size + 1) / self.decay_step_size)
  for i, lo in ipairs(self.min_lrs) do out[i] = lo / factor end
  return out
end

-- The betas for the current step, one {beta1, 0.99} per group (DeepSpeed overwrites beta2
-- with 0.99), or nil when momentum is not cycled.
function OneCycle:get_mom()
  if not self.cycle_momentum then
    return nil
  end
  local t = self.last_batch_iteration
  local out = {}
  if t < self.total_size then
    local scale = self:_scale_factor()
    for i, hi in ipairs(self.max_moms) do
      out[i] = { hi - (hi - self.min_moms[i]) * scale, 0.99 }
    end
    return out
  end
  local factor = 1.0
  if not self.skip_mom_decay then
    factor = 1 + self.decay_mom_rate * ((t - self.total_size + 1) / self.decay_step_size)
  end
  for i, hi in ipairs(self.max_moms) do out[i] = { hi * factor, 0.99 } end
  return out
end

function OneCycle:step(last_batch_iteration)
  Schedule.step(self, last_batch_iteration)
  local moms = self:get_mom()
  if moms then
    local groups = self.optimizer.param_groups
    for i = 1, math.min(#groups, #moms) do groups[i].betas = moms[i] end
  end
end

-- LRRangeTest -----------------------------------------------------------------------------

local LRRangeTest = class('LRRangeTest')
local RANGE_KEYS = { 'lr_range_test_min_lr', 'lr_range_test_step_size', 'lr_range_test_step_rate',
  'lr_range_test_staircase', 'last_batch_iteration' }

-- lr = lr_range_test_min_lr * (1 + step_rate * i), with i = (t+1)/step_size, or its floor
-- when staircase.
function LRRangeTest.new(optimizer, params)
  local name = 'LRRangeTest'
  local p = read_params(name, RANGE_KEYS, params)
  local self = setmetatable({}, LRRangeTest)
  self.optimizer = resolve_optimizer(name, optimizer)
  self.min_lrs = per_group(name, 'lr_range_test_min_lr', p.lr_range_test_min_lr or 1e-3,
    #self.optimizer.param_groups)
  self.step_size = check_integer(name, 'lr_range_test_step_size',
    p.lr_range_test_step_size or 2000, 1)
  self.step_rate = check_number(name, 'lr_range_test_step_rate', p.lr_range_test_step_rate or 1.0)
  self.staircase = false
  if p.lr_range_test_staircase ~= nil then
    self.staircase = check_boolean(name, 'lr_range_test_staircase', p.lr_range_test_staircase)
  end
  self.last_batch_iteration = check_integer(name, 'last_batch_iteration',
    p.last_batch_iteration or -1, -1)
  if self.last_batch_iteration == -1 then
    self._last_lr = write_lrs(self.optimizer.param_groups, self.min_lrs)
  end
  return self
end

function LRRangeTest:get_lr()
  local interval = (self.last_batch_iteration + 1) / self.step_size
  if self.staircase then
    interval = math.floor(interval)
  end
  local increase = 1 + self.step_rate * interval
  local out = {}
  for i, lo in ipairs(self.min_lrs) do out[i] = lo * increase end
  return out
end

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
