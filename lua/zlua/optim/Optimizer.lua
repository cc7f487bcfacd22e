--[[ zlua.optim.Optimizer: what every optimizer shares. Param groups (each a
  table with `params` and its own hyperparameters, defaults filled from the
  constructor's options), per-parameter state (created on the first step that
  sees a gradient), zero_grad, state_dict/load_state_dict. A subclass gives its
  name, its hyperparameter defaults, the state it keeps per parameter and an
  `update(items, group, grad_scale, step)` that runs one fused C call over a
  list of parameters (on a device, one launch). ]]

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

--- Optimizer.extend(name, defaults, check): a subclass. `defaults` lists every
--- hyperparameter and its default; `check(name, key, value)` validates one.
function Optimizer.extend(name, defaults, check)
  local cls = setmetatable({}, { __index = Optimizer })
  cls.__index = cls
  cls.__name = name
  cls.hyper_defaults = defaults
  cls.check = check
  cls.__tostring = Optimizer.__tostring
  setmetatable(cls, {
    __index = Optimizer,
    __call = function(c, params, opts) return c.new(params, opts) end,
  })
  function cls.new(params, opts) return Optimizer.init(setmetatable({}, cls), params, opts) end
  return cls
end

function Optimizer:validate(key, value, where)
  local known = self.hyper_defaults
  if known[key] == nil then
    local names = {}
    for k in pairs(known) do names[#names + 1] = k end
    table.sort(names)
    local near = nearest.find(key, names)
    zl.raise(fmt('%s: unknown option %s%s (did you mean %q?)', self.__name, show(key), where, near))
  end
  self.check(self.__name .. where, key, value)
end

local function is_group_list(params)
  return type(params) == 'table' and type(params[1]) == 'table' and not zl.is_tensor(params[1])
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
    self:validate(k, v, '')
    self.defaults[k] = v
  end
  self.param_groups = {}
  self.state = {}                    -- keyed by the parameter's engine identity (zl id)
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
    if p:dtype() ~= 'f32' or not p:is_contiguous() then
      zl.raise(fmt('%s: param group %d, entry %d must be a contiguous f32 tensor (the master weights), got %s%s',
        self.__name, gi, i, p:dtype(), p:is_contiguous() and '' or ' non-contiguous'))
    end
    group.params[i] = p
  end
  for k, v in pairs(g) do
    if k ~= 'params' then
      self:validate(k, v, fmt(' in param group %d', gi))
      group[k] = v
    end
  end
  for k, v in pairs(self.defaults) do
    if group[k] == nil then group[k] = type(v) == 'table' and { table.unpack(v) } or v end
  end
  self.param_groups[gi] = group
end

--- opt:zero_grad(): drops every gradient (PyTorch's set_to_none default).
function Optimizer:zero_grad()
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do p.grad = nil end
  end
end

--- opt:step([{grad_scale=s}]): one update of every parameter that has a
--- gradient; grad_scale multiplies each gradient as it is read (loss-scale
--- and clipping factors, without a pass of their own).
function Optimizer:step(opts)
  local scale = opts and opts.grad_scale or 1.0
  for _, group in ipairs(self.param_groups) do
    -- A group's parameters are stepped in one call when their step counts
    -- agree (they do unless some had no gradient at some step).
    local items, step, same = {}, nil, true
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g then
        local id = p:id()
        local st = self.state[id]
        if not st then
          st = self:init_state(p)
          st.step = 0
          self.state[id] = st
        end
        st.step = st.step + 1
        items[#items + 1] = { p = p, g = g, st = st, half = self.halves and self.halves[id] }
        if step == nil then step = st.step elseif step ~= st.step then same = false end
      end
    end
    if same then
      if #items > 0 then self:update(items, group, scale, step) end
    else
      for _, it in ipairs(items) do self:update({ it }, group, scale, it.st.step) end
    end
  end
end

--- The {p, g, m, v, half} sets of items for the C call, m and v the state's
--- tensors under keys mk and vk (either may be nil).
function Optimizer.sets(items, mk, vk)
  local sets = {}
  for i, it in ipairs(items) do
    sets[i] = { it.p, it.g, mk and it.st[mk] or nil, vk and it.st[vk] or nil, it.half }
  end
  return sets
end

--- opt:set_half(master, half): after each step of `master` (an f32 parameter
--- of this optimizer) write its value rounded to half's dtype (bf16 or f16)
--- into `half` in the same fused pass: the working weights of mixed precision.
function Optimizer:set_half(master, half)
  if half:numel() ~= master:numel() or (half:dtype() ~= 'bf16' and half:dtype() ~= 'f16') then
    zl.raise(fmt('%s: set_half needs a bf16 or f16 tensor of %d elements, got %s of %d', self.__name,
      master:numel(), half:dtype(), half:numel()))
  end
  self.halves = self.halves or {}
  self.halves[master:id()] = half
end

-- Moment buffers: zeros shaped like p, where p lives (a device steps its
-- parameters there), charged to the optimizer category.
function Optimizer.buffer(p)
  local t = zl.zeros(p:shape(), { device = p:device() })
  t:set_category('optimizer')
  return t
end

--- opt:state_dict(): {state = {[i] = {step=, <buffers>}}, param_groups = {...}},
--- parameters numbered 1.. across groups in order, as PyTorch does.
function Optimizer:state_dict()
  local state, groups, idx = {}, {}, 0
  for gi, group in ipairs(self.param_groups) do
    local g = { params = {} }
    for k, v in pairs(group) do
      if k ~= 'params' then g[k] = type(v) == 'table' and { table.unpack(v) } or v end
    end
    for _, p in ipairs(group.params) do
      idx = idx + 1
      g.params[#g.params + 1] = idx
      local st = self.state[p:id()]
      if st then
        local copy = {}
        for k, v in pairs(st) do copy[k] = zl.is_tensor(v) and v:clone() or v end
        state[idx] = copy
      end
    end
    groups[gi] = g
  end
  return { state = state, param_groups = groups }
end

--- opt:load_state_dict(sd): restores hyperparameters and state; the groups
--- must hold the same number of parameters with the same shapes.
function Optimizer:load_state_dict(sd)
  if type(sd) ~= 'table' or type(sd.param_groups) ~= 'table' or type(sd.state) ~= 'table' then
    zl.raise(self.__name .. ': load_state_dict needs a table with state and param_groups')
  end
  if #sd.param_groups ~= #self.param_groups then
    zl.raise(fmt('%s: load_state_dict: %d param groups saved, the optimizer has %d', self.__name,
      #sd.param_groups, #self.param_groups))
  end
  local idx = 0
  local new_state = {}
  for gi, group in ipairs(self.param_groups) do
    local saved = sd.param_groups[gi]
    if #saved.params ~= #group.params then
      zl.raise(fmt('%s: load_state_dict: param group %d has %d parameters saved, %d now', self.__name, gi,
        #saved.params, #group.params))
    end
    for _, p in ipairs(group.params) do
      idx = idx + 1
      local st = sd.state[saved.params[_] or idx]
      if st then
        local copy = {}
        for k, v in pairs(st) do
          if zl.is_tensor(v) then
            if v:numel() ~= p:numel() then
              zl.raise(fmt('%s: load_state_dict: state %q of parameter %d has %d elements, the parameter %d',
                self.__name, k, idx, v:numel(), p:numel()))
            end
            local b = self.buffer(p)
            zl.no_grad(function() b:copy_(v:reshape(p:shape()):to(p:device())) end)
            copy[k] = b
          else
            copy[k] = v
          end
        end
        new_state[p:id()] = copy
      end
    end
  end
  for gi, group in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= 'params' then group[k] = type(v) == 'table' and { table.unpack(v) } or v end
    end
  end
  self.state = new_state
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
