--[[ zlua.data.RandomSampler(dataset_or_n [, {seed =, generator =}]): a new
  random order of 1..n each pass, from the engine's counter-based generator.

  Design: with a seed, the order of epoch e is a permutation drawn from a
  fresh zl.Generator(seed + e), DistributedSampler's rule, so an order
  depends only on (seed, epoch): the same every run, a different one each
  epoch, and a resumed run gets epoch e's order back with set_epoch(e). Each
  call of indices() draws the current epoch's order and advances the epoch.
  With a generator the order is drawn from it and its state advances (the
  caller owns its reproducibility); with neither, from the default generator
  (zl.manual_seed). ]]

local zl = require 'zlua'
local util = require 'zlua.data.util'

local fmt = string.format

local RandomSampler = util.class('RandomSampler')

local known = { seed = true, generator = true }

function RandomSampler:__init(source, opts)
  local o = util.options('RandomSampler', opts, known)
  self.source = util.check_source('RandomSampler', source)
  if o.seed ~= nil and o.generator ~= nil then
    zl.raise('RandomSampler: give a seed or a generator, not both')
  end
  if o.seed ~= nil then self.seed = util.integer('RandomSampler', 'seed', o.seed) end
  if o.generator ~= nil then
    if getmetatable(o.generator) ~= zl.core.Generator then
      zl.raise(fmt('RandomSampler: generator must be a zl.Generator, got %s', type(o.generator)))
    end
    self.generator = o.generator
  end
  self.epoch = 0
end

function RandomSampler:__len() return util.size_of(self.source) end

--- sampler:set_epoch(e): the epoch whose order the next pass draws (with a seed).
function RandomSampler:set_epoch(e)
  self.epoch = util.integer('RandomSampler', 'epoch', e, 0)
end

function RandomSampler:indices()
  local gen = self.generator
  if self.seed then gen = zl.Generator(self.seed + self.epoch) end
  self.epoch = self.epoch + 1
  return util.permutation(util.size_of(self.source), gen)
end

return RandomSampler
