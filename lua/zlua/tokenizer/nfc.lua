-- zlua.tokenizer.nfc: Unicode normalization form C (canonical decomposition, canonical
-- ordering, canonical composition; Hangul by arithmetic), the NFC normalizer of Hugging
-- Face's tokenizer.json, over the tables of zlua.tokenizer.nfc_data (which are Hugging
-- Face's: its NFC has an older Unicode than Python's, and the ids follow it).

local data = require 'zlua.tokenizer.nfc_data'

local M = {}
local byte, find, sub = string.byte, string.find, string.sub
local ulen, codepoint, uchar = utf8.len, utf8.codepoint, utf8.char

-- Hangul syllables are L V [T] jamo by arithmetic (The Unicode Standard, 3.12).
local SBASE, LBASE, VBASE, TBASE = 0xAC00, 0x1100, 0x1161, 0x11A7
local LCOUNT, VCOUNT, TCOUNT = 19, 21, 28
local NCOUNT = VCOUNT * TCOUNT
local SCOUNT = LCOUNT * NCOUNT

local ccc_of = {}
do
  local r = data.ccc
  for k = 1, #r, 3 do
    for cp = r[k], r[k + 1] do ccc_of[cp] = r[k + 2] end
  end
end

-- full[cp]: the whole canonical decomposition, each mapping expanded until nothing is left.
local full = {}
local function expand(cp)
  local f = full[cp]
  if f then return f end
  local m = data.decomp[cp]
  if not m then return nil end
  f = {}
  for _, x in ipairs(m) do
    local e = expand(x)
    if e then
      for _, y in ipairs(e) do f[#f + 1] = y end
    else
      f[#f + 1] = x
    end
  end
  full[cp] = f
  return f
end
for cp in pairs(data.decomp) do expand(cp) end

-- compose[first][second]: the primary composites, from the two-character mappings that
-- are not excluded.
local compose = {}
do
  local excluded = {}
  for _, cp in ipairs(data.excluded) do excluded[cp] = true end
  for cp, m in pairs(data.decomp) do
    if #m == 2 and not excluded[cp] then
      local row = compose[m[1]]
      if not row then
        row = {}
        compose[m[1]] = row
      end
      row[m[2]] = cp
    end
  end
end

local unsafe = {}
do
  local r = data.unsafe
  for k = 1, #r, 2 do
    for cp = r[k], r[k + 1] do unsafe[cp] = true end
  end
end

local function decompose_into(cp, out)
  if cp >= SBASE and cp < SBASE + SCOUNT then
    local s = cp - SBASE
    out[#out + 1] = LBASE + s // NCOUNT
    out[#out + 1] = VBASE + (s % NCOUNT) // TCOUNT
    local t = s % TCOUNT
    if t > 0 then out[#out + 1] = TBASE + t end
    return
  end
  local f = full[cp]
  if f then
    for k = 1, #f do out[#out + 1] = f[k] end
  else
    out[#out + 1] = cp
  end
end

-- Each run of non-starters sorted by class, stably (insertion sort: runs are short).
local function reorder(cps)
  for k = 2, #cps do
    local c = cps[k]
    local cc = ccc_of[c]
    if cc then
      local j = k - 1
      while j >= 1 and (ccc_of[cps[j]] or 0) > cc do
        cps[j + 1] = cps[j]
        j = j - 1
      end
      cps[j + 1] = c
    end
  end
end

local function pair(a, b)
  if a >= LBASE and a < LBASE + LCOUNT and b >= VBASE and b < VBASE + VCOUNT then
    return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT
  end
  if a >= SBASE and a < SBASE + SCOUNT and (a - SBASE) % TCOUNT == 0 and b > TBASE and b < TBASE + TCOUNT then
    return a + (b - TBASE)
  end
  local row = compose[a]
  return row and row[b]
end

-- Canonical composition of decomposed, ordered code points, in place: each character
-- joins the last starter unless a character between them has class 0 or one not below its.
local function recompose(cps)
  local n = #cps
  if n == 0 then return cps end
  local si = 1
  -- A leading non-starter has no starter to join: 256 blocks everything after it.
  local last = ccc_of[cps[1]] and 256 or 0
  local w = 1
  for k = 2, n do
    local c = cps[k]
    local cc = ccc_of[c] or 0
    local comp = (last < cc or last == 0) and pair(cps[si], c)
    if comp then
      cps[si] = comp
    else
      if cc == 0 then si = w + 1 end
      last = cc
      w = w + 1
      cps[w] = c
    end
  end
  for k = w + 1, n do cps[k] = nil end
  return cps
end

-- NFC of s, valid UTF-8 throughout.
local function normalize(s)
  local cps = {}
  for _, cp in utf8.codes(s) do decompose_into(cp, cps) end
  reorder(cps)
  recompose(cps)
  for k = 1, #cps do cps[k] = uchar(cps[k]) end
  return table.concat(cps)
end

-- The code point at byte p of s and the byte after it, or nil and p + 1 for a byte that does
-- not start valid UTF-8.
local function char_at(s, p)
  local b = byte(s, p)
  if b < 0x80 then return b, p + 1 end
  if b >= 0xC2 and b <= 0xF4 and ulen(s, p, p) then
    return codepoint(s, p), p + (b >= 0xF0 and 4 or b >= 0xE0 and 3 or 2)
  end
  return nil, p + 1
end

--- nfc.normalize(s) -> s in Unicode NFC. Bytes that are not valid UTF-8 pass through and
--- nothing composes across them. Text where NFC changes nothing comes back as it is, and
--- only the stretches around characters that may change are worked on: from the last
--- character that is a stable starter before them to the next one.
function M.normalize(s)
  -- Below U+0300 (lead bytes up to 0xCB) every character is a stable starter.
  if not find(s, '[\204-\244]') then return s end
  local out, done, n = {}, 1, #s
  local start, p = 1, 1
  while p <= n do
    local cp, q = char_at(s, p)
    if cp and unsafe[cp] then
      -- The stretch runs to the next stable starter (or a byte that is not UTF-8).
      local e = q
      while e <= n do
        local c2, q2 = char_at(s, e)
        if not c2 or not unsafe[c2] then break end
        e = q2
      end
      if start > done then out[#out + 1] = sub(s, done, start - 1) end
      out[#out + 1] = normalize(sub(s, start, e - 1))
      done, p = e, e
      start = e
    else
      start = cp and p or q
      p = q
    end
  end
  if done == 1 then return s end
  if done <= n then out[#out + 1] = sub(s, done) end
  return table.concat(out)
end

return M
