-- zlua.tokenizer.pipeline: what tokenizer.json says about the steps around the BPE model,
-- read into plain descriptions: the normalizer (NFC, Prepend, Replace), the pre-tokenizer
-- steps (ByteLevel, and Split with a known pattern; or Metaspace, or none, for a vocabulary of
-- characters as SentencePiece's BPE in LLaMA 2 and Mistral), the post-processor's special
-- tokens, and for a vocabulary of characters the decoder. What would change the ids or the
-- text and is not supported is refused, naming it and the file.

local json = require 'zlua.json'
local split_pattern = require 'zlua.tokenizer.split_pattern'

local M = {}
local fmt = string.format

local function is_null(v) return v == nil or v == json.null end

local function type_of(node)
  if is_null(node) then return 'null' end
  if type(node) ~= 'table' then return tostring(node) end
  return tostring(node.type)
end

--- pipeline.flag(t, key, what, default) -> t[key] when it is a boolean, default when it is
--- missing or null; anything else is an error naming what.key.
local function flag(t, key, what, default)
  local v = t[key]
  if is_null(v) then return default end
  if type(v) ~= 'boolean' then error(fmt('%s.%s must be true or false, got %s', what, key, tostring(v)), 0) end
  return v
end
M.flag = flag

-- Each member of a Sequence node under key (normalizers, pretokenizers, decoders,
-- processors) through one(member, what names it), in order.
local function each_member(node, key, what, path, one)
  local list = node[key]
  if getmetatable(list) ~= json.array then
    error(fmt('%s: %s: a Sequence without its "%s" array', path, what, key), 0)
  end
  for i, m in ipairs(list) do one(m, fmt('%s.%s[%d]', what, key, i - 1)) end
end

-- A {"String": s} pattern's string, or an error naming what.
local function string_pattern(n, what, path)
  local pattern = type(n.pattern) == 'table' and n.pattern or {}
  if type(pattern.String) ~= 'string' or pattern.String == '' then
    error(fmt('%s: %s.pattern is %s; only a {"String": ...} pattern is supported', path, what,
      json.encode(n.pattern or json.null)), 0)
  end
  if type(n.content) ~= 'string' then error(fmt('%s: %s.content must be a string', path, what), 0) end
  return pattern.String
end

--- pipeline.normalizer(node, path) -> the steps in order, each {type = 'NFC'}, {type =
--- 'Prepend', prepend =} or {type = 'Replace', pattern =, content =} (a plain string
--- replaced everywhere): a Sequence of those, one alone, or none (null: {}).
function M.normalizer(node, path)
  local steps = {}
  local function one(n, what)
    local t = type_of(n)
    if t == 'null' then return end
    if t == 'NFC' then
      steps[#steps + 1] = { type = 'NFC' }
    elseif t == 'Prepend' then
      if type(n.prepend) ~= 'string' then error(fmt('%s: %s.prepend must be a string', path, what), 0) end
      steps[#steps + 1] = { type = 'Prepend', prepend = n.prepend }
    elseif t == 'Replace' then
      steps[#steps + 1] = { type = 'Replace', pattern = string_pattern(n, what, path), content = n.content }
    elseif t == 'Sequence' then
      each_member(n, 'normalizers', what, path, one)
    else
      error(fmt('%s: %s is %s; only NFC, Prepend and Replace (alone or in a Sequence) are supported', path,
        what, t), 0)
    end
  end
  one(node, 'normalizer')
  return steps
end

local PREPEND_SCHEMES = { always = true, first = true, never = true }

-- A Metaspace pre-tokenizer or decoder: {type = 'Metaspace', replacement =, prepend_scheme =,
-- split =}; an older file's add_prefix_space stands for always or never.
local function metaspace(n, what, path)
  local scheme = n.prepend_scheme
  if is_null(scheme) then scheme = flag(n, 'add_prefix_space', path .. ': ' .. what, true) and 'always' or 'never' end
  if not PREPEND_SCHEMES[scheme] then
    error(fmt('%s: %s.prepend_scheme is %s; expected always, first or never', path, what, tostring(scheme)), 0)
  end
  if type(n.replacement) ~= 'string' or utf8.len(n.replacement) ~= 1 then
    error(fmt('%s: %s.replacement must be one character', path, what), 0)
  end
  return { type = 'Metaspace', replacement = n.replacement, prepend_scheme = scheme,
    split = flag(n, 'split', path .. ': ' .. what, true) }
end

--- pipeline.pre_tokenizer(node, path) -> the steps in order and whether the vocabulary is
--- byte-level. Each step is {type = 'ByteLevel', add_prefix_space =, use_regex =}, {type =
--- 'Split', pattern =} or {type = 'Metaspace', replacement =, prepend_scheme =, split =}.
--- Byte-level: a ByteLevel step, with Splits only before it (after it the regex would see
--- byte-level characters). Otherwise characters: a Metaspace alone, or no pre-tokenizer.
function M.pre_tokenizer(node, path)
  local steps, byte_level = {}, false
  local function one(n, what)
    local t = type_of(n)
    if t == 'null' and what == 'pre_tokenizer' then return end
    if t == 'ByteLevel' then
      byte_level = true
      steps[#steps + 1] = { type = 'ByteLevel', add_prefix_space = flag(n, 'add_prefix_space', path .. ': ' .. what, false),
        use_regex = flag(n, 'use_regex', path .. ': ' .. what, true) }
    elseif t == 'Split' then
      local pattern = type(n.pattern) == 'table' and n.pattern or {}
      if type(pattern.Regex) ~= 'string' then
        error(fmt('%s: %s.pattern is %s; only a {"Regex": ...} pattern is supported', path, what,
          type(pattern.String) == 'string' and fmt('the string "%s"', pattern.String) or json.encode(n.pattern or json.null)), 0)
      end
      local re = pattern.Regex
      if n.behavior ~= 'Isolated' or flag(n, 'invert', path .. ': ' .. what, false) then
        error(fmt('%s: %s has behavior %s, invert %s; only Isolated, invert false is supported', path, what,
          tostring(n.behavior), tostring(n.invert)), 0)
      end
      if not split_pattern.scanner(re) then
        error(fmt('%s: %s.pattern.Regex "%s" is not a pattern this tokenizer knows (it knows %s)', path, what, re,
          split_pattern.KNOWN), 0)
      end
      if byte_level then error(fmt('%s: %s comes after a ByteLevel step; only a Split before it is supported', path, what), 0) end
      steps[#steps + 1] = { type = 'Split', pattern = re }
    elseif t == 'Metaspace' and what == 'pre_tokenizer' then
      steps[#steps + 1] = metaspace(n, what, path)
    elseif t == 'Sequence' then
      each_member(n, 'pretokenizers', what, path, one)
    else
      error(fmt('%s: %s is %s; only ByteLevel (Split, a known pattern, before it in a Sequence), Metaspace alone, '
        .. 'or none are supported', path, what, t), 0)
    end
  end
  one(node, 'pre_tokenizer')
  if not byte_level and #steps > 0 and steps[1].type ~= 'Metaspace' then
    error(fmt('%s: pre_tokenizer has no ByteLevel step after its Split (a Split is supported only before a '
      .. 'ByteLevel)', path), 0)
  end
  return steps, byte_level
end

--- pipeline.decoder(node, path) -> the decoding steps of a vocabulary of characters, in
--- order: {type = 'Replace', pattern =, content =}, {type = 'ByteFallback'}, {type = 'Fuse'},
--- {type = 'Strip', content =, start =, stop =}, {type = 'Metaspace', replacement =,
--- prepend_scheme =, split =}; a Sequence of those, one alone, or none ({}).
function M.decoder(node, path)
  local steps = {}
  local function count(n, key, what)
    local v = n[key]
    if math.type(v) ~= 'integer' or v < 0 then error(fmt('%s: %s.%s must be an integer >= 0', path, what, key), 0) end
    return v
  end
  local function one(n, what)
    local t = type_of(n)
    if t == 'null' then return end
    if t == 'Replace' then
      steps[#steps + 1] = { type = 'Replace', pattern = string_pattern(n, what, path), content = n.content }
    elseif t == 'ByteFallback' or t == 'Fuse' then
      steps[#steps + 1] = { type = t }
    elseif t == 'Strip' then
      if type(n.content) ~= 'string' or utf8.len(n.content) ~= 1 then
        error(fmt('%s: %s.content must be one character', path, what), 0)
      end
      steps[#steps + 1] = { type = 'Strip', content = n.content, start = count(n, 'start', what),
        stop = count(n, 'stop', what) }
    elseif t == 'Metaspace' then
      steps[#steps + 1] = metaspace(n, what, path)
    elseif t == 'Sequence' then
      each_member(n, 'decoders', what, path, one)
    else
      error(fmt('%s: %s is %s; for a vocabulary of characters only Replace, ByteFallback, Fuse, Strip and '
        .. 'Metaspace (alone or in a Sequence) are supported', path, what, t), 0)
    end
  end
  one(node, 'decoder')
  return steps
end

-- A template's list under key as items in order: 'A', 'B' (each of seqs exactly once), or a
-- special token's ids.
local function template_items(n, key, seqs, specials, what, path)
  local list = n[key]
  if getmetatable(list) ~= json.array then error(fmt('%s: %s.%s must be an array', path, what, key), 0) end
  local out, seen = {}, {}
  for i, item in ipairs(list) do
    local where = fmt('%s: %s.%s[%d]', path, what, key, i - 1)
    local seq, special = type(item) == 'table' and item.Sequence, type(item) == 'table' and item.SpecialToken
    if type(seq) == 'table' then
      if not seqs[seq.id] or seen[seq.id] then
        error(fmt('%s: only one Sequence each of %s is supported in "%s"', where, key == 'single' and '$A' or
          '$A and $B', key), 0)
      end
      seen[seq.id] = true
      out[#out + 1] = seq.id
    elseif type(special) == 'table' and type(special.id) == 'string' then
      local entry = specials[special.id]
      if type(entry) ~= 'table' or getmetatable(entry.ids) ~= json.array then
        error(fmt('%s: special token "%s" has no entry with its ids in %s.special_tokens', where, special.id, what), 0)
      end
      for _, id in ipairs(entry.ids) do
        if math.type(id) ~= 'integer' or id < 0 then
          error(fmt('%s: special token "%s" has id %s, expected a non-negative integer', where, special.id, tostring(id)), 0)
        end
        out[#out + 1] = id
      end
    else
      error(where .. ': expected {"Sequence": ...} or {"SpecialToken": {"id": ...}}', 0)
    end
  end
  for name in pairs(seqs) do
    if not seen[name] then error(fmt('%s: %s.%s has no $%s', path, what, key, name), 0) end
  end
  return out
end

-- What a TemplateProcessing adds: the ids before and after $A in its "single" template, and
-- its "pair" template's items (see template_items; pair is nil when it has none).
local function template(n, what, path)
  local specials = is_null(n.special_tokens) and {} or n.special_tokens
  local t, seen_a = { before = {}, after = {} }, false
  for _, item in ipairs(template_items(n, 'single', { A = true }, specials, what, path)) do
    if item == 'A' then
      seen_a = true
    else
      local into = seen_a and t.after or t.before
      into[#into + 1] = item
    end
  end
  if not is_null(n.pair) then t.pair = template_items(n, 'pair', { A = true, B = true }, specials, what, path) end
  return t
end

--- pipeline.forms(template) -> the single and pair forms of a template (pipeline.post_processor's,
--- or config's BOS and EOS) as items: 'A', 'B' or a special token's id. The pair form is the
--- template's own, else the single one around each text; without a template, {'A'} and
--- {'A', 'B'}.
function M.forms(template)
  if not template then return { 'A' }, { 'A', 'B' } end
  local single = table.move(template.before, 1, #template.before, 1, {})
  single[#single + 1] = 'A'
  table.move(template.after, 1, #template.after, #single + 1, single)
  local pair = template.pair
  if not pair then
    pair = table.move(single, 1, #single, 1, {})
    for _, item in ipairs(single) do pair[#pair + 1] = item == 'A' and 'B' or item end
  end
  return single, pair
end

--- pipeline.post_processor(node, path) -> {before = {ids}, after = {ids}, pair = items or
--- nil} that encoding adds around a text's ids (and, with pair, around two texts'), or nil.
--- ByteLevel only trims offsets, so adds nothing; TemplateProcessing adds its templates'
--- special tokens; a Sequence combines them.
function M.post_processor(node, path)
  local found
  local function one(n, what)
    local t = type_of(n)
    if t == 'null' or t == 'ByteLevel' then return end
    if t == 'TemplateProcessing' then
      if found then error(fmt('%s: %s is a second TemplateProcessing; only one is supported', path, what), 0) end
      found = template(n, what, path)
    elseif t == 'Sequence' then
      each_member(n, 'processors', what, path, one)
    else
      error(fmt('%s: %s is %s; only ByteLevel, TemplateProcessing and a Sequence of them are supported',
        path, what, t), 0)
    end
  end
  one(node, 'post_processor')
  return found
end

return M
