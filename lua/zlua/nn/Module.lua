--[[ zlua.nn.Module: the base of every layer and model. It records
  parameters, buffers and child modules in the order they are assigned,
  names them with dots, saves and loads them by name, prints as a tree, and
  prefixes errors raised inside a model with the path of the failing module.

  local Net = nn.Module:extend('Net')
  function Net:__init(n)
    self.fc1 = nn.Linear(n, 16)       -- a child module
    self.scale = zl.ones(16)          -- a parameter
    self:register_buffer('count', zl.zeros(1))
  end
  function Net:forward(x) return self.fc1(x) * self.scale end
  local net = Net(8)                  -- calls __init; net(x) calls forward
]]

local zl = require 'zlua'
local check = require 'zlua.nn.check'

local fmt, concat = string.format, table.concat
local is_tensor = zl.is_tensor
local math_type = math.type

local Module = {}

--[[ Design: modules, parameters and buffers live in three name -> value
  tables beside one list of names in assignment order, never as raw fields
  of the instance, so every assignment reaches __newindex (the place the
  order is kept) and reads reach them through __index. Walking that list
  depth first gives definition order: ZeRO's flat buffer and checkpoints
  rely on it. Own parameters and children interleave as they were assigned
  (PyTorch lists a module's own parameters first). A tensor assigned to a
  field becomes a parameter; plain values (numbers, strings, tables,
  functions) are stored as raw fields. A tensor reachable under two names
  (a tied weight) is listed once, under the first. ]]

local function is_module(v)
  if type(v) ~= 'table' then return false end
  local mt = getmetatable(v)
  return type(mt) == 'table' and mt.__zlua_module == true and rawget(v, '_order') ~= nil
end
Module.is_module = is_module

--- Module.is_instance(m, cls): whether m is a module of class cls or of a
--- class extended from it.
function Module.is_instance(m, cls)
  local c = is_module(m) and getmetatable(m)
  while c do
    if c == cls then return true end
    c = rawget(c, 'super')
  end
  return false
end

local function class_of(m) return getmetatable(m) end

-- Integer keys (children of Sequential and ModuleList) are named "1", "2", ...
local function key_name(k)
  if math_type(k) == 'integer' then return tostring(k) end
  return k
end

local function instance_index(self, k)
  local name = key_name(k)
  local v = self._modules[name]
  if v ~= nil then return v end
  v = self._parameters[name]
  if v ~= nil then return v end
  v = self._buffers[name]
  if v ~= nil then return v end
  return class_of(self)[k]
end

local function forget(self, name)
  if self._modules[name] == nil and self._parameters[name] == nil and self._buffers[name] == nil then
    return false
  end
  self._modules[name], self._parameters[name], self._buffers[name] = nil, nil, nil
  self._nonpersistent[name] = nil
  local order = self._order
  for i = 1, #order do
    if order[i] == name then table.remove(order, i) break end
  end
  return true
end

-- Puts `v` in `store` under `name`, keeping the name's first position when it
-- is reassigned with a value of the same kind.
local function place(self, store, name, v)
  if store[name] == nil then
    forget(self, name)
    local order = self._order
    order[#order + 1] = name
  end
  store[name] = v
end

local function check_name(self, op, name)
  if type(name) ~= 'string' or name == '' or name:find('.', 1, true) then
    check.error(fmt("%s.%s: a name must be a non-empty string without dots, got %s",
                    self.__name, op, type(name) == 'string' and fmt('%q', name) or tostring(name)))
  end
end

--- self:register_parameter(name, t): `t` becomes a trainable parameter (as
--- `self[name] = t` does): its gradient is required and its memory is charged
--- to the params category. Freeze it afterwards with t:requires_grad(false).
function Module:register_parameter(name, t)
  name = key_name(name)
  check_name(self, 'register_parameter', name)
  if not is_tensor(t) then
    check.error(fmt('%s.register_parameter: %s must be a tensor, got %s', self.__name, name, type(t)))
  end
  if not t:is_float() then
    check.error(fmt('%s: parameter %s must be a floating-point tensor, got %s (use register_buffer '
              .. 'for integer state)', self.__name, name, t:dtype()))
  end
  t:requires_grad(true)
  t:set_category('params')
  place(self, self._parameters, name, t)
end

--- self:register_buffer(name, t [, persistent = true]): state that is saved
--- with the model but not trained (running statistics, counters). A buffer
--- that is not persistent is left out of state_dict().
function Module:register_buffer(name, t, persistent)
  name = key_name(name)
  check_name(self, 'register_buffer', name)
  if t ~= nil and not is_tensor(t) then
    check.error(fmt('%s.register_buffer: %s must be a tensor or nil, got %s', self.__name, name, type(t)))
  end
  if t == nil then forget(self, name) return end
  place(self, self._buffers, name, t)
  self._nonpersistent[name] = (persistent == false) or nil
end

--- self:register_module(name, m): `m` becomes a child (as `self[name] = m` does).
function Module:register_module(name, m)
  name = key_name(name)
  check_name(self, 'register_module', name)
  if not is_module(m) then
    check.error(fmt('%s.register_module: %s must be a module, got %s', self.__name, name, type(m)))
  end
  place(self, self._modules, name, m)
end
Module.add_module = Module.register_module

local function instance_newindex(self, k, v)
  local name = key_name(k)
  if is_module(v) then
    check_name(self, 'register_module', name)
    place(self, self._modules, name, v)
  elseif is_tensor(v) then
    if self._buffers[name] ~= nil then
      place(self, self._buffers, name, v)
    else
      self:register_parameter(name, v)
    end
  elseif v == nil then
    if not forget(self, name) then rawset(self, k, nil) end
  elseif self._modules[name] or self._parameters[name] or self._buffers[name] then
    check.error(fmt("%s: cannot assign a %s to '%s', which holds a %s (assign nil first to remove it)",
                    self.__name, type(v), name, self._modules[name] and 'module' or 'tensor'))
  else
    rawset(self, k, v)
  end
end

-- ---------------------------------------------------------------------------
-- Calling: errors prefixed with the path of the failing module.

local depth = 0
local is_call = setmetatable({}, { __mode = 'k' })   -- the __call of every class

local function pass(...) return ... end

-- The dotted path from `root` to `target` through registered children, or nil.
local function path_to(root, target)
  local seen = {}
  local function search(m, prefix)
    if seen[m] then return nil end
    seen[m] = true
    for _, name in ipairs(m._order) do
      local c = m._modules[name]
      if c then
        if c == target then return prefix .. name end
        local p = search(c, prefix .. name .. '.')
        if p then return p end
      end
    end
    return nil
  end
  return search(root, '')
end

-- Runs where the error was raised, before the stack unwinds: the module
-- calls still on the stack give the path, outermost first.
local function prefix_error(e)
  if type(e) ~= 'string' then return e end
  local chain = {}
  local level = 2
  while true do
    local info = debug.getinfo(level, 'f')
    if not info then break end
    if is_call[info.func] then
      local _, m = debug.getlocal(level, 1)
      if is_module(m) and chain[1] ~= m then table.insert(chain, 1, m) end
    end
    level = level + 1
  end
  local parts = {}
  for i = 1, #chain - 1 do
    parts[#parts + 1] = path_to(chain[i], chain[i + 1]) or ('<' .. chain[i + 1].__name .. '>')
  end
  if #parts == 0 then return e end
  -- After the "script.lua:12: " a message may open with, as Lua puts it.
  local where, rest = e:match('^([^\n]-:%d+: )(.*)$')
  if not where then where, rest = '', e end
  return where .. concat(parts, '.') .. ': ' .. rest
end

-- A class's __call. Only the outermost call pays for xpcall; the calls it
-- makes keep their frame on the stack (no tail call) so prefix_error can find
-- them. Each class has its own closure, so tracebacks name the right class.
local function make_call()
  local function call(self, ...)
    if depth > 0 then return pass(self:forward(...)) end
    depth = 1
    local res = table.pack(xpcall(self.forward, prefix_error, self, ...))
    depth = 0
    if not res[1] then error(res[2], 0) end
    return table.unpack(res, 2, res.n)
  end
  is_call[call] = true
  return call
end

function Module:forward()
  check.error(fmt('%s: forward is not implemented', self.__name))
end

-- ---------------------------------------------------------------------------
-- Walking the tree

-- Calls fn(kind, name, value, owner, local_name) for every entry below `m`
-- in definition order; kind is 'param', 'buffer' or 'module' (modules are
-- reported before their contents).
local function walk(m, prefix, fn, seen)
  seen[m] = true
  for _, k in ipairs(m._order) do
    local name = prefix .. k
    local p = m._parameters[k]
    if p ~= nil then
      fn('param', name, p, m, k)
    else
      local c = m._modules[k]
      if c ~= nil then
        if not seen[c] then
          fn('module', name, c, m, k)
          walk(c, name .. '.', fn, seen)
        end
      else
        fn('buffer', name, m._buffers[k], m, k)
      end
    end
  end
end

local function iterate(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

-- { {name, tensor}, ... } of the parameters, each tensor once (a tied weight
-- keeps the first name it was reached by).
local function param_list(self)
  local list, seen = {}, {}
  walk(self, '', function(kind, name, p)
    if kind == 'param' and not seen[p:id()] then
      seen[p:id()] = true
      list[#list + 1] = { name, p }
    end
  end, {})
  return list
end

--- for name, p in m:named_parameters() do ... end: dotted names in definition
--- order; a tensor reachable under two names (a tied weight) appears once.
function Module:named_parameters()
  return iterate(param_list(self))
end

--- m:parameters(): an array of the parameters, in named_parameters() order.
function Module:parameters()
  local out = {}
  for i, e in ipairs(param_list(self)) do out[i] = e[2] end
  return out
end

--- m:num_parameters(): the number of scalar parameters (each tensor once),
--- whole even where ZeRO-3 keeps only a chunk of them on this rank.
function Module:num_parameters()
  local numel = require('zlua.zero').numel
  local n = 0
  for _, e in ipairs(param_list(self)) do n = n + numel(e[2]) end
  return n
end

--- for name, b in m:named_buffers() do ... end
function Module:named_buffers()
  local list = {}
  walk(self, '', function(kind, name, b)
    if kind == 'buffer' then list[#list + 1] = { name, b } end
  end, {})
  return iterate(list)
end

function Module:buffers()
  local out = {}
  for _, b in self:named_buffers() do out[#out + 1] = b end
  return out
end

--- for name, m in model:named_modules() do ... end: the model itself first
--- (named ''), then every descendant depth first, each once.
function Module:named_modules()
  local list = { { '', self } }
  walk(self, '', function(kind, name, c)
    if kind == 'module' then list[#list + 1] = { name, c } end
  end, {})
  return iterate(list)
end

function Module:modules()
  local out = {}
  for _, m in self:named_modules() do out[#out + 1] = m end
  return out
end

--- for name, c in m:named_children() do ... end: the direct children only.
function Module:named_children()
  local list = {}
  for _, k in ipairs(self._order) do
    local c = self._modules[k]
    if c then list[#list + 1] = { k, c } end
  end
  return iterate(list)
end

function Module:children()
  local out = {}
  for _, c in self:named_children() do out[#out + 1] = c end
  return out
end

--- m:apply(fn): fn(module) on every child's subtree first, then on m; returns m.
function Module:apply(fn)
  for _, c in self:named_children() do c:apply(fn) end
  fn(self)
  return self
end

--- m:train([mode = true]) and m:eval(): set `training` on m and every
--- descendant (Dropout reads it); both return m.
function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in self:named_modules() do rawset(m, 'training', mode and true or false) end
  return self
end

function Module:eval() return self:train(false) end

--- m:zero_grad(): drops every parameter's gradient (the next backward starts
--- from nothing, as PyTorch's set_to_none).
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p:zero_grad() end
end

-- The device and dtype a Module:to call names, as t:to takes them.
local function to_args(self, a, b)
  if type(a) == 'table' then return a.device, a.dtype end
  local device, dtype
  for _, v in ipairs({ a, b }) do
    if type(v) ~= 'string' then
      check.error(fmt("%s.to: expected a device ('cuda', 'cpu') or a dtype ('bf16'), got %s", self.__name, type(v)))
    end
    if v == 'cpu' or v:match('^cuda') then device = v else dtype = v end
  end
  return device, dtype
end

--- m:to(device [, dtype]), m:to(dtype) or m:to{device=, dtype=}: moves every
--- parameter and buffer to the device (and floating-point ones to the dtype)
--- in place, as PyTorch's Module.to: each stays the same tensor, so optimizers
--- and tied weights keep pointing at it; a gradient on the old device is
--- dropped. Returns m. m:cuda([index]) and m:cpu() are the short forms.
function Module:to(a, b)
  local device, dtype = to_args(self, a, b)
  if device == nil and dtype == nil then
    check.error(fmt("%s.to: expected a device ('cuda', 'cpu') or a dtype ('bf16')", self.__name))
  end
  local seen = {}
  walk(self, '', function(kind, _, t)
    if (kind ~= 'param' and kind ~= 'buffer') or t == nil or seen[t:id()] then return end
    seen[t:id()] = true
    local moved = device and t:to(device) or t
    if dtype and moved:is_float() then moved = moved:to(dtype) end
    if moved ~= t then zl.no_grad(function() t:set_data(moved) end) end
  end, {})
  return self
end

function Module:cuda(index) return self:to('cuda:' .. math.tointeger(index or 0)) end
function Module:cpu() return self:to('cpu') end

-- ---------------------------------------------------------------------------
-- State

local function shape_str(t) return '[' .. concat(t:shape(), ', ') .. ']' end

-- name -> tensor for what state_dict saves, the names in order, and the
-- aliases (second names of tied parameters) that load_state_dict accepts.
local function state_entries(self)
  local entries, order, first, aliases = {}, {}, {}, {}
  walk(self, '', function(kind, name, v, owner, k)
    if kind == 'param' then
      local id = v:id()
      if first[id] then aliases[name] = v return end
      first[id] = name
    elseif kind ~= 'buffer' or owner._nonpersistent[k] then
      return
    end
    entries[name] = v
    order[#order + 1] = name
  end, {})
  return entries, order, aliases
end

local function ordered_pairs(sd, order)
  local listed = {}
  for _, k in ipairs(order) do listed[k] = true end
  local i, key = 0, nil
  return function()
    while i < #order do
      i = i + 1
      local k = order[i]
      if rawget(sd, k) ~= nil then return k, rawget(sd, k) end
    end
    repeat
      key = next(sd, key)
    until key == nil or not listed[key]
    if key ~= nil then return key, rawget(sd, key) end
  end
end

--- m:state_dict(): sd, keys. sd maps each dotted name to a detached tensor
--- that shares the parameter's (or persistent buffer's) memory; keys lists the
--- names in definition order, and pairs(sd) follows that order too. A tied
--- weight is saved once, under its first name.
function Module:state_dict()
  local entries, order = state_entries(self)
  local sd = {}
  for _, k in ipairs(order) do sd[k] = entries[k]:detach() end
  local keys = table.move(order, 1, #order, 1, {})
  return setmetatable(sd, { __pairs = function(t) return ordered_pairs(t, keys), t, nil end }), keys
end

--- m:load_state_dict(sd [, strict = true]): copies each entry of sd into the
--- parameter or buffer of that name (converting the dtype). Nothing is copied
--- unless every entry fits: an error lists every missing, unexpected and
--- mis-shaped entry (with both shapes). With strict = false, missing and
--- unexpected entries are allowed. Returns { missing_keys =, unexpected_keys = }.
function Module:load_state_dict(sd, strict)
  if type(sd) ~= 'table' then
    check.error(fmt('%s.load_state_dict: expected a table of tensors, got %s', self.__name, type(sd)))
  end
  if strict == nil then strict = true end
  local entries, order, aliases = state_entries(self)
  local missing, unexpected, bad = {}, {}, {}
  local copies = {}
  local function fits(name, dst, src)
    if not is_tensor(src) then
      bad[#bad + 1] = fmt('%s: expected a tensor, got %s', name, type(src))
    elseif dst ~= src then
      local ds, ss = dst:shape(), src:shape()
      local same = #ds == #ss
      for i = 1, #ds do same = same and ds[i] == ss[i] end
      if same then
        copies[#copies + 1] = { dst, src }
      else
        bad[#bad + 1] = fmt('%s: checkpoint shape %s, model shape %s', name, shape_str(src), shape_str(dst))
      end
    end
  end
  for _, name in ipairs(order) do
    local src = rawget(sd, name)
    if src == nil then missing[#missing + 1] = name else fits(name, entries[name], src) end
  end
  for name, src in pairs(sd) do
    if entries[name] == nil then
      if aliases[name] ~= nil then
        fits(name, aliases[name], src)
      else
        unexpected[#unexpected + 1] = tostring(name)
      end
    end
  end
  table.sort(unexpected)
  if #bad > 0 or (strict and (#missing > 0 or #unexpected > 0)) then
    local lines = { fmt('%s.load_state_dict: the state does not fit the model:', self.__name) }
    if strict and #missing > 0 then lines[#lines + 1] = '  missing: ' .. concat(missing, ', ') end
    if strict and #unexpected > 0 then lines[#lines + 1] = '  unexpected: ' .. concat(unexpected, ', ') end
    for _, b in ipairs(bad) do lines[#lines + 1] = '  shape mismatch: ' .. b end
    check.error(concat(lines, '\n'))
  end
  zl.no_grad(function()
    for _, c in ipairs(copies) do c[1]:copy_(c[2]:to(c[1]:device())) end
  end)
  return { missing_keys = missing, unexpected_keys = unexpected }
end

-- ---------------------------------------------------------------------------
-- Printing

--- m:extra_repr(): what a class prints between its parentheses ('' by default).
function Module:extra_repr() return '' end

local function indent(s) return (s:gsub('\n', '\n  ')) end

local function repr(m)
  local extra = m:extra_repr() or ''
  local lines = {}
  for name, c in m:named_children() do
    lines[#lines + 1] = '  (' .. name .. '): ' .. indent(repr(c))
  end
  if #lines == 0 then return m.__name .. '(' .. extra .. ')' end
  if extra ~= '' then table.insert(lines, 1, '  ' .. indent(extra)) end
  return m.__name .. '(\n' .. concat(lines, '\n') .. '\n)'
end

-- ---------------------------------------------------------------------------
-- Classes

local metamethods = { '__index', '__newindex', '__tostring', '__len', '__fields_of' }

-- Set while zlua.zero.Init builds a model: it partitions each module's own
-- parameters as soon as the module's constructor returns.
local post_init = nil

--- Module.set_post_init(fn): fn(module) runs after every constructor
--- (zlua.zero.Init's hook); returns the previous one. nil removes it.
function Module.set_post_init(fn)
  local before = post_init
  post_init = fn
  return before
end

-- Calling a class makes an instance: the tables first, then cls.__init.
local function new(cls, ...)
  local self = setmetatable({
    _order = {}, _parameters = {}, _buffers = {}, _modules = {}, _nonpersistent = {},
    training = true,
  }, cls)
  self:__init(...)
  if post_init then post_init(self) end
  return self
end

--- Module:extend(name): a subclass named `name` (used in printing and error
--- messages). Define cls:__init(...) and cls:forward(...); call the parent's
--- constructor as Parent.__init(self, ...) when extending a layer.
function Module:extend(name)
  if type(name) ~= 'string' or name == '' then
    check.error('Module:extend: expected a class name, such as Module:extend(\'Net\')')
  end
  local cls = { __name = name, super = self, __zlua_module = true }
  for _, mm in ipairs(metamethods) do cls[mm] = self[mm] end
  cls.__fields = cls
  cls.__call = make_call()
  return setmetatable(cls, { __index = self, __call = new })
end

function Module:__init() end

Module.__name = 'Module'
Module.__zlua_module = true
Module.__index = instance_index
-- For the REPL's completion, which reads tables and never calls __index:
-- an instance's submodules, parameters and buffers, then its class's methods.
Module.__fields_of = { '_modules', '_parameters', '_buffers' }
Module.__fields = Module
Module.__newindex = instance_newindex
Module.__call = make_call()
Module.__tostring = repr

return setmetatable(Module, { __call = new })
