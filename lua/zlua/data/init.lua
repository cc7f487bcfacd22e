--[[ zlua.data: datasets, samplers and the DataLoader that batches them, in
  PyTorch's shape; sample indices are 1-based, as Lua's are.

  local data = require 'zlua.data'
  local ds = data.TensorDataset(x, y)
  local loader = data.DataLoader(ds, {batch_size = 32, shuffle = true, seed = 0, drop_last = true})
  for epoch = 1, 3 do
    for xb, yb in loader() do ... end
  end

  Across ranks, each rank batches its own share:
  local sampler = data.DistributedSampler(ds, {num_replicas = R, rank = r, seed = 0})
  local loader = data.DataLoader(ds, {batch_size = 32, sampler = sampler})
  for epoch = 0, 9 do sampler:set_epoch(epoch) for xb, yb in loader() do ... end end
]]

local collate = require 'zlua.data.collate'

return {
  Dataset = require 'zlua.data.Dataset',
  TensorDataset = require 'zlua.data.TensorDataset',
  DataLoader = require 'zlua.data.DataLoader',
  SequentialSampler = require 'zlua.data.SequentialSampler',
  RandomSampler = require 'zlua.data.RandomSampler',
  DistributedSampler = require 'zlua.data.DistributedSampler',
  --- data.default_collate(samples): the DataLoader's default collate_fn.
  default_collate = collate.default,
  datasets = require 'zlua.data.datasets',
}
