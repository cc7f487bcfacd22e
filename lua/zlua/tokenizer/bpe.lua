-- zlua.tokenizer.bpe: byte-pair encoding of one word, by merge rank, over raw bytes; the
-- vocabulary and merges come from zlua.tokenizer.files. Results are cached per word, since
-- text repeats its words and a word's encoding never changes.

local heap = require 'zlua.tokenizer.heap'

local M = {}
M.__index = M

local byte, fmt = string.byte, string.format
local huge = math.huge

-- The cache is dropped whole when it reaches this many words: a bound on memory that costs
-- one re-encoding of the common words, instead of bookkeeping on every hit.
local CACHE_WORDS = 100000

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
  local byte_id = {}
  for b = 0, 255 do byte_id[b] = desc.vocab[string.char(b)] end
  return setmetatable({ vocab = desc.vocab, rank = rank, merged = merged, byte_id = byte_id,
    ignore_merges = desc.ignore_merges, cache = {}, cached = 0 }, M)
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

--- model:word(raw) -> the ids of one pre-tokenized word (a table the caller must not change).
--- Raises when a byte of raw has no token of its own in the vocabulary.
function M:word(raw)
  local ids = self.cache[raw]
  if ids then return ids end
  local whole = self.ignore_merges and self.vocab[raw]
  if whole then
    ids = { whole }
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
  if self.cached >= CACHE_WORDS then
    self.cache, self.cached = {}, 0
  end
  self.cache[raw] = ids
  self.cached = self.cached + 1
  return ids
end

return M
