-- zlua.tokenizer.config: tokenizer_config.json as transformers 5 applies it to a tokenizer's
-- description: its added_tokens_decoder, its named special tokens (bos_token, eos_token, ...)
-- and extra ones, all matched whole in text, and add_bos_token / add_eos_token.

local json = require 'zlua.json'
local bytes = require 'zlua.tokenizer.bytes'
local files = require 'zlua.tokenizer.files'
local pipeline = require 'zlua.tokenizer.pipeline'

local M = {}
local fmt = string.format

--- config.NAMES: the named special tokens, in the order transformers adds them.
M.NAMES = { 'bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token' }

local function is_null(v) return v == nil or v == json.null end

-- A special token as the file spells it: a string, or an AddedToken object with a content.
-- Returns the added-token entry (id unset), or nil for null.
local function token(v, what)
  if is_null(v) then return nil end
  if type(v) == 'string' then
    if v == '' then error(what .. ' is an empty string', 0) end
    return { content = v, special = true, normalized = false, lstrip = false, rstrip = false, single_word = false }
  end
  local t = files.added_token(v, what)
  t.special = true
  return t
end

--- config.read(path) -> { tokens = { [name] = entry }, extra = { entry, ... },
--- decoder = { entry with id, ... } (by id), add_bos_token =, add_eos_token = } (booleans or nil).
function M.read(path)
  local doc = json.decode(files.read_text(path), path)
  if type(doc) ~= 'table' or getmetatable(doc) == json.array then
    error(path .. ': expected a JSON object', 0)
  end
  local cfg = { tokens = {}, extra = {}, decoder = {} }
  for _, name in ipairs(M.NAMES) do cfg.tokens[name] = token(doc[name], fmt('%s: %s', path, name)) end
  for _, key in ipairs({ 'extra_special_tokens', 'additional_special_tokens' }) do
    local list = doc[key]
    if not is_null(list) and #cfg.extra == 0 then
      if type(list) ~= 'table' then error(fmt('%s: %s must be a list or an object', path, key), 0) end
      -- A list in its order; an object (named extra tokens) by name, for a fixed order.
      local keys = {}
      if getmetatable(list) == json.array then
        for k = 1, #list do keys[k] = k end
      else
        for k in pairs(list) do keys[#keys + 1] = k end
        table.sort(keys)
      end
      for _, k in ipairs(keys) do
        local at = type(k) == 'number' and tostring(k - 1) or json.encode(k)
        cfg.extra[#cfg.extra + 1] = token(list[k], fmt('%s: %s[%s]', path, key, at))
      end
    end
  end
  local dec = doc.added_tokens_decoder
  if not is_null(dec) then
    if type(dec) ~= 'table' or getmetatable(dec) == json.array then
      error(path .. ': added_tokens_decoder must be an object of id -> token', 0)
    end
    for k, v in pairs(dec) do
      local id = math.tointeger(tonumber(k))
      if not id or id < 0 or tostring(id) ~= k then
        error(fmt('%s: added_tokens_decoder key "%s" is not an id', path, tostring(k)), 0)
      end
      local t = files.added_token(v, fmt('%s: added_tokens_decoder["%s"]', path, k))
      t.id = id
      cfg.decoder[#cfg.decoder + 1] = t
    end
    table.sort(cfg.decoder, function(a, b) return a.id < b.id end)
  end
  for _, key in ipairs({ 'add_bos_token', 'add_eos_token' }) do
    cfg[key] = pipeline.flag(doc, key, path, nil)
  end
  return cfg
end

--- config.apply(desc, cfg, path): adds to desc.added the tokens cfg names that it lacks
--- (an id from the vocabulary, else the next free one), sets desc.special_tokens = {
--- [name] = content }, and, for a description read from vocab.json + merges.txt
--- (desc.from_pair), makes desc.template BOS and EOS as add_bos_token and add_eos_token say.
--- transformers does the same: it ignores those two where there is a tokenizer.json.
function M.apply(desc, cfg, path)
  local by_content, used = {}, {}
  local top = -1
  for _, id in pairs(desc.vocab) do
    used[id] = true
    if id > top then top = id end
  end
  for _, t in ipairs(desc.added) do
    by_content[t.content] = t
    used[t.id] = true
    if t.id > top then top = t.id end
  end
  local function add(t, what)
    local have = by_content[t.content]
    if have then return have end
    local in_vocab = desc.vocab[(bytes.decode(t.content))]
    if t.id and in_vocab and in_vocab ~= t.id then
      error(fmt('%s: %s "%s" has id %d, but the vocabulary gives it %d', path, what, t.content, t.id, in_vocab), 0)
    end
    local id = t.id or in_vocab or top + 1
    if id ~= in_vocab and used[id] then
      error(fmt('%s: %s "%s" has id %d, which another token has', path, what, t.content, id), 0)
    end
    t.id = id
    used[id] = true
    if id > top then top = id end
    desc.added[#desc.added + 1] = t
    by_content[t.content] = t
    return t
  end
  for _, t in ipairs(cfg.decoder) do add(t, 'added_tokens_decoder token') end
  desc.special_tokens = {}
  for _, name in ipairs(M.NAMES) do
    local t = cfg.tokens[name]
    if t then desc.special_tokens[name] = add(t, name).content end
  end
  for _, t in ipairs(cfg.extra) do add(t, 'extra special token') end
  if desc.from_pair then
    local bos, eos = cfg.tokens.bos_token, cfg.tokens.eos_token
    desc.template = { before = {}, after = {} }
    if cfg.add_bos_token and bos then desc.template.before[1] = by_content[bos.content].id end
    if cfg.add_eos_token and eos then desc.template.after[1] = by_content[eos.content].id end
  end
end

--- config.write(dir, added, names, template, ids): dir/tokenizer_config.json naming what
--- transformers reads there: the added tokens by id (added_tokens_decoder), the named special
--- tokens (names = { [name] = content }) and add_bos_token / add_eos_token, true where the
--- template adds just that token (ids = { [content] = id }); transformers takes those two only
--- where there is no tokenizer.json.
function M.write(dir, added, names, template, ids)
  local dec = {}
  for _, t in ipairs(added) do
    dec[tostring(t.id)] = { content = t.content, lstrip = t.lstrip or false, normalized = t.normalized or false,
      rstrip = t.rstrip or false, single_word = t.single_word or false, special = t.special or false }
  end
  local doc = { added_tokens_decoder = dec, tokenizer_class = 'PreTrainedTokenizerFast' }
  for _, name in ipairs(M.NAMES) do doc[name] = names[name] end
  local tpl = template or { before = {}, after = {} }
  local bos, eos = names.bos_token and ids[names.bos_token], names.eos_token and ids[names.eos_token]
  doc.add_bos_token = #tpl.before == 1 and tpl.before[1] == bos
  doc.add_eos_token = #tpl.after == 1 and tpl.after[1] == eos
  files.write_file(dir .. '/tokenizer_config.json', json.encode(doc, 2) .. '\n')
end

return M
