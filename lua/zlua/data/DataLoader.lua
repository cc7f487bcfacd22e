--[[ zlua.data.DataLoader(dataset [, {batch_size = 1, shuffle = false, seed =,
  drop_last = false, collate_fn =, sampler =}]): batches of a dataset, in the
  order of a sampler.

  local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 64, shuffle = true, seed = 1})
  for epoch = 1, 10 do
    for xb, yb in loader() do ... end        -- the batch's fields, unpacked
  end
  for batch in loader:iter() do ... end      -- the batch as one value
  print(#loader)                             -- batches per pass

  The order: a given sampler's (any object with indices(), a Lua array of
  1-based dataset indices for one pass, and #sampler; shuffle must then be
  false), else a
  RandomSampler (shuffle, seeded by seed when given) or a SequentialSampler.
  Each pass asks the sampler for a new order: with shuffle and a seed, pass e
  (0-based, counting from the loader's creation) is the permutation of
  zl.Generator(seed + e), so the same seed gives the same orders in every
  run and each pass a new one; loader:set_epoch(e) picks the order of the
  next pass (and is forwarded to a DistributedSampler, whose epoch changes
  only that way). A pass's batches take the order batch_size indices at a
  time; the last, shorter batch is dropped with drop_last.

  Batches are made by collate_fn(samples) (default: zlua.data.collate, which
  stacks tensors and numbers and follows tables); with the default collate
  and a dataset that has get_batch(indices) (TensorDataset), the batch is
  gathered by the dataset at once. A batch that is a plain array ({x, y},
  as TensorDataset's) is unpacked by loader(); any other batch (a tensor, a
  table of named fields) comes as one value. ]]

local zl = require 'zlua'
local util = require 'zlua.data.util'
local collate = require 'zlua.data.collate'
local RandomSampler = require 'zlua.data.RandomSampler'
local SequentialSampler = require 'zlua.data.SequentialSampler'

local fmt, unpack, move = string.format, table.unpack, table.move

local DataLoader = util.class('DataLoader')

local known = { batch_size = true, shuffle = true, seed = true, drop_last = true, collate_fn = true,
                sampler = true }

function DataLoader:__init(dataset, opts)
  local C = 'DataLoader'
  local o = util.options(C, opts, known)
  if type(dataset) == 'number' then
    zl.raise('DataLoader: expected a dataset, got a number (a sampler takes a sample count)')
  end
  self.dataset = util.check_source(C, dataset)
  self.batch_size = util.integer(C, 'batch_size', o.batch_size or 1, 1)
  self.drop_last = util.boolean(C, 'drop_last', o.drop_last, false)
  local shuffle = util.boolean(C, 'shuffle', o.shuffle, false)
  if o.collate_fn ~= nil and type(o.collate_fn) ~= 'function' then
    zl.raise(fmt('DataLoader: collate_fn must be a function, got %s', type(o.collate_fn)))
  end
  self.collate_fn = o.collate_fn or collate.default
  if o.sampler ~= nil then
    if shuffle then zl.raise('DataLoader: sampler and shuffle = true cannot be combined (the sampler sets the order)') end
    if o.seed ~= nil then zl.raise('DataLoader: seed applies to shuffle; seed the sampler instead') end
    local s = o.sampler
    local mt = getmetatable(s)
    if type(s) ~= 'table' or type(s.indices) ~= 'function' or type(mt) ~= 'table' or not mt.__len then
      zl.raise(fmt('DataLoader: sampler must be an object with indices() and a length (#sampler), got %s',
                   util.show(s)))
    end
    self.sampler = s
  elseif shuffle then
    self.sampler = RandomSampler(dataset, { seed = o.seed })
  else
    if o.seed ~= nil then zl.raise('DataLoader: seed needs shuffle = true') end
    self.sampler = SequentialSampler(dataset)
  end
end

--- #loader: the number of batches in a pass.
function DataLoader:__len()
  local n, b = #self.sampler, self.batch_size
  if self.drop_last then return n // b end
  return (n + b - 1) // b
end

--- loader:set_epoch(e): the epoch of the next pass, forwarded to the sampler.
function DataLoader:set_epoch(e)
  util.integer('DataLoader', 'epoch', e, 0)
  if type(self.sampler.set_epoch) == 'function' then self.sampler:set_epoch(e) end
  -- A resumed position belongs to its own epoch: another epoch starts afresh.
  if self.resume and self.resume.epoch ~= e then self.resume = nil end
end

--- loader:state_dict(): where the current pass stands, for checkpoints:
--- {epoch = the sampler's epoch when the pass began, batches = batches given}.
--- A finished pass reads as the start of the next one.
function DataLoader:state_dict()
  local epoch = self.pass_epoch
  local batches = self.consumed or 0
  if epoch == nil or batches >= #self then
    epoch, batches = self.sampler.epoch, 0
  end
  return { epoch = epoch, batches = batches }
end

--- loader:load_state_dict(sd): the next pass is epoch sd.epoch's, starting
--- after its first sd.batches batches (skipped without being read).
function DataLoader:load_state_dict(sd)
  if type(sd) ~= 'table' then zl.raise('DataLoader: load_state_dict needs a table {epoch=, batches=}') end
  local batches = util.integer('DataLoader', 'batches', sd.batches or 0, 0)
  if sd.epoch ~= nil then
    local e = util.integer('DataLoader', 'epoch', sd.epoch, 0)
    if type(self.sampler.set_epoch) == 'function' then self.sampler:set_epoch(e) end
    self.resume = { epoch = e, batches = batches }
  else
    self.resume = { batches = batches }
  end
end

local function fetch(self, idx)
  local ds = self.dataset
  if self.collate_fn == collate.default and type(ds) == 'table' and type(ds.get_batch) == 'function' then
    return ds:get_batch(idx)
  end
  local samples = {}
  for k = 1, #idx do
    local s = ds[idx[k]]
    if s == nil then
      zl.raise(fmt('DataLoader: sample %s of the dataset is nil (the dataset has %d samples)',
                   tostring(idx[k]), #ds))
    end
    samples[k] = s
  end
  return self.collate_fn(samples)
end

--- loader:iter(): an iterator over the batches of a new pass, each batch one value.
function DataLoader:iter()
  self.pass_epoch = self.sampler.epoch
  local order = self.sampler:indices()
  local n, b = #order, self.batch_size
  local stop = self.drop_last and n - n % b or n
  local skip = self.resume and self.resume.batches or 0
  self.resume = nil
  local pos = math.min(skip * b, stop)
  self.consumed = skip
  return function()
    if pos >= stop then return nil end
    local last = pos + b < stop and pos + b or stop
    local idx = move(order, pos + 1, last, 1, {})
    pos = last
    self.consumed = self.consumed + 1
    return fetch(self, idx)
  end
end

-- A plain array batch: its entries as values; anything else as itself.
local function spread(batch)
  if type(batch) ~= 'table' or getmetatable(batch) ~= nil then return batch end
  local n, count = #batch, 0
  for _ in pairs(batch) do count = count + 1 end
  if n == 0 or count ~= n then return batch end
  return unpack(batch, 1, n)
end

--- loader(): an iterator over the batches of a new pass, each batch's fields
--- unpacked: `for x, y in loader() do`.
function DataLoader:__call()
  local it = self:iter()
  return function()
    local batch = it()
    if batch == nil then return nil end
    return spread(batch)
  end
end

function DataLoader:__tostring()
  return fmt('DataLoader(%d batches of %d%s)', #self, self.batch_size, self.drop_last and ', drop_last' or '')
end

return DataLoader
