--[[ zlua.util.suggest: Lua's "attempt to call a nil value (field 'rnadn')"
  for a mistyped zlua function, nn module or tensor method, with the name it
  was probably meant to be: "... (did you mean zl.randn?)". The message
  handler of the zlua executable and the embedding API call it on every
  error; any other message comes back as it was. ]]

local nearest = require 'zlua.util.nearest'

-- A name this close (edits) is a typo worth naming; farther ones are not.
local CLOSE = 2

return function(msg)
  local kind, name = tostring(msg):match("attempt to call a nil value %((%a+) '([%w_]+)'%)")
  local zl = package.loaded.zlua
  if not name or not zl or #name > 64 then return msg end
  local places = kind == 'method' and { { zl.Tensor, 'x:' } }
                 or kind == 'field' and { { zl, 'zl.' }, { package.loaded['zlua.nn'], 'nn.' } } or {}
  local best, best_d
  for _, place in ipairs(places) do
    local t, prefix = place[1], place[2]
    if type(t) == 'table' then
      for k, v in pairs(t) do
        if type(k) == 'string' and (type(v) == 'function' or type(v) == 'table') then
          local d = nearest.edit_distance(name, k)
          if d <= CLOSE and (not best_d or d < best_d or (d == best_d and prefix .. k < best)) then
            best, best_d = prefix .. k, d
          end
        end
      end
    end
  end
  return best and msg .. ' (did you mean ' .. best .. '?)' or msg
end
