-- zlua.tokenizer.files: reading and writing a BPE tokenizer's files, Hugging Face's vocab.json +
-- merges.txt pair and its tokenizer.json, into one plain description:
--   { vocab = { [raw bytes] = id }, merges = { {left id, right id, merged id}, ... } in rank
--     order, added = { {content=, id=, special=, lstrip=, rstrip=, single_word=, normalized=}, ... },
--     ignore_merges = bool, and either add_prefix_space = bool (GPT-2's pre-tokenizer) or
--     normalizer, pre_tokenizer and template as zlua.tokenizer.pipeline reads them;
--     from_pair = true when read from vocab.json + merges.txt;
--     for a vocabulary of characters (SentencePiece's BPE: LLaMA 2, Mistral) chars = true, its
--     tokens spelled as they are, with byte_fallback, unk (an id or nil), fuse_unk and decoder }
-- Every error names the file and, where the text has one, the line.

local json = require 'zlua.json'
local bytes = require 'zlua.tokenizer.bytes'
local pipeline = require 'zlua.tokenizer.pipeline'

local M = {}
local fmt = string.format

-- s for a message: at most 40 characters, control bytes (and all non-ASCII ones when s is
-- not UTF-8) as \xNN.
local function show(s)
  local valid = utf8.len(s)
  local cut = valid and utf8.offset(s, 41) or (#s > 40 and 41)
  local tail = ''
  if cut and cut <= #s then s, tail = s:sub(1, cut - 1), '...' end
  return s:gsub(valid and '%c' or '[%c\128-\255]', function(c) return fmt('\\x%02X', c:byte()) end) .. tail
end

--- files.check_path(path, what): raises unless path is a string without a NUL byte, which C
--- would cut the path at, naming another file.
function M.check_path(path, what)
  if type(path) ~= 'string' then error(fmt('tokenizer: %s must be a path, got %s', what, type(path)), 0) end
  local nul = path:find('\0', 1, true)
  if nul then
    error(fmt('tokenizer: %s "%s" holds a NUL byte (byte %d), which would cut the path there', what,
      show(path), nul), 0)
  end
end

--- files.read_text(path) -> the file's bytes; an error naming it when it cannot be read.
function M.read_text(path)
  local f, err = io.open(path, 'rb')
  if not f then error('tokenizer: cannot read ' .. (err or path), 0) end
  local text = f:read('a')
  f:close()
  if not text then error('tokenizer: cannot read ' .. path, 0) end
  return text
end

-- vocab: { [token as spelled in the file] = id } already decoded from JSON; where(token)
-- gives "file:line" for a message. Returns the raw-bytes vocabulary: byte-level spellings
-- decoded, or with chars the tokens as they are.
local function check_vocab(vocab, what, where, chars)
  if type(vocab) ~= 'table' or getmetatable(vocab) == json.array then
    error(fmt('%s: expected a JSON object mapping tokens to ids, got %s', what,
      getmetatable(vocab) == json.array and 'an array' or type(vocab)), 0)
  end
  local raw, by_id = {}, {}
  for tok, id in pairs(vocab) do
    if math.type(id) ~= 'integer' or id < 0 then
      error(fmt('%s: token "%s" has id %s, expected a non-negative integer', where(tok), show(tok),
        tostring(id)), 0)
    end
    if by_id[id] then
      local a, b = by_id[id], tok
      if a > b then a, b = b, a end
      error(fmt('%s: tokens "%s" and "%s" both have id %d', where(b), show(a), show(b), id), 0)
    end
    by_id[id] = tok
    raw[chars and tok or (bytes.decode(tok))] = id
  end
  return raw
end

-- One merge "left right" (spelled) into its ids, or an error naming where.
local function merge_ids(vocab, left, right, where)
  local a, b, c = vocab[left], vocab[right], vocab[left .. right]
  local missing = (not a and left) or (not b and right)
  if missing then
    error(fmt('%s: merge "%s %s": "%s" is not in the vocabulary', where, show(left), show(right),
      show(missing)), 0)
  end
  if not c then
    error(fmt('%s: merge "%s %s": the merged token "%s" is not in the vocabulary', where, show(left),
      show(right), show(left .. right)), 0)
  end
  return { a, b, c }
end

--- files.read_vocab(path) -> vocab spelled as in the file { [token] = id }, raw { [bytes] = id }
function M.read_vocab(path)
  local vocab, meta = json.decode(M.read_text(path), path)
  local lines = meta[vocab] and meta[vocab].lines or {}
  local raw = check_vocab(vocab, path, function(tok) return fmt('%s:%d', path, lines[tok] or 1) end)
  return vocab, raw
end

--- files.read_merges(path, vocab) -> merges in rank order as {left id, right id, merged id}.
--- The "#version" line Hugging Face writes first is skipped; blank lines are ignored.
function M.read_merges(path, vocab)
  local text = M.read_text(path)
  local merges, n = {}, 0
  for line in (text .. '\n'):gmatch('([^\n]*)\n') do
    n = n + 1
    line = line:gsub('\r$', '')
    local where = fmt('%s:%d', path, n)
    if not utf8.len(line) then error(where .. ': not valid UTF-8', 0) end
    if not (n == 1 and line:find('^#version')) and line ~= '' then
      local left, right = line:match('^([^ ]+) ([^ ]+)$')
      if not left then
        error(fmt('%s: expected two tokens separated by one space, got "%s"', where, show(line)), 0)
      end
      merges[#merges + 1] = merge_ids(vocab, left, right, where)
    end
  end
  return merges
end

local flag = pipeline.flag

--- files.added_token(t, what) -> {content=, id=, special=, lstrip=, rstrip=, single_word=,
--- normalized=} from an added token as tokenizer.json (and tokenizer_config.json's
--- added_tokens_decoder) spell it; the id is t.id. normalized defaults to not special, as
--- Hugging Face's AddedToken has it.
function M.added_token(t, what)
  if type(t) ~= 'table' or type(t.content) ~= 'string' or t.content == '' then
    error(what .. ': expected {"content": non-empty string, ...}', 0)
  end
  local special = flag(t, 'special', what, false)
  return { content = t.content, id = t.id, special = special, lstrip = flag(t, 'lstrip', what, false),
    rstrip = flag(t, 'rstrip', what, false), single_word = flag(t, 'single_word', what, false),
    normalized = flag(t, 'normalized', what, not special) }
end

--- files.read_tokenizer_json(path) -> the description (see the top of this file).
function M.read_tokenizer_json(path)
  local doc, meta = json.decode(M.read_text(path), path)
  local model = type(doc) == 'table' and doc.model
  if type(model) ~= 'table' or model.type ~= 'BPE' then
    error(fmt('%s: model.type is %s; only a BPE model is supported', path,
      type(model) == 'table' and tostring(model.type) or 'missing'), 0)
  end
  -- What would change the ids and is not supported is refused, rather than encoded differently.
  local normalizer = pipeline.normalizer(doc.normalizer, path)
  local pre_tokenizer, byte_level = pipeline.pre_tokenizer(doc.pre_tokenizer, path)
  local template = pipeline.post_processor(doc.post_processor, path)
  local chars = not byte_level
  for _, key in ipairs({ 'continuing_subword_prefix', 'end_of_word_suffix' }) do
    local v = model[key]
    if v ~= nil and v ~= json.null and v ~= '' then
      error(fmt('%s: model.%s is "%s"; GPT-2\'s BPE has none', path, key, tostring(v)), 0)
    end
  end
  if model.dropout ~= nil and model.dropout ~= json.null and model.dropout ~= 0 then
    error(fmt('%s: model.dropout is %s; BPE dropout is not supported', path, tostring(model.dropout)), 0)
  end
  local byte_fallback = flag(model, 'byte_fallback', path .. ': model', false)
  if byte_fallback and not chars then
    error(path .. ': model.byte_fallback is true with a ByteLevel pre-tokenizer; a byte-level vocabulary needs no '
      .. 'fallback', 0)
  end
  local vlines = meta[model.vocab] and meta[model.vocab].lines or {}
  local raw = check_vocab(model.vocab, path .. ': model.vocab',
    function(tok) return fmt('%s:%d', path, vlines[tok] or 1) end, chars)
  local unk, decoder
  if chars then
    if model.unk_token ~= nil and model.unk_token ~= json.null then
      unk = type(model.unk_token) == 'string' and model.vocab[model.unk_token]
      if not unk then
        error(fmt('%s: model.unk_token %s is not in the vocabulary', path, json.encode(model.unk_token)), 0)
      end
    end
    if not byte_fallback and not unk then
      error(fmt('%s: pre_tokenizer is %s (a vocabulary of characters) but the model has neither byte_fallback '
        .. 'nor an unk_token; a byte-level vocabulary needs a ByteLevel pre-tokenizer', path,
        #pre_tokenizer > 0 and 'Metaspace' or 'null'), 0)
    end
    decoder = pipeline.decoder(doc.decoder, path)
  end
  local list = model.merges
  if getmetatable(list) ~= json.array then
    error(path .. ': model.merges must be an array', 0)
  end
  local at = meta[list] and meta[list].line or 1
  local merges = {}
  for i, m in ipairs(list) do
    local where = fmt('%s: model.merges[%d] (the array at line %d)', path, i - 1, at)
    local left, right
    if type(m) == 'string' then
      left, right = m:match('^([^ ]+) ([^ ]+)$')
    elseif type(m) == 'table' and #m == 2 and type(m[1]) == 'string' and type(m[2]) == 'string' then
      left, right = m[1], m[2]
    end
    if not left then error(where .. ': expected "left right" or ["left", "right"]', 0) end
    merges[i] = merge_ids(model.vocab, left, right, where)
  end
  local added = {}
  local alist = doc.added_tokens
  if alist ~= nil and alist ~= json.null then
    for i, t in ipairs(alist) do
      local what = fmt('%s: added_tokens[%d]', path, i - 1)
      if type(t) ~= 'table' or math.type(t.id) ~= 'integer' or t.id < 0 then
        error(what .. ': expected {"id": integer >= 0, "content": non-empty string, ...}', 0)
      end
      added[#added + 1] = M.added_token(t, what)
    end
  end
  return { vocab = raw, merges = merges, added = added, normalizer = normalizer, pre_tokenizer = pre_tokenizer,
    template = template, ignore_merges = flag(model, 'ignore_merges', path .. ': model', false), chars = chars,
    byte_fallback = byte_fallback, unk = unk, fuse_unk = flag(model, 'fuse_unk', path .. ': model', false),
    decoder = decoder }
end

--- files.read_pair(vocab_path, merges_path) -> the description. GPT-2's "<|endoftext|>", when the
--- vocabulary has it, is a special token, as transformers' GPT2Tokenizer makes it.
function M.read_pair(vocab_path, merges_path)
  local vocab, raw = M.read_vocab(vocab_path)
  local added = {}
  if vocab['<|endoftext|>'] then
    added[1] = { content = '<|endoftext|>', id = vocab['<|endoftext|>'], special = true, normalized = false }
  end
  return { vocab = raw, merges = M.read_merges(merges_path, vocab), added = added,
    add_prefix_space = false, ignore_merges = false, from_pair = true }
end

--- files.write_file(path, text): writes text to path.tmp, then renames it over path, so a
--- failed write leaves the file that was there (and no path.tmp); an error naming the file.
function M.write_file(path, text)
  local tmp = path .. '.tmp'
  local f, err = io.open(tmp, 'wb')
  if not f then error('tokenizer: cannot write ' .. (err or tmp), 0) end
  local ok, werr = f:write(text)
  local closed, cerr = f:close()
  if not ok or not closed then
    os.remove(tmp)
    error('tokenizer: cannot write ' .. path .. ': ' .. tostring(werr or cerr), 0)
  end
  local renamed, rerr = os.rename(tmp, path)
  if not renamed then
    os.remove(tmp)
    error('tokenizer: cannot write ' .. path .. ': ' .. tostring(rerr), 0)
  end
end

--- files.write_pair(dir, tokens, merges): tokens[id + 1] is the token of id as the files spell
--- it (bytes.encode for learnt tokens, the content itself for special ones; every id from 0
--- present), merges a list of {left, right} spelled likewise, in rank order. Writes
--- dir/vocab.json (one line, ids ascending, as Hugging Face's save_model does) and
--- dir/merges.txt.
function M.write_pair(dir, tokens, merges)
  local parts = {}
  for i, tok in ipairs(tokens) do
    parts[i] = json.encode(tok) .. ':' .. (i - 1)
  end
  M.write_file(dir .. '/vocab.json', '{' .. table.concat(parts, ',') .. '}')
  local lines = { '#version: 0.2' }
  for i, m in ipairs(merges) do
    lines[i + 1] = m[1] .. ' ' .. m[2]
  end
  M.write_file(dir .. '/merges.txt', table.concat(lines, '\n') .. '\n')
end

local function array(t) return setmetatable(t, json.array) end

-- One step of the normalizer, the pre-tokenizer or the decoder (zlua.tokenizer.pipeline's
-- descriptions) as tokenizer.json spells it.
local function step_json(st)
  local t = st.type
  if t == 'Split' then return { type = t, pattern = { Regex = st.pattern }, behavior = 'Isolated', invert = false } end
  if t == 'Replace' then return { type = t, pattern = { String = st.pattern }, content = st.content } end
  if t == 'Prepend' then return { type = t, prepend = st.prepend } end
  if t == 'Strip' then return { type = t, content = st.content, start = st.start, stop = st.stop } end
  if t == 'Metaspace' then
    return { type = t, replacement = st.replacement, prepend_scheme = st.prepend_scheme, split = st.split }
  end
  if t == 'ByteLevel' then
    return { type = t, add_prefix_space = st.add_prefix_space, trim_offsets = true, use_regex = st.use_regex }
  end
  return { type = t }   -- NFC, ByteFallback, Fuse
end

-- A list of steps as tokenizer.json spells it: null for none, one alone, or a Sequence
-- whose list is under key.
local function steps_json(steps, key)
  local out = {}
  for i, st in ipairs(steps) do out[i] = step_json(st) end
  if #out == 0 then return json.null end
  return #out == 1 and out[1] or { type = 'Sequence', [key] = array(out) }
end

-- The post-processor: a TemplateProcessing adding the template's tokens (spelled[id + 1]
-- names one) around $A, and its pair form (the template's own, else the single one around
-- each of $A and $B); ByteLevel's, which adds nothing, without a template. The type ids are
-- 0 for the single template's share of the pair and 1 after it, as LLaMA's and BERT's are.
local function post_processor_json(template, spelled)
  if not template or (#template.before + #template.after == 0 and not template.pair) then
    return { type = 'ByteLevel', add_prefix_space = true, trim_offsets = false, use_regex = true }
  end
  local single, pair = pipeline.forms(template)
  local specials = {}
  local function items_json(items, first_type_one)
    local out = array({})
    for k, item in ipairs(items) do
      local type_id = k >= first_type_one and 1 or 0
      if item == 'A' or item == 'B' then
        out[k] = { Sequence = { id = item, type_id = type_id } }
      else
        local name = spelled[item + 1]
        out[k] = { SpecialToken = { id = name, type_id = type_id } }
        specials[name] = { id = name, ids = array({ item }), tokens = array({ name }) }
      end
    end
    return out
  end
  return { type = 'TemplateProcessing', single = items_json(single, math.huge),
    pair = items_json(pair, #single + 1), special_tokens = specials }
end

--- files.write_tokenizer_json(dir, d): dir/tokenizer.json as Hugging Face's tokenizers write
--- one, from d = { vocab = { [spelled] = id } (the BPE model's), merges = { {left, right}
--- spelled, ... } in rank order, added = the added tokens, normalizer, pre_tokenizer and
--- template as the description has them, ignore_merges, spelled = { [id + 1] = token }, and
--- for a model of characters chars = { byte_fallback =, unk_token = (spelled) or nil,
--- fuse_unk =, decoder = } }.
function M.write_tokenizer_json(dir, d)
  local added = {}
  for i, t in ipairs(d.added) do
    added[i] = { id = t.id, content = t.content, single_word = t.single_word or false, lstrip = t.lstrip or false,
      rstrip = t.rstrip or false, normalized = t.normalized or false, special = t.special or false }
  end
  table.sort(added, function(a, b) return a.id < b.id end)
  -- A merge as a pair: a token of characters may hold a space, which "left right" cannot.
  local merges = array({})
  for r, m in ipairs(d.merges) do merges[r] = array({ m[1], m[2] }) end
  local c = d.chars
  local doc = {
    version = '1.0', truncation = json.null, padding = json.null, added_tokens = array(added),
    normalizer = steps_json(d.normalizer, 'normalizers'),
    pre_tokenizer = steps_json(d.pre_tokenizer, 'pretokenizers'),
    post_processor = post_processor_json(d.template, d.spelled),
    decoder = c and steps_json(c.decoder, 'decoders')
      or { type = 'ByteLevel', add_prefix_space = true, trim_offsets = true, use_regex = true },
    model = { type = 'BPE', dropout = json.null, unk_token = c and c.unk_token or json.null,
      continuing_subword_prefix = json.null, end_of_word_suffix = json.null, fuse_unk = c and c.fuse_unk or false,
      byte_fallback = c and c.byte_fallback or false, ignore_merges = d.ignore_merges, vocab = d.vocab,
      merges = merges },
  }
  M.write_file(dir .. '/tokenizer.json', json.encode(doc, 2) .. '\n')
end

return M
