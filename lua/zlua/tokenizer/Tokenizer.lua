-- zlua.tokenizer.Tokenizer: a GPT-2 style byte-level BPE tokenizer: added tokens cut out
-- first, then GPT-2's pre-tokenization, then BPE by merge rank; ids are 0-based, as
-- Hugging Face's. Built by zlua.tokenizer.from_pretrained or zlua.tokenizer.train.

local added = require 'zlua.tokenizer.added'
local bpe = require 'zlua.tokenizer.bpe'
local bytes = require 'zlua.tokenizer.bytes'
local files = require 'zlua.tokenizer.files'
local pretokenize = require 'zlua.tokenizer.pretokenize'

local Tokenizer = {}
Tokenizer.__index = Tokenizer
Tokenizer.__name = 'zlua.tokenizer.Tokenizer'

local fmt = string.format

--- Tokenizer.new(desc) -> a tokenizer, from a description as zlua.tokenizer.files reads one.
function Tokenizer.new(desc)
  local self = setmetatable({ model = bpe.new(desc), added = desc.added, merges = desc.merges,
    add_prefix_space = desc.add_prefix_space, tokens = {}, special = {}, ids = {} }, Tokenizer)
  for raw, id in pairs(desc.vocab) do self.tokens[id] = raw end
  for _, t in ipairs(desc.added) do
    self.tokens[t.id] = t.content
    self.special[t.id] = t.special or nil
  end
  local n = -1
  for id, raw in pairs(self.tokens) do
    if id > n then n = id end
    self.ids[raw] = id
  end
  self.size = n + 1
  return self
end

--- tok:vocab_size() -> one more than the largest id, added tokens included.
function Tokenizer:vocab_size() return self.size end

--- tok:token_to_id(text) -> the id of a token given as raw bytes (or an added token's
--- content), or nil. tok:id_to_token(id) -> its bytes, or nil.
function Tokenizer:token_to_id(text) return self.ids[text] end
function Tokenizer:id_to_token(id) return self.tokens[id] end

--- tok:encode(text) -> a Lua sequence of 0-based ids. Any bytes are accepted: those that are
--- not valid UTF-8 are encoded byte by byte like any other, and decode gives them back.
function Tokenizer:encode(text)
  if type(text) ~= 'string' then
    error('tokenizer: encode expects a string, got ' .. type(text), 2)
  end
  local out, model = {}, self.model
  local function word(w)
    local ids = model:word(w)
    for k = 1, #ids do out[#out + 1] = ids[k] end
  end
  local function stretch(s, token)
    if token then
      out[#out + 1] = token.id
      return
    end
    if self.add_prefix_space and s:byte(1) ~= 32 then s = ' ' .. s end
    pretokenize.each(s, word)
  end
  if #self.added > 0 then added.split(text, self.added, stretch) elseif text ~= '' then stretch(text) end
  return out
end

--- tok:decode(ids [, opts]) -> the text (bytes) the ids stand for; opts.skip_special_tokens
--- leaves special tokens out. An id the vocabulary lacks is an error naming it and its place.
function Tokenizer:decode(ids, opts)
  if type(ids) ~= 'table' then error('tokenizer: decode expects a table of ids, got ' .. type(ids), 2) end
  local skip = opts and opts.skip_special_tokens
  local parts = {}
  for k = 1, #ids do
    local id = type(ids[k]) == 'number' and math.tointeger(ids[k])
    local tok = id and self.tokens[id]
    if not tok then
      error(fmt('tokenizer: decode: ids[%d] = %s is not an id of this vocabulary (0..%d)', k, tostring(ids[k]),
        self.size - 1), 2)
    end
    if not (skip and self.special[id]) then parts[#parts + 1] = tok end
  end
  return table.concat(parts)
end

--- tok:save_pretrained(dir): writes dir/vocab.json and dir/merges.txt, which Hugging Face's
--- GPT2Tokenizer and this module read back; makes dir (and its parents) when missing, as
--- model:save_pretrained does.
function Tokenizer:save_pretrained(dir)
  files.check_path(dir, 'save_pretrained: the directory')
  require('zlua').core.mkdirs(dir)
  local is_added = {}
  for _, t in ipairs(self.added) do is_added[t.id] = true end
  local spelled = {}
  for id = 0, self.size - 1 do
    local tok = self.tokens[id]
    if not tok then error(fmt('tokenizer: save_pretrained: id %d has no token, vocab.json cannot skip it', id), 2) end
    spelled[id + 1] = is_added[id] and tok or bytes.encode(tok)
  end
  local merges = {}
  for r, m in ipairs(self.merges) do merges[r] = { spelled[m[1] + 1], spelled[m[2] + 1] } end
  files.write_pair(dir, spelled, merges)
end

function Tokenizer:__tostring()
  return fmt('Tokenizer(byte-level BPE, %d tokens, %d merges)', self.size, #self.merges)
end

return Tokenizer
