-- zlua.tokenizer.Tokenizer: a BPE tokenizer as Hugging Face runs one: added tokens cut out
-- first, the normalizer (NFC, Prepend, Replace), the pre-tokenizer (GPT-2's split, or a Split
-- pattern, before the byte-level model; Metaspace or none before a model of characters), BPE
-- by merge rank, then the template's special tokens; ids are 0-based, as Hugging Face's.
-- Built by zlua.tokenizer.from_pretrained or zlua.tokenizer.train.

local added = require 'zlua.tokenizer.added'
local bpe = require 'zlua.tokenizer.bpe'
local bytes = require 'zlua.tokenizer.bytes'
local config = require 'zlua.tokenizer.config'
local files = require 'zlua.tokenizer.files'
local nfc = require 'zlua.tokenizer.nfc'
local pipeline = require 'zlua.tokenizer.pipeline'
local pretokenize = require 'zlua.tokenizer.pretokenize'
local split_pattern = require 'zlua.tokenizer.split_pattern'

local Tokenizer = {}
Tokenizer.__index = Tokenizer
Tokenizer.__name = 'zlua.tokenizer.Tokenizer'

local fmt = string.format

-- s with every occurrence of the plain string from replaced by to.
local function replace_all(s, from, to)
  if not s:find(from, 1, true) then return s end
  local out, i = {}, 1
  while true do
    local a, b = s:find(from, i, true)
    if not a then break end
    out[#out + 1] = s:sub(i, a - 1)
    out[#out + 1] = to
    i = b + 1
  end
  out[#out + 1] = s:sub(i)
  return table.concat(out)
end

-- The normalizer's steps as one function of a string, or nil when there are none. Prepend
-- adds to a string that is not empty, as Hugging Face's.
local function normalize_function(steps)
  if #steps == 0 then return nil end
  return function(s)
    for _, st in ipairs(steps) do
      if st.type == 'NFC' then
        s = nfc.normalize(s)
      elseif st.type == 'Prepend' then
        if s ~= '' then s = st.prepend .. s end
      else
        s = replace_all(s, st.pattern, st.content)
      end
    end
    return s
  end
end

-- Metaspace: spaces become the replacement, which goes first too (unless the piece starts
-- with one) always, or for the text's first piece only (state.at_start); with split, each
-- replacement starts a new piece.
local function metaspace(st, state)
  local r = st.replacement
  return function(s, fn)
    s = replace_all(s, ' ', r)
    if s:sub(1, #r) ~= r and (st.prepend_scheme == 'always' or (st.prepend_scheme == 'first' and state.at_start)) then
      s = r .. s
    end
    if not st.split then return fn(s) end
    local i = 1
    while true do
      local a = s:find(r, i + 1, true)
      if not a then break end
      fn(s:sub(i, a - 1))
      i = a
    end
    fn(s:sub(i))
  end
end

-- The pre-tokenizer steps as functions step(piece, fn) calling fn for each piece they make.
-- ByteLevel's byte mapping is nothing to do here (the model works on raw bytes); its prefix
-- space goes on each piece that lacks one, as Hugging Face's does.
local function step_functions(steps, state)
  local out = {}
  for _, st in ipairs(steps) do
    if st.type == 'Split' then
      out[#out + 1] = split_pattern.scanner(st.pattern)
    elseif st.type == 'Metaspace' then
      out[#out + 1] = metaspace(st, state)
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
  local normalizer = desc.normalizer or {}
  -- state.at_start: the piece being pre-tokenized starts the text (Metaspace's "first").
  local state = { at_start = true }
  -- vocab, pre_steps, normalizer, ignore_merges, special_tokens and the characters' model and
  -- decoder are the description kept for save_pretrained.
  local self = setmetatable({ model = bpe.new(desc), added = desc.added, merges = desc.merges,
    add_prefix_space = prefix, steps = step_functions(steps, state), state = state,
    normalize = normalize_function(normalizer),
    template = desc.template, tokens = {}, special = {}, ids = {}, raw_added = {}, normalized_added = {},
    added_text = {}, vocab = desc.vocab, pre_steps = steps, normalizer = normalizer,
    ignore_merges = desc.ignore_merges or false, special_tokens = desc.special_tokens or {},
    chars = desc.chars or false, byte_fallback = desc.byte_fallback or false, unk = desc.unk,
    fuse_unk = desc.fuse_unk or false, decoder = desc.decoder or {} }, Tokenizer)
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
    self.added_text[t.id] = (outside or self.chars) and t.content or raw
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
  self._single, self._pair = pipeline.forms(tpl)
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
  self.state.at_start = true
  self:_chain(function(w) words[#words + 1] = w end)(text)
  return words
end

-- A template's items (pipeline.post_processor's pair form) with a's and b's ids in place.
local function fill(items, a, b)
  local out = {}
  for _, item in ipairs(items) do
    local ids = item == 'A' and a or item == 'B' and b or { item }
    for k = 1, #ids do out[#out + 1] = ids[k] end
  end
  return out
end

--- tok:encode(text [, pair] [, opts]) -> a Lua sequence of 0-based ids. opts.add_special_tokens
--- (default true, as Hugging Face's tokenizer(text)) adds the post-processor's template (a
--- BOS, say) around them. pair, a second text (Hugging Face's text_pair), is encoded on its
--- own and joined as the template's pair form says: TemplateProcessing's "pair", else the
--- single template around each text, else one after the other; an empty pair is no pair, as
--- in transformers' tokenizer(text, text_pair). Any bytes are accepted: those that are not
--- valid UTF-8 are encoded byte by byte like any other, and decode gives them back.
function Tokenizer:encode(text, pair, opts)
  if type(pair) == 'table' and opts == nil then pair, opts = nil, pair end
  if type(text) ~= 'string' then
    error('tokenizer: encode expects a string, got ' .. type(text), 2)
  end
  if pair ~= nil and type(pair) ~= 'string' then
    error('tokenizer: encode: the second argument must be a pair text (a string) or opts (a table), got '
      .. type(pair), 2)
  end
  if opts ~= nil and type(opts) ~= 'table' then
    error('tokenizer: encode: opts must be a table, got ' .. type(opts), 2)
  end
  local a = self:_encode_text(text)
  local plain = (opts and opts.add_special_tokens == false) or not self.template
  if pair == nil or pair == '' then return plain and a or fill(self._single, a) end
  return fill(plain and { 'A', 'B' } or self._pair, a, self:_encode_text(pair))
end

-- text's ids, no template.
function Tokenizer:_encode_text(text)
  local out, model = {}, self.model
  local function word(w)
    local ids = model:word(w)
    for k = 1, #ids do out[#out + 1] = ids[k] end
  end
  -- Only the first piece of the text, before any added token, is at its start.
  local state, chained = self.state, self:_chain(word)
  state.at_start = true
  local function pre(s)
    chained(s)
    state.at_start = false
  end
  local function piece(s, token)
    if token then
      out[#out + 1] = token.id
      state.at_start = false
    else
      pre(s)
    end
  end
  -- Hugging Face's order: tokens that are not normalized are cut from the raw text, then
  -- each stretch between them is normalized and the normalized tokens are cut from it.
  local normalize, normalized_added = self.normalize, self.normalized_added
  local function stretch(s, token)
    if token then
      out[#out + 1] = token.id
      state.at_start = false
      return
    end
    if normalize then s = normalize(s) end
    if #normalized_added > 0 then added.split(s, normalized_added, piece) else pre(s) end
  end
  if #self.raw_added > 0 then added.split(text, self.raw_added, stretch) elseif text ~= '' then stretch(text) end
  return out
end

-- The decoder's steps over a model of characters' tokens (a list of strings), as Hugging
-- Face's decode_chain runs them. ByteFallback gives a run of <0xXX> tokens back as its bytes
-- (where those are not UTF-8 Hugging Face writes U+FFFD; here they decode back as they were).
local function decode_chars(steps, toks)
  for _, st in ipairs(steps) do
    if st.type == 'Replace' then
      for i = 1, #toks do toks[i] = replace_all(toks[i], st.pattern, st.content) end
    elseif st.type == 'ByteFallback' then
      local out, run = {}, {}
      for _, t in ipairs(toks) do
        local hex = #t == 6 and t:match('^<0x(%x%x)>$')
        if hex then
          run[#run + 1] = string.char(tonumber(hex, 16))
        else
          if #run > 0 then out[#out + 1], run = table.concat(run), {} end
          out[#out + 1] = t
        end
      end
      if #run > 0 then out[#out + 1] = table.concat(run) end
      toks = out
    elseif st.type == 'Fuse' then
      toks = { table.concat(toks) }
    elseif st.type == 'Strip' then
      local c = st.content
      for i = 1, #toks do
        local t = toks[i]
        for _ = 1, st.start do
          if t:sub(1, #c) ~= c then break end
          t = t:sub(#c + 1)
        end
        for _ = 1, st.stop do
          if #t < #c or t:sub(-#c) ~= c then break end
          t = t:sub(1, -#c - 1)
        end
        toks[i] = t
      end
    else   -- Metaspace: the replacement is a space, and the first token's are dropped
      for i = 1, #toks do
        toks[i] = replace_all(toks[i], st.replacement, (i == 1 and st.prepend_scheme ~= 'never') and '' or ' ')
      end
    end
  end
  return table.concat(toks)
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
  if self.chars then return decode_chars(self.decoder, parts) end
  return table.concat(parts)
end

--- tok:save_pretrained(dir): writes dir/tokenizer.json and dir/tokenizer_config.json, the
--- whole tokenizer as Hugging Face's fast tokenizers and this module read it back (the
--- normalizer, the pre-tokenizer, the added tokens, the template, the named special tokens,
--- a model of characters' decoder), and for a byte-level model dir/vocab.json and
--- dir/merges.txt, which GPT-2's slow tokenizer reads; makes dir (and its parents) when
--- missing, as model:save_pretrained does.
function Tokenizer:save_pretrained(dir)
  files.check_path(dir, 'save_pretrained: the directory')
  local is_added = {}
  for _, t in ipairs(self.added) do is_added[t.id] = true end
  -- A model of characters spells its tokens as they are; a byte-level one in its alphabet.
  local spell = self.chars and function(t) return t end or bytes.encode
  local spelled = {}
  for id = 0, self.size - 1 do
    local tok = self.tokens[id]
    if not tok then error(fmt('tokenizer: save_pretrained: id %d has no token, vocab.json cannot skip it', id), 2) end
    spelled[id + 1] = is_added[id] and tok or spell(tok)
  end
  local merges, model_vocab = {}, {}
  for r, m in ipairs(self.merges) do merges[r] = { spelled[m[1] + 1], spelled[m[2] + 1] } end
  for raw, id in pairs(self.vocab) do model_vocab[spell(raw)] = id end
  require('zlua').core.mkdirs(dir)
  files.write_tokenizer_json(dir, { vocab = model_vocab, merges = merges, added = self.added,
    normalizer = self.normalizer, pre_tokenizer = self.pre_steps, template = self.template,
    ignore_merges = self.ignore_merges, spelled = spelled, chars = self.chars and {
      byte_fallback = self.byte_fallback, unk_token = self.unk and spelled[self.unk + 1], fuse_unk = self.fuse_unk,
      decoder = self.decoder } })
  config.write(dir, self.added, self.special_tokens, self.template, self.ids)
  -- GPT-2's slow tokenizer reads the pair as byte-level; a model of characters has none.
  if not self.chars then files.write_pair(dir, spelled, merges) end
end

function Tokenizer:__tostring()
  return fmt('Tokenizer(byte-level BPE, %d tokens, %d merges)', self.size, #self.merges)
end

return Tokenizer
