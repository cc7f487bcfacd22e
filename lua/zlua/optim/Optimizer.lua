--[[ zlua.optim.Optimizer: what every optimizer shares, over the engine's
  optimizer object (zlua/optimizer.h), which owns the per-parameter state,
  the step counts, the step itself and the checks of the hyperparameters.
  Here are the param groups as Lua tables (each with `params` and its own
  hyperparameters, defaults filled from the constructor's options) that Lua
  code reads and changes: a scheduler writes group.lr and OneCycle
  group.betas, a checkpoint every key. They are copied into the engine
  before each step, so a change counts from the next one. Also
  state_dict/load_state_dict, and `opt.state`, a view of the engine's state
  keyed by parameter id. A subclass is its kind's name: Adam, AdamW, Lamb,
  SGD. ]]

local zl = require 'zlua'
local nearest = require 'zlua.util.nearest'
local core = zl.core
local fmt = string.format

local Optimizer = {}
Optimizer.__index = Optimizer

local function show(v)
  if type(v) == 'string' then return fmt('%q', v) end
  if type(v) == 'table' then
    local items = {}
    for i, x in ipairs(v) do items[i] = show(x) end
    return '{' .. table.concat(items, ', ') .. '}'
  end
  return tostring(v)
end

local function copy_value(v) return type(v) == 'table' and { table.unpack(v) } or v end

--- Optimizer.extend(name): the subclass for the engine's optimizer of that
--- kind ('Adam', 'AdamW', 'Lamb' or 'SGD'), its options and their defaults
--- the engine's.
function Optimizer.extend(name)
  local cls = setmetatable({}, { __index = Optimizer })
  cls.__index = cls
  cls.__name = name
  cls.hyper_defaults = core.optimizer_defaults(name)
  cls.__tostring = Optimizer.__tostring
  setmetatable(cls, {
    __index = Optimizer,
    __call = function(c, params, opts) return c.new(params, opts) end,
  })
  function cls.new(params, opts) return Optimizer.init(setmetatable({}, cls), params, opts) end
  return cls
end

-- An unknown option is an error with a hint; the values are the engine's to check.
function Optimizer:validate(key, where)
  local known = self.hyper_defaults
  if known[key] == nil then
    local names = {}
    for k in pairs(known) do names[#names + 1] = k end
    table.sort(names)
    local near = nearest.find(key, names)
    zl.raise(fmt('%s: unknown option %s%s (did you mean %q?)', self.__name, show(key), where, near))
  end
end

local function is_group_list(params)
  return type(params) == 'table' and type(params[1]) == 'table' and not zl.is_tensor(params[1])
end

-- opt.state[p:id()] -> {step=, <state tensors>} (nil before p's first step):
-- built on each read, its tensors the engine's buffers themselves.
local function state_view(opt)
  return setmetatable({}, {
    __index = function(_, id) return opt.c:state(id) end,
    __newindex = function() zl.raise(opt.__name .. ': opt.state is the engine\'s; use load_state_dict') end,
    __pairs = function()
      local list = {}
      for _, g in ipairs(opt.param_groups) do
        for _, p in ipairs(g.params) do
          local st = opt.c:state(p)
          if st then list[#list + 1] = { p:id(), st } end
        end
      end
      local i = 0
      return function()
        i = i + 1
        if list[i] then return list[i][1], list[i][2] end
      end
    end,
  })
end

function Optimizer:init(params, opts)
  if type(params) ~= 'table' or (#params == 0 and next(params) ~= nil) then
    zl.raise(fmt('%s: params must be an array of tensors or of param groups, got %s', self.__name, type(params)))
  end
  opts = opts or {}
  if type(opts) ~= 'table' then zl.raise(fmt('%s: options must be a table, got %s', self.__name, type(opts))) end
  self.defaults = {}
  for k, v in pairs(self.hyper_defaults) do self.defaults[k] = v end
  for k, v in pairs(opts) do
    self:validate(k, '')
    self.defaults[k] = v
  end
  self.c = core.optimizer_new(self.__name, self.defaults)
  self.param_groups = {}
  self.state = state_view(self)
  local groups = is_group_list(params) and params or { { params = params } }
  for _, g in ipairs(groups) do self:add_param_group(g) end
  return self
end

--- opt:add_param_group{params=..., lr=..., ...}: keys not given take the defaults.
function Optimizer:add_param_group(g)
  local gi = #self.param_groups + 1
  if type(g) ~= 'table' or type(g.params) ~= 'table' then
    zl.raise(fmt('%s: param group %d needs a params array', self.__name, gi))
  end
  local group = { params = {} }
  for i, p in ipairs(g.params) do
    if not zl.is_tensor(p) then
      zl.raise(fmt('%s: param group %d, entry %d is a %s, not a tensor', self.__name, gi, i, type(p)))
    end
    group.params[i] = p
  end
  for k, v in pairs(g) do
    if k ~= 'params' then
      self:validate(k, fmt(' in param group %d', gi))
      group[k] = v
    end
  end
  for k, v in pairs(self.defaults) do
    if group[k] == nil then group[k] = copy_value(v) end
  end
  self.c:add_group(group.params, group)
  self.param_groups[gi] = group
end

--- opt:zero_grad(): drops every gradient (PyTorch's set_to_none default).
function Optimizer:zero_grad()
  self.c:zero_grad()
end

--- opt:step([{grad_scale=s}]): one update of every parameter that has a
--- gradient; grad_scale multiplies each gradient as it is read (loss-scale
--- and clipping factors, without a pass of their own).
function Optimizer:step(opts)
  for gi, group in ipairs(self.param_groups) do self.c:set_group(gi, group) end
  self.c:step(opts and opts.grad_scale or 1.0)
end

--- opt:set_half(master, half): after each step of `master` (an f32 parameter
--- of this optimizer) write its value rounded to half's dtype (bf16 or f16)
--- into `half` in the same fused pass: the working weights of mixed precision.
function Optimizer:set_half(master, half)
  self.c:set_half(master, half)
end

--- opt:state_dict(): {state = {[i] = {step=, <buffers>}}, param_groups = {...}},
--- parameters numbered 1.. across groups in order, as PyTorch does.
function Optimizer:state_dict()
  local state, groups, idx = {}, {}, 0
  for gi, group in ipairs(self.param_groups) do
    local g = { params = {} }
    for k, v in pairs(group) do
      if k ~= 'params' then g[k] = copy_value(v) end
    end
    for _, p in ipairs(group.params) do
      idx = idx + 1
      g.params[#g.params + 1] = idx
      local st = self.c:state(p)
      if st then
        for k, v in pairs(st) do
          if zl.is_tensor(v) then st[k] = v:clone() end
        end
        state[idx] = st
      end
    end
    groups[gi] = g
  end
  return { state = state, param_groups = groups }
end

--- opt:load_state_dict(sd): restores hyperparameters and state; the groups
--- must hold the same number of parameters with the same numbers of elements.
function Optimizer:load_state_dict(sd)
  if type(sd) ~= 'table' or type(sd.param_groups) ~= 'table' or type(sd.state) ~= 'table' then
    zl.raise(self.__name .. ': load_state_dict needs a table with state and param_groups')
  end
  if #sd.param_groups ~= #self.param_groups then
    zl.raise(fmt('%s: load_state_dict: %d param groups saved, the optimizer has %d', self.__name,
      #sd.param_groups, #self.param_groups))
  end
  for gi, group in ipairs(self.param_groups) do
    local saved = sd.param_groups[gi]
    if #saved.params ~= #group.params then
      zl.raise(fmt('%s: load_state_dict: param group %d has %d parameters saved, %d now', self.__name, gi,
        #saved.params, #group.params))
    end
  end
  -- Every parameter's state checked, then loaded: a bad one changes nothing.
  for _, check_only in ipairs { true, false } do
    local idx = 0
    for gi, group in ipairs(self.param_groups) do
      local saved = sd.param_groups[gi]
      for i, p in ipairs(group.params) do
        idx = idx + 1
        self.c:load_state(p, sd.state[saved.params[i] or idx], check_only)
      end
    end
  end
  for gi, group in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= 'params' then group[k] = copy_value(v) end
    end
  end
end

function Optimizer:__tostring()
  local lines = { self.__name .. ' (' }
  for gi, g in ipairs(self.param_groups) do
    local keys = {}
    for k in pairs(g) do if k ~= 'params' then keys[#keys + 1] = k end end
    table.sort(keys)
    lines[#lines + 1] = fmt('  group %d: %d parameters', gi, #g.params)
    for _, k in ipairs(keys) do lines[#lines + 1] = fmt('    %s: %s', k, show(g[k])) end
  end
  lines[#lines + 1] = ')'
  return table.concat(lines, '\n')
end

Optimizer.core = core
return Optimizer
