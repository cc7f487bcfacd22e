-- The zlua side of check_tokenizer_python.py: encodes strings with zlua.tokenizer, normalizes
-- them to NFC, or trains a vocabulary with it, for Python to compare with Hugging Face's.
--   zlua tokenizer_run.lua encode DIR IN.json OUT.json   IN: ["text", ...]
--        OUT: [{"ids": [...], "pair_ids": [...], "words": [...], "decoded": "text" or [bytes]},
--        ...] (pair_ids: the text with the next one, the last with the first, as a pair; words
--        byte-level spelled for a byte-level vocabulary; decoded bytes that are not UTF-8 as a
--        list of numbers)
--   zlua tokenizer_run.lua nfc IN.json OUT.json          OUT: ["normalized text", ...]
--   zlua tokenizer_run.lua train CORPUS VOCAB_SIZE OUTDIR   (special token "<|endoftext|>")
--   zlua tokenizer_run.lua save DIR OUTDIR               (read from DIR, save_pretrained to OUTDIR)

local json = require 'zlua.json'
local tokenizer = require 'zlua.tokenizer'
local bytes = require 'zlua.tokenizer.bytes'

local slurp = require('zlua.tokenizer.files').read_text

local mode = arg[1]
if mode == 'encode' then
  local tok = tokenizer.from_pretrained(arg[2])
  local out = {}
  local texts = json.decode(slurp(arg[3]), arg[3])
  for i, text in ipairs(texts) do
    local words = setmetatable({}, json.array)
    for k, w in ipairs(tok:pre_tokenize(text)) do words[k] = tok.chars and w or bytes.encode(w) end
    local ids = setmetatable(tok:encode(text), json.array)
    local decoded = tok:decode(ids)
    -- Bytes that are not UTF-8 go as a list, for Python to decode as Hugging Face does.
    if not utf8.len(decoded) then decoded = setmetatable({ decoded:byte(1, -1) }, json.array) end
    local pair_ids = setmetatable(tok:encode(text, texts[i % #texts + 1]), json.array)
    out[i] = { ids = ids, pair_ids = pair_ids, words = words, decoded = decoded }
  end
  local f = assert(io.open(arg[4], 'wb'))
  f:write(json.encode(setmetatable(out, json.array)))
  f:close()
elseif mode == 'nfc' then
  local nfc = require('zlua.tokenizer.nfc').normalize
  local out = setmetatable({}, json.array)
  for i, text in ipairs(json.decode(slurp(arg[2]), arg[2])) do out[i] = nfc(text) end
  local f = assert(io.open(arg[3], 'wb'))
  f:write(json.encode(out))
  f:close()
elseif mode == 'train' then
  tokenizer.train({ arg[2] }, math.tointeger(arg[3]), { special_tokens = { '<|endoftext|>' }, dir = arg[4] })
elseif mode == 'save' then
  tokenizer.from_pretrained(arg[2]):save_pretrained(arg[3])
else
  error('usage: zlua tokenizer_run.lua encode DIR IN.json OUT.json | nfc IN.json OUT.json | '
    .. 'train CORPUS VOCAB_SIZE OUTDIR | save DIR OUTDIR', 0)
end
