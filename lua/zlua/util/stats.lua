-- zlua.util.stats: the summary the benchmark scripts report of repeated
-- timings. Pure Lua, standard library only.

local stats = {}

--- stats.median(xs) -> median, smallest, largest (xs is not reordered).
function stats.median(xs)
  local s = { table.unpack(xs) }
  table.sort(s)
  local h = #s // 2
  return #s % 2 == 1 and s[h + 1] or (s[h] + s[h + 1]) / 2, s[1], s[#s]
end

return stats
