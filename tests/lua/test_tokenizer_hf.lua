-- zlua.tokenizer on the folders of the models people fine-tune now, against Hugging Face's ids
-- frozen in tests/data/{qwen2_tok,llama3_tok,gpt2_tok_tf5,llama2_tok}/expected.json (made by
-- tests/interop/make_hf_toks.py), with no Python needed: the Split patterns, NFC, special
-- tokens in text, templates, tokenizer_config.json, the fallback to vocab.json + merges.txt,
-- and the errors that name what is not supported.

local H = require 'harness'
local json = require 'zlua.json'
local tokenizer = require 'zlua.tokenizer'
local bytes = require 'zlua.tokenizer.bytes'
local nfc = require 'zlua.tokenizer.nfc'

local DATA = H.source_dir .. '/tests/data'
local TMP = os.tmpname()
os.remove(TMP)
assert(os.execute('mkdir -p ' .. H.quote(TMP)))

local slurp = require('zlua.tokenizer.files').read_text

-- A directory holding the given files (name -> text, or a table written as JSON).
local n_dirs = 0
local function dir_with(files)
  n_dirs = n_dirs + 1
  local d = TMP .. '/d' .. n_dirs
  assert(os.execute('mkdir -p ' .. H.quote(d)))
  for name, text in pairs(files) do
    H.write_file(d .. '/' .. name, type(text) == 'table' and json.encode(text) or text)
  end
  return d
end

local function ids_str(ids)
  local t = {}
  for k = 1, #ids do t[k] = tostring(ids[k]) end
  return '[' .. table.concat(t, ',') .. ']'
end

local function doc_of(name, file) return json.decode(slurp(DATA .. '/' .. name .. '/' .. (file or 'tokenizer.json'))) end

for _, name in ipairs({ 'qwen2_tok', 'llama3_tok', 'gpt2_tok_tf5', 'llama2_tok' }) do
  H.test(name .. ': ids, pairs, decoded text and words as Hugging Face\'s', function()
    local tok = tokenizer.from_pretrained(DATA .. '/' .. name)
    local cases = json.decode(slurp(DATA .. '/' .. name .. '/expected.json')).cases
    H.check(#cases > 500, 'the cases are there')
    for k, c in ipairs(cases) do
      local what = string.format('%s: %q', name, c.text)
      local ids = tok:encode(c.text)
      H.check_eq(ids_str(ids), ids_str(c.ids), what .. ': ids')
      -- The text with the next one as a pair, as transformers' tokenizer(text, text_pair).
      H.check_eq(ids_str(tok:encode(c.text, cases[k % #cases + 1].text)), ids_str(c.pair_ids), what .. ': pair')
      H.check_eq(tok:decode(ids), c.decoded or c.text, what .. ': decoded')
      if c.words then
        local got = {}
        for i, w in ipairs(tok:pre_tokenize(c.text)) do got[i] = tok.chars and w or bytes.encode(w) end
        H.check_eq(table.concat(got, '|'), table.concat(c.words, '|'), what .. ': words')
      end
    end
  end)
end

for _, name in ipairs({ 'qwen2_tok', 'llama3_tok', 'gpt2_tok_tf5', 'llama2_tok' }) do
  H.test(name .. ': save_pretrained writes what from_pretrained reads back whole', function()
    local tok = tokenizer.from_pretrained(DATA .. '/' .. name)
    local saved = TMP .. '/saved_' .. name
    tok:save_pretrained(saved)
    -- tokenizer.json alone carries the pipeline: without the pair beside it nothing can
    -- fall back to GPT-2's pre-tokenizer.
    local back = tokenizer.from_pretrained(saved)
    os.remove(saved .. '/vocab.json')
    os.remove(saved .. '/merges.txt')
    local alone = tokenizer.from_pretrained(saved)
    for _, k in ipairs({ 'bos_token', 'eos_token', 'pad_token', 'unk_token', 'bos_token_id', 'eos_token_id',
                         'pad_token_id', 'add_bos_token', 'add_eos_token' }) do
      H.check_eq(tostring(back[k]), tostring(tok[k]), name .. ': ' .. k)
      H.check_eq(tostring(alone[k]), tostring(tok[k]), name .. ' (tokenizer.json alone): ' .. k)
    end
    for _, c in ipairs(json.decode(slurp(DATA .. '/' .. name .. '/expected.json')).cases) do
      local what = string.format('%s saved and read back: %q', name, c.text)
      H.check_eq(ids_str(back:encode(c.text)), ids_str(c.ids), what)
      H.check_eq(ids_str(alone:encode(c.text)), ids_str(c.ids), what .. ' (tokenizer.json alone)')
    end
  end)
end

H.test('a save_pretrained that cannot write names the file and leaves no temporary behind', function()
  local tok = tokenizer.from_pretrained(DATA .. '/qwen2_tok')
  local d = dir_with({})
  -- A folder where tokenizer.json would go: the rename over it fails.
  assert(os.execute('mkdir -p ' .. H.quote(d .. '/tokenizer.json/x')))
  local ok, err = pcall(tok.save_pretrained, tok, d)
  H.check(not ok and tostring(err):find('cannot write ' .. d .. '/tokenizer.json', 1, true) ~= nil,
    'the error names tokenizer.json: ' .. tostring(err))
  H.check(io.open(d .. '/tokenizer.json.tmp') == nil, 'no tokenizer.json.tmp is left')
end)

H.test('a vocabulary of characters: bytes it lacks go as <0xXX> tokens and decode back, not UTF-8 too', function()
  local tok = tokenizer.from_pretrained(DATA .. '/llama2_tok')
  for _, text in ipairs({ 'a\xff\xfeb', '\xe2\x82', 'caf\xc3\xa9 \xed\xa0\x80 x', '\xf0\x9f\x98\x80', '  x  ' }) do
    local ids = tok:encode(text, { add_special_tokens = false })
    H.check_eq(tok:decode(ids), text, string.format('%q decodes back', text))
  end
  local byte_ff = tok:token_to_id('<0xFF>')
  local ids = tok:encode('\xff', { add_special_tokens = false })
  H.check_eq(ids[#ids], byte_ff, 'a byte that is not UTF-8 is its <0xFF> token')
  -- Without one of its bytes' tokens a character is <unk>, as tokenizers has it.
  local doc = doc_of('llama2_tok')
  doc.model.vocab['<0xE2>'] = nil
  local partial = tokenizer.from_pretrained(dir_with({ ['tokenizer.json'] = doc }))
  local unks, bytes_used = 0, 0
  for _, id in ipairs(partial:encode('a\u{2603}\u{2603}b', { add_special_tokens = false })) do
    if id == partial.unk then unks = unks + 1 end
    if partial:id_to_token(id):find('^<0x') then bytes_used = bytes_used + 1 end
  end
  H.check(unks == 1 and bytes_used == 0, 'two snowmen without <0xE2> are one <unk>, fused, and no byte token')
end)

H.test('invalid UTF-8 is encoded byte by byte and decodes back, through NFC and the Split patterns', function()
  -- NFC composes e + U+0301 (bytes CC 81) on either side of a bad byte, and nothing across it.
  H.check_eq(nfc.normalize('e\xcc\x81\xff\xcc\x81'), '\xc3\xa9\xff\xcc\x81')
  for _, name in ipairs({ 'qwen2_tok', 'llama3_tok' }) do
    local tok = tokenizer.from_pretrained(DATA .. '/' .. name)
    for _, s in ipairs({ '\xff', 'abc\xfe\xffdef', 'caf\xc3', 'e\xcc\x81\xff\xcc\x81', '\xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80',
        "'\xc5 x'\xc5\xbf \r\n\xff\r\n", '12\xff345', '\xc0\xaf over\xf0\x9f\x98 long' }) do
      local ids = tok:encode(s, { add_special_tokens = false })
      H.check_eq(tok:decode(ids), name == 'qwen2_tok' and nfc.normalize(s) or s, string.format('%s: round trip of %q', name, s))
    end
  end
end)

H.test('add_special_tokens = false leaves the template out', function()
  local llama = tokenizer.from_pretrained(DATA .. '/llama3_tok')
  local bos = llama.bos_token_id
  H.check_eq(ids_str(llama:encode('Hello world')), ids_str({ bos, table.unpack(llama:encode('Hello world', { add_special_tokens = false })) }))
  H.check_eq(ids_str(llama:encode('')), ids_str({ bos }), 'an empty text is the BOS alone')
  H.check_eq(#llama:encode('', { add_special_tokens = false }), 0)
  local qwen = tokenizer.from_pretrained(DATA .. '/qwen2_tok')
  H.check_eq(ids_str(qwen:encode('Hello', { add_special_tokens = false })), ids_str(qwen:encode('Hello')))
  H.check_error(function() qwen:encode('x', true) end, 'encode: the second argument must be a pair text (a string) or '
    .. 'opts (a table), got boolean')
  H.check_error(function() qwen:encode('x', 'y', 5) end, 'encode: opts must be a table')
end)

H.test('tokenizer_config.json: the special tokens, as strings and ids', function()
  local qwen = tokenizer.from_pretrained(DATA .. '/qwen2_tok')
  H.check_eq(qwen.eos_token, '<|im_end|>')
  H.check_eq(qwen.eos_token_id, qwen:token_to_id('<|im_end|>'))
  H.check_eq(qwen.pad_token, '<|endoftext|>')
  H.check_eq(qwen.pad_token_id, qwen:token_to_id('<|endoftext|>'))
  H.check_eq(qwen.bos_token, nil)
  H.check_eq(qwen.bos_token_id, nil)
  H.check_eq(qwen.add_bos_token, false)
  H.check_eq(qwen:decode(qwen:encode('<|im_start|>user\nhi<|im_end|>'), { skip_special_tokens = true }), 'user\nhi')
  -- <tool_call> is an added token that is not special: skip_special_tokens keeps it.
  H.check_eq(qwen:decode(qwen:encode('<tool_call>x'), { skip_special_tokens = true }), '<tool_call>x')
  local llama = tokenizer.from_pretrained(DATA .. '/llama3_tok')
  H.check_eq(llama.bos_token, '<|begin_of_text|>')
  H.check_eq(llama.bos_token_id, 800)
  H.check_eq(llama.eos_token, '<|end_of_text|>')
  H.check_eq(llama.eos_token_id, 801)
  H.check_eq(llama.pad_token_id, nil)
  H.check_eq(llama.add_bos_token, true)
  H.check_eq(llama.add_eos_token, false)
  local gpt2 = tokenizer.from_pretrained(DATA .. '/gpt2_tok_tf5')
  H.check_eq(gpt2.bos_token_id, 0)
  H.check_eq(gpt2.eos_token, '<|endoftext|>')
  H.check_eq(gpt2.unk_token_id, 0)
  H.check_eq(gpt2.pad_token, nil)
end)

H.test('tokenizer_config.json: add_bos_token / add_eos_token with vocab.json + merges.txt, new tokens get ids', function()
  local cfg = doc_of('gpt2_tok_tf5', 'tokenizer_config.json')
  cfg.add_bos_token, cfg.add_eos_token = true, true
  cfg.pad_token = { __type = 'AddedToken', content = '<pad>', special = true }
  cfg.additional_special_tokens = setmetatable({ '<|sep|>' }, json.array)
  local d = dir_with({ ['vocab.json'] = slurp(DATA .. '/gpt2_tok/vocab.json'),
    ['merges.txt'] = slurp(DATA .. '/gpt2_tok/merges.txt'), ['tokenizer_config.json'] = cfg })
  local tok = tokenizer.from_pretrained(d)
  local plain = tokenizer.from_pretrained(DATA .. '/gpt2_tok_tf5')
  local n = plain:vocab_size()
  H.check_eq(tok.pad_token_id, n, 'a token the vocabulary lacks comes next')
  H.check_eq(tok:token_to_id('<|sep|>'), n + 1)
  H.check_eq(tok:vocab_size(), n + 2)
  H.check_eq(tok.add_bos_token, true)
  local hi = plain:encode('hi')
  H.check_eq(#hi, 2)
  H.check_eq(ids_str(tok:encode('hi<pad><|sep|>')), ids_str({ 0, hi[1], hi[2], n, n + 1, 0 }), 'BOS, the text, EOS')
  -- With a tokenizer.json, transformers ignores the two, and so does this.
  local llama_cfg = doc_of('llama3_tok', 'tokenizer_config.json')
  llama_cfg.add_bos_token = false
  d = dir_with({ ['tokenizer.json'] = slurp(DATA .. '/llama3_tok/tokenizer.json'), ['tokenizer_config.json'] = llama_cfg })
  H.check_eq(tokenizer.from_pretrained(d):encode('Hi')[1], 800, 'the template\'s BOS stays')
  d = dir_with({ ['tokenizer.json'] = slurp(DATA .. '/gpt2_tok_tf5/tokenizer.json'), ['tokenizer_config.json'] = cfg })
  H.check_eq(tokenizer.from_pretrained(d):encode('hi')[1], hi[1], 'no BOS from the config')
end)

H.test('NFC: composition, Hangul, reordering, exclusions, and text left as it is', function()
  local cases = {
    { 'e\u{301}', '\u{E9}' }, { '\u{E9}', '\u{E9}' }, { 'A\u{30A}', '\u{C5}' }, { '\u{212B}', '\u{C5}' },
    { '\u{2126}', '\u{3A9}' }, { '\u{1100}\u{1161}\u{11A8}', '\u{AC01}' }, { '\u{AC00}\u{11A8}', '\u{AC01}' },
    { '\u{1100}\u{1161}', '\u{AC00}' }, { 'a\u{323}\u{302}', '\u{1EAD}' }, { 'a\u{302}\u{323}', '\u{1EAD}' },
    { 'q\u{307}\u{323}', 'q\u{323}\u{307}' }, { '\u{958}', '\u{915}\u{93C}' }, { '\u{344}', '\u{308}\u{301}' },
    { '\u{1E9B}\u{323}', '\u{1E9B}\u{323}' }, { '\u{301}e', '\u{301}e' }, { 'e\u{301}\u{301}', '\u{E9}\u{301}' },
    { 'o\u{308}\u{301}', '\u{F6}\u{301}' }, { '\u{F73}', '\u{F71}\u{F72}' }, { 'e\xff\u{301}', 'e\xff\u{301}' },
    { 'e\u{301}\xff', '\u{E9}\xff' }, { '\u{1D15E}', '\u{1D157}\u{1D165}' }, { 'plain ascii', 'plain ascii' },
  }
  for _, c in ipairs(cases) do H.check_eq(nfc.normalize(c[1]), c[2], string.format('NFC of %q', c[1])) end
  local long = ('\u{301}'):rep(200000)
  H.check_eq(nfc.normalize('e' .. long), '\u{E9}' .. ('\u{301}'):rep(199999), 'a long run of marks')
  local cjk = ('日本語のテキスト'):rep(1000)
  H.check(rawequal(nfc.normalize(cjk), cjk) or nfc.normalize(cjk) == cjk, 'NFC text comes back as it is')
end)

H.test('added tokens: normalized ones are matched in the normalized text; lstrip and rstrip', function()
  local doc = doc_of('qwen2_tok')
  local top = 0
  for _, t in ipairs(doc.added_tokens) do
    if t.id > top then top = t.id end
    if t.content == '<|im_start|>' then t.lstrip, t.rstrip = true, true end
  end
  doc.added_tokens[#doc.added_tokens + 1] = { id = top + 1, content = 'cafe\u{301}', normalized = true, special = false }
  local tok = tokenizer.from_pretrained(dir_with({ ['tokenizer.json'] = doc }))
  local ids = tok:encode('x caf\u{E9} y')
  H.check(ids_str(ids):find(',' .. (top + 1) .. ',', 1, true) ~= nil, 'the precomposed café is the token: ' .. ids_str(ids))
  -- Hugging Face keeps the token normalized, and decodes it through the byte-level decoder,
  -- where "é" is the byte 0xE9.
  H.check_eq(tok:id_to_token(top + 1), 'caf\u{E9}')
  H.check_eq(tok:decode({ top + 1 }), 'caf\xE9')
  local start = tok:token_to_id('<|im_start|>')
  H.check_eq(ids_str(tok:encode('a  <|im_start|>  b')), ids_str({ tok:encode('a')[1], start, tok:encode('b')[1] }),
    'lstrip and rstrip take the spaces')
end)

H.test('Split patterns: the LLaMA 3 family for any digit count, GPT-2\'s, others refused', function()
  local doc = doc_of('llama3_tok')
  local pattern = doc.pre_tokenizer.pretokenizers[1].pattern.Regex
  doc.pre_tokenizer.pretokenizers[1].pattern.Regex = pattern:gsub('{1,3}', '{1,5}')
  local tok = tokenizer.from_pretrained(dir_with({ ['tokenizer.json'] = doc }))
  local words = tok:pre_tokenize('1234567 x')
  H.check_eq(table.concat(words, '|'), '12345|67| x')
  doc.pre_tokenizer.pretokenizers[1].pattern.Regex =
    [['s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+]]
  tok = tokenizer.from_pretrained(dir_with({ ['tokenizer.json'] = doc }))
  H.check_eq(table.concat(tok:pre_tokenize("it's 1234567  x"), '|'), "it|'s| 1234567| | x")
  doc.pre_tokenizer.pretokenizers[1].pattern.Regex = '\\p{L}+|\\s+'
  local d = dir_with({ ['tokenizer.json'] = doc })
  H.check_error(function() tokenizer.from_pretrained(d) end,
    d .. '/tokenizer.json: pre_tokenizer.pretokenizers[0].pattern.Regex "\\p{L}+|\\s+" is not a pattern this tokenizer knows')
end)

-- tokenizer.json of a folder, edited by fn(doc), in a folder of its own.
local function edited(name, fn)
  local doc = doc_of(name)
  fn(doc)
  return dir_with({ ['tokenizer.json'] = doc })
end

H.test('what is not supported is refused, naming it and the file', function()
  local S = function(t) return setmetatable(t, json.array) end
  local refusals = {
    { 'qwen2_tok', function(d) d.normalizer = { type = 'NFKC' } end, 'normalizer is NFKC; only NFC' },
    { 'qwen2_tok', function(d) d.normalizer = { type = 'Sequence', normalizers = S({ { type = 'NFC' }, { type = 'Lowercase' } }) } end,
      'normalizer.normalizers[1] is Lowercase' },
    { 'qwen2_tok', function(d) d.pre_tokenizer.pretokenizers[1].behavior = 'Removed' end,
      'pre_tokenizer.pretokenizers[0] has behavior Removed, invert false; only Isolated' },
    { 'qwen2_tok', function(d) d.pre_tokenizer.pretokenizers[1].pattern = { String = ' ' } end,
      'pre_tokenizer.pretokenizers[0].pattern is the string " "; only a {"Regex": ...} pattern' },
    { 'qwen2_tok', function(d) d.pre_tokenizer.pretokenizers[3] = d.pre_tokenizer.pretokenizers[1] end,
      'pre_tokenizer.pretokenizers[2] comes after a ByteLevel step' },
    { 'qwen2_tok', function(d) d.pre_tokenizer = d.pre_tokenizer.pretokenizers[1] end, 'pre_tokenizer has no ByteLevel step' },
    { 'qwen2_tok', function(d) d.pre_tokenizer.pretokenizers[1] = { type = 'Digits', individual_digits = true } end,
      'pre_tokenizer.pretokenizers[0] is Digits' },
    { 'qwen2_tok', function(d) d.pre_tokenizer = json.null end, 'pre_tokenizer is null' },
    { 'qwen2_tok', function(d) d.post_processor = { type = 'BertProcessing' } end, 'post_processor is BertProcessing' },
    { 'llama3_tok', function(d) d.post_processor.processors[2].special_tokens = {} end,
      'post_processor.processors[1].single[0]: special token "<|begin_of_text|>" has no entry with its ids' },
    { 'llama3_tok', function(d) d.post_processor.processors[3] = d.post_processor.processors[2] end,
      'post_processor.processors[2] is a second TemplateProcessing' },
    { 'llama3_tok', function(d) d.model.type = 'Unigram' end, 'model.type is Unigram; only a BPE model' },
    { 'llama2_tok', function(d) d.model.unk_token = '<nope>' end, 'model.unk_token "<nope>" is not in the vocabulary' },
    { 'llama2_tok', function(d) d.model.unk_token = json.null; d.model.byte_fallback = false end,
      'pre_tokenizer is null (a vocabulary of characters) but the model has neither byte_fallback nor an unk_token' },
    { 'llama2_tok', function(d) d.decoder.decoders[4] = { type = 'CTC' } end,
      'decoder.decoders[3] is CTC; for a vocabulary of characters only Replace' },
    { 'llama2_tok', function(d) d.normalizer.normalizers[2].pattern = { Regex = ' +' } end,
      'normalizer.normalizers[1].pattern is {"Regex":" +"}; only a {"String": ...} pattern' },
    { 'llama2_tok', function(d)
        d.pre_tokenizer = { type = 'Metaspace', replacement = '\u{2581}', prepend_scheme = 'sometimes' }
      end, 'pre_tokenizer.prepend_scheme is sometimes; expected always, first or never' },
  }
  for _, r in ipairs(refusals) do
    local d = edited(r[1], r[2])
    H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/tokenizer.json: ' .. r[3])
  end
  local d = dir_with({ ['tokenizer.json'] = slurp(DATA .. '/qwen2_tok/tokenizer.json'),
    ['tokenizer_config.json'] = '{"eos_token": 5}' })
  H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/tokenizer_config.json: eos_token: expected {"content"')
  d = dir_with({ ['tokenizer.json'] = slurp(DATA .. '/qwen2_tok/tokenizer.json'),
    ['tokenizer_config.json'] = '{"added_tokens_decoder": {"3": {"content": "<|im_end|>x"}}}' })
  H.check_error(function() tokenizer.from_pretrained(d) end, 'added_tokens_decoder token "<|im_end|>x" has id 3, which another token has')
end)

H.test('a refused tokenizer.json falls back to vocab.json + merges.txt, saying why', function()
  local gpt2 = DATA .. '/gpt2_tok'
  local doc = doc_of('gpt2_tok_tf5')
  doc.normalizer = { type = 'NFKD' }
  local d = dir_with({ ['tokenizer.json'] = doc, ['vocab.json'] = slurp(gpt2 .. '/vocab.json'),
    ['merges.txt'] = slurp(gpt2 .. '/merges.txt') })
  local said = {}
  local stderr = io.stderr
  io.stderr = { write = function(_, s) said[#said + 1] = s end }
  local ok, tok = pcall(tokenizer.from_pretrained, d)
  io.stderr = stderr
  H.check(ok, 'loads: ' .. tostring(tok))
  H.check_eq(#said, 1, 'one notice')
  H.check((said[1] or ''):find('normalizer is NFKD; only NFC', 1, true) and said[1]:find('reading ' .. d .. '/vocab.json', 1, true),
    'the notice says why and what instead: ' .. tostring(said[1]))
  for _, c in ipairs(json.decode(slurp(gpt2 .. '/expected.json')).cases) do
    H.check_eq(ids_str(tok:encode(c.text)), ids_str(c.ids), 'fallback ids of ' .. string.format('%q', c.text))
  end
end)

os.execute('rm -rf ' .. H.quote(TMP))
H.done()
