-- zlua.tokenizer.uclass: the Unicode character classes the tokenizer needs, looked up in the
-- generated unicode_ranges table: GPT-2's split classes and \w (for added tokens).

local ranges = require 'zlua.tokenizer.unicode_ranges'

local M = {}

-- Sorted, disjoint ranges as three parallel arrays, searched by bisection.
local function table_of(lists)
  local all = {}
  for cls, r in pairs(lists) do
    for k = 1, #r, 2 do all[#all + 1] = { r[k], r[k + 1], cls } end
  end
  table.sort(all, function(a, b) return a[1] < b[1] end)
  local t = { firsts = {}, lasts = {}, classes = {} }
  for k, e in ipairs(all) do t.firsts[k], t.lasts[k], t.classes[k] = e[1], e[2], e[3] end
  return t
end

local function lookup(t, cp, none)
  local firsts, lasts = t.firsts, t.lasts
  local lo, hi = 1, #firsts
  while lo <= hi do
    local mid = (lo + hi) // 2
    if cp < firsts[mid] then hi = mid - 1
    elseif cp > lasts[mid] then lo = mid + 1
    else return t.classes[mid] end
  end
  return none
end

local split = table_of({ L = ranges.L, N = ranges.N, S = ranges.S })
local word = table_of({ [true] = ranges.W })

-- Text repeats its characters: each code point is looked up once.
local seen = {}
for cp = 0, 127 do seen[cp] = lookup(split, cp, 'O') end

--- uclass.class(cp) -> 'L' (\p{L}), 'N' (\p{N}), 'S' (\s) or 'O' (anything else).
function M.class(cp)
  local c = seen[cp]
  if not c then
    c = lookup(split, cp, 'O')
    seen[cp] = c
  end
  return c
end

--- uclass.is_word(cp) -> whether cp is in \w as the regex crate has it.
function M.is_word(cp)
  return lookup(word, cp, false)
end

return M
