--[[ zlua.nn.check: the argument checks the layers share, so a bad size or
  option is reported the same way everywhere: the class, the argument and
  the value given. Private to zlua.nn. ]]

local fmt = string.format

local check = {}

--- check.error(msg): raises msg prefixed with the line of the user's script
--- that led here (the first frame outside zlua's own modules: compiled in,
--- or read from the source tree's lua/zlua), as the binding does for engine
--- errors, so a message points at the caller's code however deep in module
--- calls it was raised.
function check.error(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, 'Sl')
    if not info then error(msg, 0) end
    local src = info.source
    if info.currentline > 0 and not src:find('^@zlua/') and not src:find('/lua/zlua/', 1, true) then
      error(info.short_src .. ':' .. info.currentline .. ': ' .. msg, 0)
    end
    level = level + 1
  end
end

local function show(v)
  if type(v) == 'string' then return fmt('%q', v) end
  return tostring(v)
end

function check.positive_int(class, what, v)
  local i = math.tointeger(v)
  if not i or i <= 0 then
    check.error(fmt('%s: %s must be a positive integer, got %s', class, what, show(v)))
  end
  return i
end

function check.probability(class, what, v)
  if type(v) ~= 'number' or v < 0 or v > 1 then
    check.error(fmt('%s: %s must be a number in [0, 1], got %s', class, what, show(v)))
  end
  return v
end

-- An options table (nil gives {}); keys outside `known` are an error naming
-- the key, so a misspelt option is not silently ignored.
function check.options(class, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then
    check.error(fmt('%s: options must be a table, got %s', class, type(opts)))
  end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      check.error(fmt('%s: unknown option %s (expected %s)', class, show(k), table.concat(names, ', ')))
    end
  end
  return opts
end

-- A size or a pair of sizes ({h, w}) -> h, w.
function check.pair(class, what, v, min)
  local a, b
  if type(v) == 'table' then
    a, b = math.tointeger(v[1]), math.tointeger(v[2])
  else
    a = math.tointeger(v)
    b = a
  end
  if not a or not b or a < min or b < min or (type(v) == 'table' and #v ~= 2) then
    local t = show(v)
    if type(v) == 'table' then
      local items = {}
      for i, x in ipairs(v) do items[i] = show(x) end
      t = '{' .. table.concat(items, ', ') .. '}'
    end
    check.error(fmt('%s: %s must be an integer >= %d or a pair {h, w} of them, got %s', class, what, min, t))
  end
  return a, b
end

return check
