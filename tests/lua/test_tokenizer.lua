-- zlua.tokenizer against Hugging Face's ids frozen in tests/data/gpt2_tok/expected.json
-- (made by tests/interop/make_gpt2_tok.py), with no Python needed: pre-tokenization, ids
-- from tokenizer.json and from vocab.json + merges.txt, round trips (invalid UTF-8 too),
-- the trainer, the errors on malformed files, and the speed on 1 MB of text.

local H = require 'harness'
local json = require 'zlua.json'
local tokenizer = require 'zlua.tokenizer'
local bytes = require 'zlua.tokenizer.bytes'
local pretokenize = require 'zlua.tokenizer.pretokenize'

local DATA = H.source_dir .. '/tests/data/gpt2_tok'
local TMP = os.tmpname()
os.remove(TMP)
assert(os.execute('mkdir -p ' .. H.quote(TMP)))

local slurp = require('zlua.tokenizer.files').read_text

local function spit(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

-- A directory holding the given files (name -> text), for from_pretrained.
local n_dirs = 0
local function dir_with(files)
  n_dirs = n_dirs + 1
  local d = TMP .. '/d' .. n_dirs
  assert(os.execute('mkdir -p ' .. H.quote(d)))
  for name, text in pairs(files) do spit(d .. '/' .. name, text) end
  return d
end

local cases = json.decode(slurp(DATA .. '/expected.json')).cases
local VOCAB, MERGES = slurp(DATA .. '/vocab.json'), slurp(DATA .. '/merges.txt')

local function ids_str(ids)
  local t = {}
  for k = 1, #ids do t[k] = tostring(ids[k]) end
  return '[' .. table.concat(t, ',') .. ']'
end

local function check_ids(tok, how)
  for _, c in ipairs(cases) do
    local got = tok:encode(c.text)
    H.check_eq(ids_str(got), ids_str(c.ids), how .. ': ids of ' .. string.format('%q', c.text))
    H.check_eq(tok:decode(got), c.text, how .. ': decode of ' .. string.format('%q', c.text))
  end
end

H.test('pre-tokenization splits as GPT-2\'s pattern', function()
  for _, c in ipairs(cases) do
    if c.words ~= json.null then
      local got = {}
      pretokenize.each(c.text, function(w) got[#got + 1] = bytes.encode(w) end)
      H.check_eq(table.concat(got, '|'), table.concat(c.words, '|'), string.format('words of %q', c.text))
    end
  end
end)

H.test('ids as Hugging Face\'s, from tokenizer.json', function()
  check_ids(tokenizer.from_pretrained(DATA), 'tokenizer.json')
end)

H.test('ids as Hugging Face\'s, from vocab.json + merges.txt', function()
  check_ids(tokenizer.from_pretrained(dir_with({ ['vocab.json'] = VOCAB, ['merges.txt'] = MERGES })),
    'vocab.json + merges.txt')
end)

H.test('tokenizer.json with merges written as "left right" strings', function()
  local doc = json.decode(slurp(DATA .. '/tokenizer.json'))
  for i, m in ipairs(doc.model.merges) do doc.model.merges[i] = m[1] .. ' ' .. m[2] end
  check_ids(tokenizer.from_pretrained(dir_with({ ['tokenizer.json'] = json.encode(doc) })), 'string merges')
end)

H.test('special tokens', function()
  local tok = tokenizer.from_pretrained(DATA)
  local eot = tok:token_to_id('<|endoftext|>')
  H.check_eq(eot, 0, 'the special token\'s id')
  H.check_eq(tok:decode({ eot }), '<|endoftext|>')
  local ids = tok:encode('a<|endoftext|>b')
  H.check_eq(tok:decode(ids, { skip_special_tokens = true }), 'ab', 'skip_special_tokens')
end)

H.test('added tokens: single_word as \\b around \\w, lstrip and rstrip', function()
  local doc = json.decode(slurp(DATA .. '/tokenizer.json'))
  doc.added_tokens[1].lstrip, doc.added_tokens[1].rstrip = true, true
  doc.added_tokens[2] = { id = 600, content = 'endoftext', single_word = true, special = false }
  local tok = tokenizer.from_pretrained(dir_with({ ['tokenizer.json'] = json.encode(doc) }))
  local function has(s, id)
    for _, v in ipairs(tok:encode(s)) do if v == id then return true end end
    return false
  end
  -- ½ and ² are numbers outside \w; a mark (U+0940), a letter and "_" are inside it.
  for s, want in pairs({ ['!endoftext½'] = true, ['endoftext²'] = true, [' endoftext '] = true,
      ['xendoftext'] = false, ['endoftext_'] = false, ['\u{940}endoftext'] = false, ['endoftext\u{301}'] = false }) do
    H.check_eq(has(s, 600), want, string.format('single_word token in %q', s))
  end
  H.check_eq(ids_str(tok:encode('a \t<|endoftext|>  b')), ids_str({ tok:encode('a')[1], 0, tok:encode('b')[1] }),
    'lstrip and rstrip take the white space around the token')
end)

H.test('invalid UTF-8 is encoded byte by byte and decodes back', function()
  local tok = tokenizer.from_pretrained(DATA)
  for _, s in ipairs({ '\xff', 'abc\xfe\xffdef', 'caf\xc3', '\xc3\x28 x', '\xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80',
      '\xc0\xaf over\xf0\x9f\x98 long', '\0nul\0 bytes', 'ok \xf0\x9f\x98\x80 then \x80' }) do
    local ids = tok:encode(s)
    H.check(#ids > 0, 'some ids for ' .. string.format('%q', s))
    H.check_eq(tok:decode(ids), s, 'round trip of ' .. string.format('%q', s))
  end
  -- A lone invalid byte is a word of its own kind (neither letter, number nor space).
  local words = {}
  pretokenize.each('ab\xffcd \xfe!', function(w) words[#words + 1] = w end)
  H.check_eq(table.concat(words, '|'), 'ab|\xff|cd| \xfe!')
end)

H.test('decode names a bad id', function()
  local tok = tokenizer.from_pretrained(DATA)
  H.check_error(function() tok:decode({ 1, 99999 }) end,
    string.format('ids[2] = 99999 is not an id of this vocabulary (0..%d)', tok:vocab_size() - 1))
  H.check_error(function() tok:decode({ 'x' }) end, 'ids[1] = x')
  H.check_error(function() tok:encode(5) end, 'encode expects a string')
end)

H.test('malformed files are errors naming the file and line', function()
  local d = dir_with({ ['vocab.json'] = '{"a": 0,\n "b": -1}', ['merges.txt'] = '' })
  H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/vocab.json:2: token "b" has id -1')
  d = dir_with({ ['vocab.json'] = '{"a": 0,\n "b": 0}', ['merges.txt'] = '' })
  H.check_error(function() tokenizer.from_pretrained(d) end, '/vocab.json:2: tokens "a" and "b" both have id 0')
  d = dir_with({ ['vocab.json'] = '{"a": 0,\n "b" 1}', ['merges.txt'] = '' })
  H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/vocab.json:2:')
  d = dir_with({ ['vocab.json'] = '[1, 2]', ['merges.txt'] = '' })
  H.check_error(function() tokenizer.from_pretrained(d) end, 'vocab.json: expected a JSON object mapping tokens to ids')
  d = dir_with({ ['vocab.json'] = VOCAB, ['merges.txt'] = '#version: 0.2\nĠ t\nĠt he extra\n' })
  H.check_error(function() tokenizer.from_pretrained(d) end,
    d .. '/merges.txt:3: expected two tokens separated by one space, got "Ġt he extra"')
  d = dir_with({ ['vocab.json'] = VOCAB, ['merges.txt'] = '#version: 0.2\nĠ t\nĠ zzzqqq\n' })
  H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/merges.txt:3: merge "Ġ zzzqqq": "zzzqqq" is not in the vocabulary')
  d = dir_with({ ['vocab.json'] = '{"a": 0, "b": 1}', ['merges.txt'] = 'a b\n' })
  H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/merges.txt:1: merge "a b": the merged token "ab" is not in the vocabulary')
  d = dir_with({ ['vocab.json'] = VOCAB })
  H.check_error(function() tokenizer.from_pretrained(d) end, 'cannot read ' .. d .. '/merges.txt')
  H.check_error(function() tokenizer.from_pretrained(TMP .. '/nowhere') end, 'has neither tokenizer.json nor vocab.json + merges.txt')
  d = dir_with({ ['tokenizer.json'] = '{"model": {"type": "WordPiece"}}' })
  H.check_error(function() tokenizer.from_pretrained(d) end, 'tokenizer.json: model.type is WordPiece; only a BPE model is supported')
  local tj = slurp(DATA .. '/tokenizer.json')
  d = dir_with({ ['tokenizer.json'] = (tj:gsub('"ByteLevel"', '"WhitespaceSplit"', 1)) })
  H.check_error(function() tokenizer.from_pretrained(d) end,
    'tokenizer.json: pre_tokenizer is WhitespaceSplit; only ByteLevel')
  for what, edit in pairs({ ['post_processor is RobertaProcessing'] = { 'post_processor', { type = 'RobertaProcessing' } },
      ['normalizer is NFKC'] = { 'normalizer', { type = 'NFKC' } },
      ['model.byte_fallback is true'] = { 'model', 'byte_fallback', true },
      ['model.end_of_word_suffix is "</w>"'] = { 'model', 'end_of_word_suffix', '</w>' },
      ['model.dropout is 0.1'] = { 'model', 'dropout', 0.1 } }) do
    local doc = json.decode(tj)
    if #edit == 2 then doc[edit[1]] = edit[2] else doc[edit[1]][edit[2]] = edit[3] end
    d = dir_with({ ['tokenizer.json'] = json.encode(doc) })
    H.check_error(function() tokenizer.from_pretrained(d) end, d .. '/tokenizer.json: ' .. what)
  end
  H.check_error(function() tokenizer.from_pretrained(DATA .. '\0/x') end, 'holds a NUL byte (byte ' .. (#DATA + 1) .. ')')
  H.check_error(function() tokenizer.train({ 'a\0b' }, 300) end, 'train: the file "a\\x00b" holds a NUL byte')
  -- A vocabulary without a byte's token cannot encode that byte, and says which.
  d = dir_with({ ['vocab.json'] = '{"a": 0}', ['merges.txt'] = '' })
  local tok = tokenizer.from_pretrained(d)
  H.check_eq(tok:encode('aa')[2], 0)
  H.check_error(function() tok:encode('ab') end, 'byte 0x62 has no token in the vocabulary')
end)

H.test('the trainer: round trip, files that load back, ids as its own tokenizer gives', function()
  local out = TMP .. '/trained'
  assert(os.execute('mkdir -p ' .. H.quote(out)))
  local tok = tokenizer.train({ DATA .. '/corpus.txt' }, 600, { special_tokens = { '<|endoftext|>' }, dir = out })
  local hf = tokenizer.from_pretrained(DATA)
  H.check_eq(tok:vocab_size(), hf:vocab_size(), 'vocab size (the text has too few pairs seen twice for 600)')
  H.check_eq(tok:token_to_id('<|endoftext|>'), 0, 'special tokens first')
  local back = tokenizer.from_pretrained(out)
  for _, c in ipairs(cases) do
    local ids = tok:encode(c.text)
    H.check_eq(tok:decode(ids), c.text, 'trained round trip of ' .. string.format('%q', c.text))
    H.check_eq(ids_str(back:encode(c.text)), ids_str(ids), 'saved and loaded back: ' .. string.format('%q', c.text))
  end
  -- Hugging Face breaks ties the same way, so on this text the merges agree with its own.
  H.check_eq(slurp(out .. '/merges.txt'), MERGES, 'merges.txt as Hugging Face trains it')
  H.check_eq(slurp(out .. '/vocab.json'), VOCAB, 'vocab.json as Hugging Face trains it')
  -- save_pretrained makes its folder, parents too, as model:save_pretrained does.
  local deep = TMP .. '/not/yet/there'
  back:save_pretrained(deep)
  H.check_eq(slurp(deep .. '/vocab.json'), VOCAB, 'save_pretrained into a folder it made')
  H.check_error(function() tokenizer.train({ DATA .. '/corpus.txt' }, 100) end, 'vocab_size must be an integer of at least 256')
  H.check_error(function() tokenizer.train({ TMP .. '/none.txt' }, 300) end, 'cannot read ' .. TMP .. '/none.txt')
end)

-- Encodes text, prints how long it took, checks that against limit seconds and the round trip.
local function timed_round_trip(tok, text, what, limit)
  local t0 = os.clock()
  local ids = tok:encode(text)
  local dt = os.clock() - t0
  print(string.format('encode: %s of %d bytes -> %d ids in %.2f s', what, #text, #ids, dt))
  H.check(dt < limit, string.format('%s of %d bytes took %.1f s', what, #text, dt))
  H.check_eq(tok:decode(ids), text, what .. ': round trip')
end

H.test('long words: the queue gives the ids the scan gives, and no quadratic time', function()
  local bpe = require 'zlua.tokenizer.bpe'
  local corpus = slurp(DATA .. '/corpus.txt')
  local letters = corpus:gsub('[^%a]', '')
  local words = { letters, corpus:gsub('[%s%p]', ''), corpus:gsub('%s', ''), ('ab'):rep(300), ('a'):rep(301),
    (corpus:gsub('%s', ' ')) }
  local long = bpe.LONG
  local by_queue = tokenizer.from_pretrained(DATA)
  bpe.LONG = math.huge
  local by_scan = tokenizer.from_pretrained(DATA)
  for i, w in ipairs(words) do
    H.check_eq(ids_str(by_queue:encode(w)), ids_str(by_scan:encode(w)), 'word ' .. i)
  end
  bpe.LONG = long
  timed_round_trip(by_queue, letters:rep(50), 'one word', 20)
end)

H.test('1 MB of text encodes in seconds', function()
  local tok = tokenizer.from_pretrained(DATA)
  local corpus = slurp(DATA .. '/corpus.txt')
  local parts = {}
  for k = 1, math.ceil(1e6 / #corpus) do parts[k] = corpus .. k .. ' ' end
  timed_round_trip(tok, table.concat(parts), 'text', 30)
end)

os.execute('rm -rf ' .. H.quote(TMP))
H.done()
