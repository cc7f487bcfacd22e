-- zlua.tokenizer.train: learning a byte-level BPE vocabulary from text files, as Hugging Face's
-- ByteLevelBPETokenizer.train does: GPT-2's pre-tokenization of each line, then merge the most
-- frequent adjacent pair until the vocabulary is full.
--
-- Ids: the special tokens first (in the order given), then the 256 byte symbols in the order
-- of their byte-level characters' code points, then each merge's new token. A tie between
-- pairs of equal count goes to the pair whose (left id, right id) is smallest; this is also
-- Hugging Face's rule, so on the same text the merges usually agree, but that is not promised.

local bpe = require 'zlua.tokenizer.bpe'
local bytes = require 'zlua.tokenizer.bytes'
local files = require 'zlua.tokenizer.files'
local heap = require 'zlua.tokenizer.heap'
local pretokenize = require 'zlua.tokenizer.pretokenize'
local Tokenizer = require 'zlua.tokenizer.Tokenizer'

local fmt = string.format
local SHIFT = 0x1000000 -- pair key = left * SHIFT + right: ids stay below 2^24

-- Counts of each pre-tokenized word of the files, lines read with their "\n" as Hugging Face's
-- trainer reads them.
local function count_words(paths, add_prefix_space)
  local counts = {}
  local function add(w) counts[w] = (counts[w] or 0) + 1 end
  for _, path in ipairs(paths) do
    local f, err = io.open(path, 'rb')
    if not f then error('tokenizer.train: cannot read ' .. (err or path), 0) end
    for line in f:lines('L') do
      if add_prefix_space and line:byte(1) ~= 32 then line = ' ' .. line end
      pretokenize.each(line, add)
    end
    f:close()
  end
  return counts
end

local function check_args(paths, vocab_size, opts)
  if type(paths) == 'string' then paths = { paths } end
  if type(paths) ~= 'table' or #paths == 0 then
    error('tokenizer.train: files must be a path or a non-empty list of paths', 3)
  end
  for _, p in ipairs(paths) do files.check_path(p, 'train: the file') end
  opts = opts or {}
  if opts.dir ~= nil then files.check_path(opts.dir, 'train: opts.dir') end
  local specials = opts.special_tokens or {}
  if math.type(vocab_size) ~= 'integer' or vocab_size < 256 + #specials then
    error(fmt('tokenizer.train: vocab_size must be an integer of at least %d (the 256 byte tokens '
      .. 'and %d special tokens), got %s', 256 + #specials, #specials, tostring(vocab_size)), 3)
  end
  local min_frequency = opts.min_frequency or 2
  if math.type(min_frequency) ~= 'integer' or min_frequency < 1 then
    error('tokenizer.train: opts.min_frequency must be a positive integer, got ' .. tostring(min_frequency), 3)
  end
  return paths, specials, min_frequency, opts.add_prefix_space == true
end

--- train(files, vocab_size [, opts]) -> a Tokenizer (zlua.tokenizer.Tokenizer).
--- files: a path or a list of paths of text. vocab_size counts every token: special, the 256
--- bytes and the merged. opts: special_tokens (list of strings, default none), min_frequency
--- (a pair seen fewer times is never merged; default 2), add_prefix_space (default false),
--- dir (also save vocab.json and merges.txt there).
return function(paths, vocab_size, opts)
  local specials, min_frequency, add_prefix_space
  paths, specials, min_frequency, add_prefix_space = check_args(paths, vocab_size, opts)
  local tokens, vocab, added = {}, {}, {}
  for i, s in ipairs(specials) do
    tokens[i - 1], vocab[s] = s, i - 1
    added[i] = { content = s, id = i - 1, special = true }
  end
  local alphabet = {}
  for b = 0, 255 do alphabet[b + 1] = string.char(b) end
  table.sort(alphabet, function(x, y) return utf8.codepoint(bytes.encode(x)) < utf8.codepoint(bytes.encode(y)) end)
  for i, raw in ipairs(alphabet) do
    local id = #specials + i - 1
    tokens[id], vocab[raw] = raw, id
  end

  -- words[w] = the word's symbol ids; freq[w] its count; pairs[key] = live count;
  -- where[key] = set of words that held the pair when it was counted.
  local words, freq, pairs, where = {}, {}, {}, {}
  for w, c in next, count_words(paths, add_prefix_space) do
    local ids = {}
    for p = 1, #w do ids[p] = vocab[w:sub(p, p)] end
    local wi = #words + 1
    words[wi], freq[wi] = ids, c
  end
  local function tally(wi, sign)
    local ids, c = words[wi], freq[wi] * sign
    for k = 1, #ids - 1 do
      local key = ids[k] * SHIFT + ids[k + 1]
      pairs[key] = (pairs[key] or 0) + c
      if sign > 0 then
        local set = where[key]
        if not set then
          set = {}
          where[key] = set
        end
        set[wi] = true
      end
    end
  end
  for wi = 1, #words do tally(wi, 1) end
  -- The queue holds (-count, pair key): the most frequent pair first, then the smallest key.
  -- Counts go stale as merges change them; the loop re-checks the top against the live
  -- count, as Hugging Face's trainer does.
  local queue = heap.new()
  for key, c in next, pairs do heap.push(queue, -c, key) end

  local merges = {}
  local size = #specials + 256
  while size < vocab_size do
    local neg, key = heap.pop(queue)
    if not neg then break end
    local count, live = -neg, pairs[key] or 0
    if live ~= count then
      if live > 0 then heap.push(queue, -live, key) end
    else
      if count < min_frequency then break end
      local a, b = key // SHIFT, key % SHIFT
      local text = tokens[a] .. tokens[b]
      local c = vocab[text]
      if not c then
        c = size
        tokens[c], vocab[text] = text, c
        size = size + 1
      end
      merges[#merges + 1] = { a, b, c }
      local before = {}
      for wi in next, where[key] do
        tally(wi, -1)
        words[wi] = bpe.merge_pair(words[wi], a, b, c)
        tally(wi, 1)
        before[wi] = true
      end
      where[key] = nil
      pairs[key] = nil
      -- The pairs that now hold the new token are new counts for the heap.
      local pushed = {}
      for wi in next, before do
        local ids = words[wi]
        for k = 1, #ids - 1 do
          if ids[k] == c or ids[k + 1] == c then
            local pk = ids[k] * SHIFT + ids[k + 1]
            if not pushed[pk] and (pairs[pk] or 0) > 0 then
              pushed[pk] = true
              heap.push(queue, -pairs[pk], pk)
            end
          end
        end
      end
    end
  end

  local tok = Tokenizer.new({ vocab = vocab, merges = merges, added = added,
    add_prefix_space = add_prefix_space, ignore_merges = false })
  if opts and opts.dir then tok:save_pretrained(opts.dir) end
  return tok
end
