-- zlua.util.nearest: the known name closest to a mistyped one, for the "did you mean"
-- hints of config, option and parameter errors. Pure Lua, standard library only.

local nearest = {}

-- Longer than any key, option or parameter name a hint could point at.
local MAX_KEY = 128

local function edit_distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end
nearest.edit_distance = edit_distance

local function words(key)
  local set = {}
  for w in key:gmatch('[^_%-%.]+') do set[w] = true end
  return set
end

--- nearest.find(key, keys) -> the entry of the array keys sharing the most words
--- (split at '_', '-', '.') with key, then the closest by edit distance, case ignored;
--- the first such entry on a tie, so the answer follows the order of keys. nil when
--- keys is empty or key is longer than 128 bytes. 'warmup_steps' finds 'warmup_num_steps'
--- rather than 'warmup_type'.
function nearest.find(key, keys)
  key = tostring(key)
  -- The distance costs #key x #name per name: a key far longer than any name
  -- (a 100 KB one) gets no hint rather than seconds of work.
  if #key > MAX_KEY then return nil end
  key = key:lower()
  local mine = words(key)
  local best, best_shared, best_d = nil, -1, math.huge
  for _, k in ipairs(keys) do
    local lk = k:lower()
    local shared = 0
    for w in pairs(words(lk)) do
      if mine[w] then shared = shared + 1 end
    end
    local d = edit_distance(key, lk)
    if shared > best_shared or (shared == best_shared and d < best_d) then
      best, best_shared, best_d = k, shared, d
    end
  end
  return best
end

return nearest
