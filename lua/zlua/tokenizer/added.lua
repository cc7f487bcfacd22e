-- zlua.tokenizer.added: cutting a text at its added tokens ("<|endoftext|>" and the like),
-- which are matched in the raw text before any pre-tokenization and become their own id,
-- with Hugging Face's lstrip / rstrip / single_word options.

local uclass = require 'zlua.tokenizer.uclass'

local M = {}
local byte, find, sub = string.byte, string.find, string.sub

local function is_space_at(s, p)
  local ok, cp = pcall(utf8.codepoint, s, p)
  return ok and uclass.class(cp) == 'S'
end

-- The start of the character that ends just before byte p (p - 1 for invalid bytes).
local function char_before(s, p)
  if p <= 1 then return 0 end
  local q = p - 1
  while q > 1 and q > p - 4 and (byte(s, q) or 0) & 0xC0 == 0x80 do q = q - 1 end
  if not utf8.len(s, q, q) then return p - 1 end
  return q
end

-- Whether the character at byte p of s is in \w (false outside s).
local function is_word_char(s, p)
  if p < 1 or p > #s then return false end
  local ok, cp = pcall(utf8.codepoint, s, p)
  return ok and uclass.is_word(cp)
end

-- Where t next occurs in s at or after byte from (false: nowhere). single_word is a \b on
-- each side of the token that begins or ends with a \w character, as Hugging Face builds
-- it: an occurrence with a \w character against such a side does not count.
local function occurrence(s, t, from)
  local c = t.content
  local word_first = is_word_char(c, 1)
  local word_last = is_word_char(c, char_before(c, #c + 1))
  while true do
    local at = find(s, c, from, true)
    if not at then return false end
    if not t.single_word or not ((word_first and is_word_char(s, char_before(s, at)))
        or (word_last and is_word_char(s, at + #c))) then
      return at
    end
    from = at + 1
  end
end

--- added.split(s, tokens, fn): calls fn(text) for each stretch of s between added tokens and
--- fn(nil, token) for each added token, in order. tokens: { {content=, id=, lstrip=, rstrip=,
--- single_word=}, ... }. At each point the leftmost match wins, the longest among those
--- starting together. lstrip / rstrip take the white space beside the token into it.
function M.split(s, tokens, fn)
  local pos, n = 1, #s
  local next_at = {} -- where each token next occurs at or after pos (false: nowhere)
  while pos <= n do
    local best, bstart, bend
    for k, t in ipairs(tokens) do
      local at = next_at[k]
      if at == nil or (at and at < pos) then
        at = occurrence(s, t, pos)
        next_at[k] = at
      end
      if at and (not best or at < bstart or (at == bstart and #t.content > #best.content)) then
        best, bstart, bend = t, at, at + #t.content
      end
    end
    if not best then break end
    local from, to = bstart, bend
    if best.lstrip then
      while from > pos do
        local q = char_before(s, from)
        if not is_space_at(s, q) then break end
        from = q
      end
    end
    if best.rstrip then
      while to <= n and is_space_at(s, to) do
        to = to + #utf8.char(utf8.codepoint(s, to))
      end
    end
    if from > pos then fn(sub(s, pos, from - 1)) end
    fn(nil, best)
    pos = to
  end
  if pos <= n then fn(sub(s, pos)) end
end

return M
