-- zlua.tokenizer: BPE tokenizers (byte-level: GPT-2's, LLaMA 3's, Qwen2's; of characters:
-- LLaMA 2's, Mistral's), read from Hugging Face's files (tokenizer.json, or vocab.json +
-- merges.txt, and tokenizer_config.json) and written to them, and a trainer.
--   local tok = require('zlua.tokenizer').from_pretrained('gpt2_dir')
--   local ids = tok:encode('Hello world')   -- 0-based ids, as Hugging Face gives them
--   assert(tok:decode(ids) == 'Hello world')

local config = require 'zlua.tokenizer.config'
local files = require 'zlua.tokenizer.files'
local Tokenizer = require 'zlua.tokenizer.Tokenizer'

local M = { Tokenizer = Tokenizer }

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- The description of dir's tokenizer.json, else (it is missing, or refused and the pair is
-- there, which is said on stderr) of its vocab.json + merges.txt.
local function describe(dir)
  local tj, vj, mt = dir .. '/tokenizer.json', dir .. '/vocab.json', dir .. '/merges.txt'
  local pair = exists(vj) and exists(mt)
  if exists(tj) then
    if not pair then return files.read_tokenizer_json(tj) end
    local ok, desc = pcall(files.read_tokenizer_json, tj)
    if ok then return desc end
    io.stderr:write(string.format('tokenizer: %s; reading %s and merges.txt instead, as GPT-2\'s\n',
      tostring(desc), vj))
  end
  if exists(vj) or exists(mt) then return files.read_pair(vj, mt) end
  error('tokenizer.from_pretrained: ' .. dir .. ' has neither tokenizer.json nor vocab.json + merges.txt', 3)
end

--- tokenizer.from_pretrained(dir) -> a Tokenizer. Reads dir/tokenizer.json when there is one
--- (what Hugging Face's fast tokenizer reads first), else dir/vocab.json and dir/merges.txt;
--- then dir/tokenizer_config.json when there is one, for the special tokens it names (see
--- zlua.tokenizer.config).
function M.from_pretrained(dir)
  files.check_path(dir, 'from_pretrained: the directory')
  local desc = describe(dir)
  local cfg = dir .. '/tokenizer_config.json'
  if exists(cfg) then config.apply(desc, config.read(cfg), cfg) end
  return Tokenizer.new(desc)
end

--- tokenizer.train(files, vocab_size [, opts]) -> a Tokenizer; see zlua.tokenizer.train.
function M.train(paths, vocab_size, opts)
  return require('zlua.tokenizer.train')(paths, vocab_size, opts)
end

return M
