--[[ zlua.nn.ModuleList([{m1, m2, ...}]): holds child modules named 1, 2, ...
  so their parameters are registered; it has no forward of its own. Index it
  (list[i]), count it (#list), iterate it (ipairs(list)) and grow it
  (list:append(m)). ]]

local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local ModuleList = Module:extend('ModuleList')

function ModuleList:__init(mods)
  if mods ~= nil and (type(mods) ~= 'table' or Module.is_module(mods)) then
    check.error(string.format('ModuleList: expected a list of modules, got %s',
                        Module.is_module(mods) and 'a module (wrap it in a table)' or type(mods)))
  end
  for i, m in ipairs(mods or {}) do
    if not Module.is_module(m) then
      check.error(string.format('ModuleList: entry %d is a %s, expected a module', i, type(m)))
    end
    self:register_module(tostring(i), m)
  end
end

--- list:append(m) adds m at the end and returns the list.
function ModuleList:append(m)
  if not Module.is_module(m) then
    check.error(string.format('ModuleList.append: expected a module, got %s', type(m)))
  end
  self:register_module(tostring(#self._order + 1), m)
  return self
end

function ModuleList:forward()
  check.error('ModuleList: has no forward; call its modules (for _, m in ipairs(list) do x = m(x) end)')
end

function ModuleList:__len() return #self._order end

return ModuleList
