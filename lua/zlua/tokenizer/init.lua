-- zlua.tokenizer: GPT-2's byte-level BPE tokenizer, read from and written to Hugging Face's
-- files (vocab.json + merges.txt, or tokenizer.json), and its trainer.
--   local tok = require('zlua.tokenizer').from_pretrained('gpt2_dir')
--   local ids = tok:encode('Hello world')   -- 0-based ids, as Hugging Face gives them
--   assert(tok:decode(ids) == 'Hello world')

local files = require 'zlua.tokenizer.files'
local Tokenizer = require 'zlua.tokenizer.Tokenizer'

local M = { Tokenizer = Tokenizer }

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

--- tokenizer.from_pretrained(dir) -> a Tokenizer. Reads dir/tokenizer.json when there is one
--- (what Hugging Face's fast tokenizer reads first), else dir/vocab.json and dir/merges.txt.
function M.from_pretrained(dir)
  files.check_path(dir, 'from_pretrained: the directory')
  local tj, vj, mt = dir .. '/tokenizer.json', dir .. '/vocab.json', dir .. '/merges.txt'
  if exists(tj) then return Tokenizer.new(files.read_tokenizer_json(tj)) end
  if exists(vj) or exists(mt) then return Tokenizer.new(files.read_pair(vj, mt)) end
  error('tokenizer.from_pretrained: ' .. dir .. ' has neither tokenizer.json nor vocab.json + merges.txt', 2)
end

--- tokenizer.train(files, vocab_size [, opts]) -> a Tokenizer; see zlua.tokenizer.train.
function M.train(paths, vocab_size, opts)
  return require('zlua.tokenizer.train')(paths, vocab_size, opts)
end

return M
