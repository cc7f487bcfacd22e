--[[ zlua.data.DistributedSampler(dataset_or_n [, {num_replicas =, rank =,
  shuffle = true, seed = 0, drop_last = false}]): the share of one rank, as
  PyTorch's DistributedSampler takes it.

  Each pass: the order of 1..N (a permutation from zl.Generator(seed + epoch)
  when shuffling, else 1..N) is padded by repeating its first indices up to
  R * ceil(N / R) (with drop_last: cut to R * floor(N / R)), and rank r
  (0-based, as ranks are) takes positions r, r + R, r + 2R, ... (0-based) of
  it. So every rank gets the same count, the ranks together cover every
  index, and only the padding repeats. The epoch changes only by set_epoch:
  call sampler:set_epoch(epoch) before each epoch, as in PyTorch, or the
  order repeats. num_replicas and rank default to the world of zlua.dist
  when a script has loaded it, else to one replica of rank 0. ]]

local zl = require 'zlua'
local util = require 'zlua.data.util'

local fmt = string.format

local DistributedSampler = util.class('DistributedSampler')

local known = { num_replicas = true, rank = true, shuffle = true, seed = true, drop_last = true }

-- The world size and rank of zlua.dist, when it is loaded and says them.
local function world()
  local dist = package.loaded['zlua.dist']
  if type(dist) == 'table' and type(dist.get_world_size) == 'function' and type(dist.get_rank) == 'function' then
    return dist.get_world_size(), dist.get_rank()
  end
  return 1, 0
end

function DistributedSampler:__init(source, opts)
  local C = 'DistributedSampler'
  local o = util.options(C, opts, known)
  self.source = util.check_source(C, source)
  local size, rank = world()
  self.num_replicas = util.integer(C, 'num_replicas', o.num_replicas or size, 1)
  self.rank = util.integer(C, 'rank', o.rank or rank, 0)
  if self.rank >= self.num_replicas then
    zl.raise(fmt('%s: rank %d is out of range for %d replicas (expected 0..%d)',
                 C, self.rank, self.num_replicas, self.num_replicas - 1))
  end
  self.shuffle = util.boolean(C, 'shuffle', o.shuffle, true)
  self.seed = util.integer(C, 'seed', o.seed or 0)
  self.drop_last = util.boolean(C, 'drop_last', o.drop_last, false)
  self.epoch = 0
end

--- The number of samples each rank gets per pass.
function DistributedSampler:__len()
  local n, r = util.size_of(self.source), self.num_replicas
  if self.drop_last then return n // r end
  return (n + r - 1) // r
end

function DistributedSampler:set_epoch(e)
  self.epoch = util.integer('DistributedSampler', 'epoch', e, 0)
end

function DistributedSampler:indices()
  local n, r = util.size_of(self.source), self.num_replicas
  local order
  if self.shuffle then
    order = util.permutation(n, zl.Generator(self.seed + self.epoch))
  else
    order = util.range(n)
  end
  local total = #self * r
  -- Padding cycles through the order, so it holds even when it is longer than N.
  for k = n + 1, total do order[k] = order[(k - 1) % n + 1] end
  local mine = {}
  for k = self.rank + 1, total, r do mine[#mine + 1] = order[k] end
  return mine
end

return DistributedSampler
