--[[ zlua.nn.Sequential(m1, m2, ...) (or Sequential{m1, m2, ...}): calls its
  children in order, each on the previous one's output. Children are named
  1, 2, ...: seq[2] is the second, #seq their count (a parameter or
  buffer registered on the Sequential itself is neither). ]]

local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Sequential = Module:extend('Sequential')

function Sequential:__init(...)
  local mods = { ... }
  local n = select('#', ...)
  if n == 1 and type(mods[1]) == 'table' and not Module.is_module(mods[1]) then
    mods, n = mods[1], #mods[1]
  end
  for i = 1, n do
    if not Module.is_module(mods[i]) then
      check.error(string.format('Sequential: argument %d is a %s, expected a module', i, type(mods[i])))
    end
    self:register_module(tostring(i), mods[i])
  end
end

--- seq:add(m) appends a child and returns seq.
function Sequential:add(m)
  if not Module.is_module(m) then
    check.error(string.format('Sequential.add: expected a module, got %s', type(m)))
  end
  self:register_module(tostring(#self + 1), m)
  return self
end
Sequential.append = Sequential.add

function Sequential:forward(x)
  local mods = self._modules
  for i = 1, #self do x = mods[tostring(i)](x) end
  return x
end

function Sequential:__len()
  local mods, n = self._modules, 0
  while mods[tostring(n + 1)] do n = n + 1 end
  return n
end

return Sequential
