-- zlua.tokenizer.split_pattern: the regexes of tokenizer.json's Split pre-tokenizer that this
-- tokenizer knows, recognised by their text: GPT-2's (zlua.tokenizer.pretokenize) and the
-- LLaMA 3 / Qwen2 family, written here as a scanner over UTF-8. Any other is refused.

local pretokenize = require 'zlua.tokenizer.pretokenize'

local M = {}
local byte, sub = string.byte, string.sub
local char_at = pretokenize.char_at

local GPT2 = [['s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+]]
-- LLaMA 3 has \p{N}{1,3} between these, Qwen2 \p{N}.
local HEAD = [[(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|]]
local TAIL = [[| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+]]

--- split_pattern.KNOWN: the supported patterns, for messages.
M.KNOWN = 'GPT-2\'s, and LLaMA 3\'s and Qwen2\'s ' .. HEAD .. '\\p{N}{1,3}' .. TAIL
  .. ' (\\p{N}{1,K} for any K, or \\p{N})'

-- Where the contraction at byte i (an apostrophe) ends, in any case, or nil. Case folding
-- makes U+017F (long s, bytes C5 BF) an s, as Oniguruma's (?i) has it.
local function contraction(s, i)
  local b1, b2 = byte(s, i + 1, i + 2)
  if not b1 then return nil end
  if b1 == 0xC5 and b2 == 0xBF then return i + 3 end
  if b1 >= 0x80 then return nil end
  b1 = b1 | 0x20 -- ASCII lower case
  if b1 == 115 or b1 == 116 or b1 == 109 or b1 == 100 then return i + 2 end -- s t m d
  b2 = b2 and b2 < 0x80 and b2 | 0x20
  if (b1 == 114 and b2 == 101) or (b1 == 118 and b2 == 101) or (b1 == 108 and b2 == 108) then -- re ve ll
    return i + 3
  end
  return nil
end

-- The end (exclusive) of the run of class cls that goes on from byte p.
local function run(s, p, n, cls)
  while p <= n do
    local c, q = char_at(s, p)
    if c ~= cls then break end
    p = q
  end
  return p
end

-- Where the match at byte i ends (exclusive), the alternatives tried in order, as a
-- backtracking regex does; digits: the most numbers one match takes.
local function match_end(s, i, n, digits)
  local b = byte(s, i)
  if b == 39 then
    local e = contraction(s, i)
    if e then return e end
  end
  local c, p = char_at(s, i)
  -- [^\r\n\p{L}\p{N}]?\p{L}+
  if c == 'L' then return run(s, p, n, 'L') end
  if c ~= 'N' and b ~= 13 and b ~= 10 and p <= n then
    local c2, q = char_at(s, p)
    if c2 == 'L' then return run(s, q, n, 'L') end
  end
  -- \p{N}{1,digits}
  if c == 'N' then
    for _ = 2, digits do
      if p > n then break end
      local c2, q = char_at(s, p)
      if c2 ~= 'N' then break end
      p = q
    end
    return p
  end
  -- ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  local from = c == 'O' and p
  if not from and b == 32 and p <= n then
    local c2, q = char_at(s, p)
    if c2 == 'O' then from = q end
  end
  if from then
    local e = run(s, from, n, 'O')
    while e <= n and (byte(s, e) == 13 or byte(s, e) == 10) do e = e + 1 end
    return e
  end
  -- Here c is white space. \s*[\r\n]+ ends after the run's last line break, if it has one.
  local last, nl = i, nil
  if b == 13 or b == 10 then nl = p end
  while p <= n do
    local c2, q = char_at(s, p)
    if c2 ~= 'S' then break end
    local b2 = byte(s, p)
    if b2 == 13 or b2 == 10 then nl = q end
    last, p = p, q
  end
  if nl then return nl end
  -- \s+(?!\S), else \s+: the run, less its last character when something follows it and it
  -- has more than one.
  if p > n or last == i then return p end
  return last
end

local function family(digits)
  return function(s, fn)
    local n, i = #s, 1
    while i <= n do
      local e = match_end(s, i, n, digits)
      fn(sub(s, i, e - 1))
      i = e
    end
  end
end

--- split_pattern.scanner(pattern) -> each(s, fn) calling fn(piece) for the pieces of s in
--- order (what Split with behavior Isolated gives: the matches, which here cover all of s),
--- or nil when the pattern is not a known one.
function M.scanner(pattern)
  if pattern == GPT2 then return pretokenize.each end
  if sub(pattern, 1, #HEAD) ~= HEAD or sub(pattern, -#TAIL) ~= TAIL then return nil end
  local mid = sub(pattern, #HEAD + 1, -#TAIL - 1)
  if mid == [[\p{N}]] then return family(1) end
  local k = mid:match('^\\p{N}{1,([1-9]%d?)}$')
  return k and family(tonumber(k)) or nil
end

return M
