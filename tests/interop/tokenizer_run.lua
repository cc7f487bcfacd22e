-- The zlua side of check_tokenizer_python.py: encodes strings with zlua.tokenizer, or trains
-- a vocabulary with it, for Python to compare with Hugging Face's.
--   zlua tokenizer_run.lua encode DIR IN.json OUT.json   IN: ["text", ...]
--        OUT: [{"ids": [...], "words": [...], "decoded": "text"}, ...] (words byte-level spelled)
--   zlua tokenizer_run.lua train CORPUS VOCAB_SIZE OUTDIR   (special token "<|endoftext|>")

local json = require 'zlua.json'
local tokenizer = require 'zlua.tokenizer'
local bytes = require 'zlua.tokenizer.bytes'
local pretokenize = require 'zlua.tokenizer.pretokenize'

local slurp = require('zlua.tokenizer.files').read_text

local mode = arg[1]
if mode == 'encode' then
  local tok = tokenizer.from_pretrained(arg[2])
  local out = {}
  for i, text in ipairs(json.decode(slurp(arg[3]), arg[3])) do
    local words = setmetatable({}, json.array)
    pretokenize.each(text, function(w) words[#words + 1] = bytes.encode(w) end)
    local ids = setmetatable(tok:encode(text), json.array)
    out[i] = { ids = ids, words = words, decoded = tok:decode(ids) }
  end
  local f = assert(io.open(arg[4], 'wb'))
  f:write(json.encode(setmetatable(out, json.array)))
  f:close()
elseif mode == 'train' then
  tokenizer.train({ arg[2] }, math.tointeger(arg[3]), { special_tokens = { '<|endoftext|>' }, dir = arg[4] })
else
  error('usage: zlua tokenizer_run.lua encode DIR IN.json OUT.json | train CORPUS VOCAB_SIZE OUTDIR', 0)
end
