-- zlua.tokenizer.pretokenize: GPT-2's split of text into words before BPE, the pattern
--   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
-- written as a scanner over UTF-8 (Lua has no Unicode regex), with the character classes
-- of zlua.tokenizer.uclass.

local uclass = require 'zlua.tokenizer.uclass'

local M = {}
local byte, sub = string.byte, string.sub
local ulen, codepoint = utf8.len, utf8.codepoint
local class = uclass.class

-- Every code point is one of: L (letter), N (number), S (white space), O (anything else).
-- Bytes that are not valid UTF-8 are characters of class O, one per byte: Hugging Face can
-- only be given valid text, and this keeps every byte encodable, so decode(encode(s)) == s.
local ascii = {}
for b = 0, 127 do ascii[b] = class(b) end

--- pretokenize.char_at(s, p) -> the class of the character at byte p of s, the byte after it.
local function char_at(s, p)
  local b = byte(s, p)
  if b < 128 then return ascii[b], p + 1 end
  if b >= 0xC2 and b <= 0xF4 and ulen(s, p, p) then
    return class(codepoint(s, p)), p + (b >= 0xF0 and 4 or b >= 0xE0 and 3 or 2)
  end
  return 'O', p + 1
end

-- Where the match starting at byte i ends (exclusive), trying the alternatives in order.
local function match_end(s, i, n)
  local b = byte(s, i)
  if b == 39 then -- the contractions, lower case only, as GPT-2's pattern has them
    local b1 = byte(s, i + 1)
    if b1 == 115 or b1 == 116 or b1 == 109 or b1 == 100 then return i + 2 end -- s t m d
    local two = sub(s, i + 1, i + 2)
    if two == 're' or two == 've' or two == 'll' then return i + 3 end
  end
  local run, p = char_at(s, i)
  if b == 32 and p <= n then -- " ?" before a letter, number or other run
    local c, q = char_at(s, p)
    if c ~= 'S' then run, p = c, q end
  end
  if run ~= 'S' then
    while p <= n do
      local c, q = char_at(s, p)
      if c ~= run then break end
      p = q
    end
    return p
  end
  -- \s+(?!\S): a run of white space, less its last character when something follows it;
  -- a single one followed by something is \s+ alone.
  local last = i
  while p <= n do
    local c, q = char_at(s, p)
    if c ~= 'S' then break end
    last, p = p, q
  end
  if p > n or last == i then return p end
  return last
end

M.char_at = char_at

--- pretokenize.each(s, fn): calls fn(word) for each word of s in order; their concatenation is s.
function M.each(s, fn)
  local n, i = #s, 1
  while i <= n do
    local e = match_end(s, i, n)
    fn(sub(s, i, e - 1))
    i = e
  end
end

return M
