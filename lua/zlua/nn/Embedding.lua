--[[ zlua.nn.Embedding(num_embeddings, embedding_dim): a table of vectors
  weight [n, dim] (N(0, 1) as PyTorch initialises it), looked up by 0-based
  i64 ids of any shape: [...] -> [..., dim]. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Embedding = Module:extend('Embedding')

function Embedding:__init(num_embeddings, embedding_dim)
  self.num_embeddings = check.positive_int('Embedding', 'num_embeddings', num_embeddings)
  self.embedding_dim = check.positive_int('Embedding', 'embedding_dim', embedding_dim)
  self.weight = zl.randn(num_embeddings, embedding_dim)
end

function Embedding:forward(idx)
  return zl.embedding(idx, self.weight)
end

function Embedding:extra_repr()
  return string.format('%d, %d', self.num_embeddings, self.embedding_dim)
end

return Embedding
