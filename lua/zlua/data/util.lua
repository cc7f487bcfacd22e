--[[ zlua.data.util: what the classes of zlua.data share (private): a small
  class system, and argument checks that name the class, the option and the
  value given. A class is the metatable of its instances; calling it makes an
  instance and runs __init; Class:extend(name) makes a subclass that inherits
  methods through the class chain and metamethods (__len, __index,
  __tostring) by copy, since Lua reads metamethods from the metatable itself. ]]

local zl = require 'zlua'

local fmt, tointeger = string.format, math.tointeger

local util = {}

local function new(cls, ...)
  local self = setmetatable({}, cls)
  self:__init(...)
  return self
end

local function extend(parent, name)
  if type(name) ~= 'string' then
    zl.raise(fmt("extend: expected a class name, such as %s:extend('MyClass')",
                 rawget(parent, '__name') or 'Class'))
  end
  local cls = { __name = name, super = parent }
  for k, v in pairs(parent) do
    if type(k) == 'string' and k:sub(1, 2) == '__' and rawget(cls, k) == nil then cls[k] = v end
  end
  -- A plain class finds methods in itself; a class whose __index is a function
  -- (Dataset's, which sends integer keys to get) keeps that function.
  if parent.__index == parent then cls.__index = cls end
  return setmetatable(cls, { __index = parent, __call = new })
end

--- util.class(name): a root class with extend and an empty __init.
function util.class(name)
  local cls = { __name = name }
  cls.__index = cls
  cls.extend = extend
  cls.__init = function() end
  cls.__tostring = function(self) return getmetatable(self).__name end
  return setmetatable(cls, { __call = new })
end

--- util.is_instance(v, cls): whether v is an instance of cls or of a subclass.
function util.is_instance(v, cls)
  local c = type(v) == 'table' and getmetatable(v)
  while c do
    if c == cls then return true end
    c = rawget(c, 'super')
  end
  return false
end

local function show(v)
  if type(v) == 'string' then return fmt('%q', v) end
  return tostring(v)
end
util.show = show

--- util.options(class, o, known): o (nil gives {}), checked to be a table
--- whose keys are all in the set `known`, so a misspelt option is an error.
function util.options(class, o, known)
  if o == nil then return {} end
  if type(o) ~= 'table' then zl.raise(fmt('%s: options must be a table, got %s', class, type(o))) end
  for k in pairs(o) do
    if not known[k] then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      table.sort(names)
      zl.raise(fmt('%s: unknown option %s (known: %s)', class, show(k), table.concat(names, ', ')))
    end
  end
  return o
end

--- util.integer(class, what, v [, min]): v as an integer (>= min when given), or an error.
function util.integer(class, what, v, min)
  local i = tointeger(v)
  if not i or (min and i < min) then
    zl.raise(fmt('%s: %s must be an integer%s, got %s', class, what, min and ' >= ' .. min or '', show(v)))
  end
  return i
end

--- util.boolean(class, what, v, default)
function util.boolean(class, what, v, default)
  if v == nil then return default end
  if type(v) ~= 'boolean' then
    zl.raise(fmt('%s: %s must be a boolean, got %s', class, what, show(v)))
  end
  return v
end

--- util.check_source(class, source): a sample count (a non-negative integer)
--- or a dataset (#source samples); returns source.
function util.check_source(class, source)
  if type(source) == 'number' then
    util.integer(class, 'the number of samples', source, 0)
  elseif type(source) ~= 'table' and not (type(source) == 'userdata' and getmetatable(source)
                                          and getmetatable(source).__len) then
    zl.raise(fmt('%s: expected a dataset or a number of samples, got %s', class, type(source)))
  end
  return source
end

--- util.size_of(source): the number of samples now (a dataset may grow).
function util.size_of(source)
  if type(source) == 'number' then return tointeger(source) end
  return #source
end

--- util.permutation(n, gen): a random order of 1..n as a Lua array, drawn from
--- the engine's counter-based generator gen (nil: the default generator).
function util.permutation(n, gen)
  local perm = zl.randperm(n, gen):totable()
  for k = 1, n do perm[k] = perm[k] + 1 end
  return perm
end

function util.range(n)
  local out = {}
  for k = 1, n do out[k] = k end
  return out
end

return util
