-- zlua.tokenizer.Tokenizer: a byte-level BPE tokenizer as Hugging Face runs one: added tokens
-- cut out first, the normalizer (none or NFC), the pre-tokenizer (GPT-2's split, or a Split
-- pattern), BPE by merge rank, then the template's special tokens; ids are 0-based, as
-- Hugging Face's. Built by zlua.tokenizer.from_pretrained or zlua.tokenizer.train.

local added = require 'zlua.tokenizer.added'
local bpe = require 'zlua.tokenizer.bpe'
local bytes = require 'zlua.tokenizer.bytes'
local config = require 'zlua.tokenizer.config'
local files = require 'zlua.tokenizer.files'
local nfc = require 'zlua.tokenizer.nfc'
local pretokenize = require 'zlua.tokenizer.pretokenize'
local split_pattern = require 'zlua.tokenizer.split_pattern'

local Tokenizer = {}
Tokenizer.__index = Tokenizer
Tokenizer.__name = 'zlua.tokenizer.Tokenizer'

local fmt = string.format

-- The pre-tokenizer steps as functions step(piece, fn) calling fn for each piece they make.
-- ByteLevel's byte mapping is nothing to do here (the model works on raw bytes); its prefix
-- space goes on each piece that lacks one, as Hugging Face's does.
local function step_functions(steps)
  local out = {}
  for _, st in ipairs(steps) do
    if st.type == 'Split' then
      out[#out + 1] = split_pattern.scanner(st.pattern)
    else
      if st.add_prefix_space then
        out[#out + 1] = function(s, fn)
          if s:byte(1) ~= 32 then s = ' ' .. s end
          fn(s)
        end
      end
      if st.use_regex then out[#out + 1] = pretokenize.each end
    end
  end
  return out
end

--- Tokenizer.new(desc) -> a tokenizer, from a description as zlua.tokenizer.files reads one
--- (and zlua.tokenizer.config completes). Special tokens named by the description are
--- fields: tok.bos_token and tok.bos_token_id, and likewise eos_, pad_, unk_, sep_, cls_,
--- mask_ (nil when not named); tok.add_bos_token and tok.add_eos_token say whether encoding
--- adds them.
function Tokenizer.new(desc)
  local steps = desc.pre_tokenizer
    or { { type = 'ByteLevel', add_prefix_space = desc.add_prefix_space or false, use_regex = true } }
  local prefix = false
  for _, st in ipairs(steps) do prefix = prefix or st.add_prefix_space == true end
  -- vocab, pre_steps, normalizer, ignore_merges and special_tokens are the description kept
  -- for save_pretrained.
  local self = setmetatable({ model = bpe.new(desc), added = desc.added, merges = desc.merges,
    add_prefix_space = prefix, steps = step_functions(steps),
    normalize = desc.normalizer == 'NFC' and nfc.normalize or nil,
    template = desc.template, tokens = {}, special = {}, ids = {}, raw_added = {}, normalized_added = {},
    added_text = {}, vocab = desc.vocab, pre_steps = steps, normalizer = desc.normalizer,
    ignore_merges = desc.ignore_merges or false, special_tokens = desc.special_tokens or {} }, Tokenizer)
  for raw, id in pairs(desc.vocab) do self.tokens[id] = raw end
  for _, t in ipairs(desc.added) do
    -- A normalized token is looked for in the normalized text, spelled as normalized itself
    -- (and so Hugging Face keeps it).
    if t.normalized and self.normalize then
      local n = {}
      for k, v in pairs(t) do n[k] = v end
      n.content = self.normalize(t.content)
      t = n
    end
    local list = t.normalized and self.normalized_added or self.raw_added
    list[#list + 1] = t
    self.tokens[t.id] = t.content
    self.special[t.id] = t.special or nil
    -- Decoding passes added tokens through the byte-level decoder too, which maps a token
    -- wholly in its alphabet to those bytes and leaves any other as its own UTF-8.
    local raw, outside = bytes.decode(t.content)
    self.added_text[t.id] = outside and t.content or raw
  end
  local n = -1
  for id, raw in pairs(self.tokens) do
    if id > n then n = id end
    self.ids[raw] = id
  end
  self.size = n + 1
  for _, name in ipairs(config.NAMES) do
    local content = desc.special_tokens and desc.special_tokens[name]
    if content then
      self[name], self[name .. '_id'] = content, self.ids[content]
    end
  end
  local tpl = desc.template
  self.add_bos_token = tpl ~= nil and #tpl.before > 0
  self.add_eos_token = tpl ~= nil and #tpl.after > 0
  return self
end

--- tok:vocab_size() -> one more than the largest id, added tokens included.
function Tokenizer:vocab_size() return self.size end

--- tok:token_to_id(text) -> the id of a token given as raw bytes (or an added token's
--- content), or nil. tok:id_to_token(id) -> its bytes, or nil.
function Tokenizer:token_to_id(text) return self.ids[text] end
function Tokenizer:id_to_token(id) return self.tokens[id] end

-- A function feeding a stretch of (normalized) text through the pre-tokenizer's steps,
-- each word at the end to fn.
function Tokenizer:_chain(fn)
  for k = #self.steps, 1, -1 do
    local step, nxt = self.steps[k], fn
    fn = function(s) step(s, nxt) end
  end
  return fn
end

--- tok:pre_tokenize(text) -> the words (raw bytes) the model would be given for text:
--- normalized, then split by the pre-tokenizer, added tokens not looked for (what Hugging
--- Face's pre_tokenizer.pre_tokenize_str gives for the normalized text).
function Tokenizer:pre_tokenize(text)
  if type(text) ~= 'string' then
    error('tokenizer: pre_tokenize expects a string, got ' .. type(text), 2)
  end
  local words = {}
  if text == '' then return words end
  if self.normalize then text = self.normalize(text) end
  self:_chain(function(w) words[#words + 1] = w end)(text)
  return words
end

--- tok:encode(text [, opts]) -> a Lua sequence of 0-based ids. opts.add_special_tokens
--- (default true, as Hugging Face's tokenizer(text)) adds the post-processor's template (a
--- BOS, say) around them. Any bytes are accepted: those that are not valid UTF-8 are encoded
--- byte by byte like any other, and decode gives them back.
function Tokenizer:encode(text, opts)
  if type(text) ~= 'string' then
    error('tokenizer: encode expects a string, got ' .. type(text), 2)
  end
  local out, model = {}, self.model
  local tpl = self.template
  if opts ~= nil and type(opts) ~= 'table' then error('tokenizer: encode: opts must be a table, got ' .. type(opts), 2) end
  if not (opts and opts.add_special_tokens == false) and tpl then
    for k = 1, #tpl.before do out[#out + 1] = tpl.before[k] end
  else
    tpl = nil
  end
  local function word(w)
    local ids = model:word(w)
    for k = 1, #ids do out[#out + 1] = ids[k] end
  end
  local pre = self:_chain(word)
  local function piece(s, token)
    if token then out[#out + 1] = token.id else pre(s) end
  end
  -- Hugging Face's order: tokens that are not normalized are cut from the raw text, then
  -- each stretch between them is normalized and the normalized tokens are cut from it.
  local normalize, normalized_added = self.normalize, self.normalized_added
  local function stretch(s, token)
    if token then
      out[#out + 1] = token.id
      return
    end
    if normalize then s = normalize(s) end
    if #normalized_added > 0 then added.split(s, normalized_added, piece) else pre(s) end
  end
  if #self.raw_added > 0 then added.split(text, self.raw_added, stretch) elseif text ~= '' then stretch(text) end
  if tpl then
    for k = 1, #tpl.after do out[#out + 1] = tpl.after[k] end
  end
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
    local tok = id and (self.added_text[id] or self.tokens[id])
    if not tok then
      error(fmt('tokenizer: decode: ids[%d] = %s is not an id of this vocabulary (0..%d)', k, tostring(ids[k]),
        self.size - 1), 2)
    end
    if not (skip and self.special[id]) then parts[#parts + 1] = tok end
  end
  return table.concat(parts)
end

--- tok:save_pretrained(dir): writes dir/tokenizer.json and dir/tokenizer_config.json, the
--- whole tokenizer as Hugging Face's fast tokenizers and this module read it back (the
--- normalizer, the pre-tokenizer's Split, the added tokens, the template, the named special
--- tokens), and dir/vocab.json and dir/merges.txt, which GPT-2's slow tokenizer reads; makes
--- dir (and its parents) when missing, as model:save_pretrained does.
function Tokenizer:save_pretrained(dir)
  files.check_path(dir, 'save_pretrained: the directory')
  local is_added = {}
  for _, t in ipairs(self.added) do is_added[t.id] = true end
  local spelled = {}
  for id = 0, self.size - 1 do
    local tok = self.tokens[id]
    if not tok then error(fmt('tokenizer: save_pretrained: id %d has no token, vocab.json cannot skip it', id), 2) end
    spelled[id + 1] = is_added[id] and tok or bytes.encode(tok)
  end
  local merges, model_vocab = {}, {}
  for r, m in ipairs(self.merges) do merges[r] = { spelled[m[1] + 1], spelled[m[2] + 1] } end
  for raw, id in pairs(self.vocab) do model_vocab[bytes.encode(raw)] = id end
  require('zlua').core.mkdirs(dir)
  files.write_tokenizer_json(dir, { vocab = model_vocab, merges = merges, added = self.added,
    normalizer = self.normalizer, pre_tokenizer = self.pre_steps, template = self.template,
    ignore_merges = self.ignore_merges, spelled = spelled })
  config.write(dir, self.added, self.special_tokens, self.template, self.ids)
  files.write_pair(dir, spelled, merges)
end

function Tokenizer:__tostring()
  return fmt('Tokenizer(byte-level BPE, %d tokens, %d merges)', self.size, #self.merges)
end

return Tokenizer
