-- zlua.tokenizer.bpe: byte-pair encoding of one word, by merge rank, over raw bytes, or over
-- characters for a vocabulary of characters (SentencePiece's BPE: a character it lacks goes as
-- its bytes' <0xXX> tokens, or as the unknown token); the vocabulary and merges come from
-- zlua.tokenizer.files. Results are cached per word, since text repeats its words and a
-- word's encoding never changes.

local heap = require 'zlua.tokenizer.heap'

local M = {}
M.__index = M

local byte, fmt, sub = string.byte, string.format, string.sub
local huge = math.huge

-- The cache is dropped whole when it reaches this many words: a bound on memory that costs
-- one re-encoding of the common words, instead of bookkeeping on every hit. Longer words (a
-- whole line, where there is no pre-tokenizer) are not kept.
local CACHE_WORDS = 100000
local CACHE_LONGEST = 256

--- bpe.new(desc) -> the model, from a description as zlua.tokenizer.files returns (vocab
--- { [raw] = id }, merges { {left id, right id, merged id} } in rank order, ignore_merges).
function M.new(desc)
  local rank, merged = {}, {}
  for r, m in ipairs(desc.merges) do
    local row = rank[m[1]]
    if not row then
      row = {}
      rank[m[1]] = row
    end
    -- A pair listed twice keeps its first rank, as the rank-ordered file means.
    if not row[m[2]] then
      row[m[2]] = r
      merged[r] = m[3]
    end
  end
  -- A byte's token: a byte-level vocabulary's own; for characters its <0xXX> token, and
  -- none without byte_fallback.
  local byte_id = {}
  for b = 0, 255 do
    if not desc.chars then
      byte_id[b] = desc.vocab[string.char(b)]
    elseif desc.byte_fallback then
      byte_id[b] = desc.vocab[fmt('<0x%02X>', b)]
    end
  end
  return setmetatable({ vocab = desc.vocab, rank = rank, merged = merged, byte_id = byte_id,
    ignore_merges = desc.ignore_merges, chars = desc.chars, unk = desc.unk, fuse_unk = desc.fuse_unk,
    cache = {}, cached = 0 }, M)
end

--- bpe.merge_pair(ids, a, b, c [, from]) -> a new sequence: ids with every (a, b) pair at or
--- after position from (default 1) replaced by c, left to right, each id in one pair at most.
--- The one step of both encoding and training.
function M.merge_pair(ids, a, b, c, from)
  from = from or 1
  local out, n = {}, #ids
  for j = 1, from - 1 do out[j] = ids[j] end
  local k = from
  while k <= n do
    if k < n and ids[k] == a and ids[k + 1] == b then
      out[#out + 1] = c
      k = k + 2
    else
      out[#out + 1] = ids[k]
      k = k + 1
    end
  end
  return out
end
local merge_pair = M.merge_pair

-- ids (one per byte to start) merged by rank: each round takes the lowest-ranked adjacent
-- pair and merges every occurrence of it, left to right.
local function merge(ids, rank, merged)
  while #ids > 1 do
    local best, at = huge, nil
    for k = 1, #ids - 1 do
      local row = rank[ids[k]]
      local r = row and row[ids[k + 1]]
      if r and r < best then best, at = r, k end
    end
    if not at then break end
    -- at is the leftmost occurrence: an earlier one would have been found first.
    ids = merge_pair(ids, ids[at], ids[at + 1], merged[best], at)
  end
  return ids
end

-- The same merges for a long word, where a scan per round would be quadratic (a megabyte
-- without a space must not take hours): a queue of adjacent pairs by (rank, position) over
-- a linked list of symbols. The lowest rank at the leftmost place goes first, so every
-- occurrence of a pair is merged left to right before any higher rank, as in merge().
local function merge_long(ids, rank, merged)
  local n = #ids
  local nxt, prv = {}, {}
  local queue = heap.new()
  local function offer(k, j)
    local row = rank[ids[k]]
    local r = row and row[ids[j]]
    if r then heap.push(queue, r, k) end
  end
  for k = 1, n do nxt[k], prv[k] = k + 1, k - 1 end
  nxt[n] = 0
  for k = 1, n - 1 do offer(k, k + 1) end
  while true do
    local r, k = heap.pop(queue)
    if not r then break end
    local j = ids[k] and nxt[k]
    local row = j and j ~= 0 and rank[ids[k]]
    -- A queued pair is stale once either symbol has been merged away or changed.
    if row and row[ids[j]] == r then
      ids[k], ids[j] = merged[r], false
      nxt[k] = nxt[j]
      if nxt[j] ~= 0 then prv[nxt[j]] = k end
      if prv[k] > 0 then offer(prv[k], k) end
      if nxt[k] ~= 0 then offer(k, nxt[k]) end
    end
  end
  local out = {}
  for k = 1, n do
    if ids[k] then out[#out + 1] = ids[k] end
  end
  return out
end

--- bpe.LONG: words longer than this many bytes are merged through a queue (merge_long); both
--- ways give the same ids, the scan is faster for short words.
M.LONG = 48

-- The last byte of the character that starts at p: a valid UTF-8 sequence, else the byte
-- alone (bytes that are not UTF-8 go one by one, and decode back).
local function char_end(s, p)
  local c = byte(s, p)
  local len = c < 0x80 and 1 or (c >= 0xC2 and c < 0xE0) and 2 or (c >= 0xE0 and c < 0xF0) and 3
    or (c >= 0xF0 and c < 0xF5) and 4 or 1
  if len > 1 and (p + len - 1 > #s or utf8.len(s, p, p + len - 1) ~= 1) then return p end
  return p + len - 1
end

-- The symbols a word of characters starts from: each character's token, else its bytes'
-- <0xXX> tokens (byte_fallback), else the unknown token, a run of unknown characters one
-- token with fuse_unk, as Hugging Face's BPE does.
function M:_char_symbols(raw)
  local ids, vocab, byte_id, unk = {}, self.vocab, self.byte_id, self.unk
  local p, n, unk_run = 1, #raw, false
  while p <= n do
    local q = char_end(raw, p)
    local id = vocab[sub(raw, p, q)]
    local fallback = not id
    for k = p, fallback and q or 0 do fallback = fallback and byte_id[byte(raw, k)] ~= nil end
    if id then
      ids[#ids + 1], unk_run = id, false
    elseif fallback then
      for k = p, q do ids[#ids + 1] = byte_id[byte(raw, k)] end
      unk_run = false
    elseif unk then
      if not (self.fuse_unk and unk_run) then ids[#ids + 1] = unk end
      unk_run = true
    else
      error(fmt('tokenizer: the character "%s" has no token, no byte tokens and there is no unk_token, so it '
        .. 'cannot be encoded', sub(raw, p, q)), 0)
    end
    p = q + 1
  end
  return ids
end

--- model:word(raw) -> the ids of one pre-tokenized word (a table the caller must not change).
--- Raises when a byte of raw has no token of its own in a byte-level vocabulary.
function M:word(raw)
  local ids = self.cache[raw]
  if ids then return ids end
  local whole = self.ignore_merges and self.vocab[raw]
  if whole then
    ids = { whole }
  elseif self.chars then
    ids = self:_char_symbols(raw)
    ids = (#ids > M.LONG and merge_long or merge)(ids, self.rank, self.merged)
  else
    ids = {}
    local byte_id = self.byte_id
    for p = 1, #raw do
      local b = byte(raw, p)
      local id = byte_id[b]
      if not id then
        error(fmt('tokenizer: byte 0x%02X has no token in the vocabulary, so it cannot be encoded '
          .. '(a byte-level vocabulary holds all 256)', b), 0)
      end
      ids[p] = id
    end
    ids = (#ids > M.LONG and merge_long or merge)(ids, self.rank, self.merged)
  end
  if #raw <= CACHE_LONGEST then
    if self.cached >= CACHE_WORDS then
      self.cache, self.cached = {}, 0
    end
    self.cache[raw] = ids
    self.cached = self.cached + 1
  end
  return ids
end

return M
