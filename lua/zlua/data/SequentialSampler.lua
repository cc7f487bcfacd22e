--[[ zlua.data.SequentialSampler(dataset_or_n): the indices 1..n in order,
  every pass. A sampler gives a DataLoader the order of one pass through
  sampler:indices() (a Lua array of 1-based dataset indices) and its length
  through #sampler. ]]

local util = require 'zlua.data.util'

local SequentialSampler = util.class('SequentialSampler')

function SequentialSampler:__init(source)
  self.source = util.check_source('SequentialSampler', source)
end

function SequentialSampler:__len() return util.size_of(self.source) end

function SequentialSampler:indices() return util.range(util.size_of(self.source)) end

--- set_epoch(e) is accepted, and changes nothing, so a loader can forward it
--- to any sampler.
function SequentialSampler:set_epoch() end

return SequentialSampler
