-- zlua.tokenizer.bytes: GPT-2's byte-level alphabet, the map from each of the 256 byte values
-- to one printable character, in which vocab.json and merges.txt spell their tokens.
-- The tokenizer works on raw bytes; this map is crossed only when reading and writing files.

local M = {}

-- Printable bytes stand for themselves; the other 68 (controls, space, DEL, the Latin-1
-- controls, NBSP and soft hyphen) take U+0100 onwards in byte order. GPT-2 chose this so that
-- every token is visible text, and every byte-level BPE file since has kept it.
local to_char, to_byte = {}, {}
do
  local shifted = 0
  for b = 0, 255 do
    local printable = (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174)
    local cp = b
    if not printable then
      cp = 256 + shifted
      shifted = shifted + 1
    end
    local ch = utf8.char(cp)
    to_char[string.char(b)] = ch
    to_byte[ch] = string.char(b)
  end
end

--- bytes.encode(raw) -> the string spelled in the byte-level alphabet.
function M.encode(raw)
  return (raw:gsub('.', to_char))
end

--- bytes.decode(text) -> raw bytes [, the first character outside the alphabet]. A character
--- outside it stands for its own UTF-8 bytes, as Hugging Face's byte-level decoder has it
--- (added tokens such as "<pad> " may hold one). text must be valid UTF-8.
function M.decode(text)
  local out, bad = {}, nil
  for _, cp in utf8.codes(text) do
    local ch = utf8.char(cp)
    local b = to_byte[ch]
    if not b then
      bad = bad or ch
      b = ch
    end
    out[#out + 1] = b
  end
  return table.concat(out), bad
end

return M
