--[[ zlua.nn.Embedding(num_embeddings, embedding_dim): a table of vectors
  weight [n, dim] (N(0, 1) as PyTorch initialises it), looked up by 0-based
  i64 ids of any shape: [...] -> [..., dim]. `output_dtype` (nil: the
  weight's) is the dtype of what it gives: the engine sets 'f32' for a bf16
  model on a CPU without bf16 dot products (zlua.engine.precision). ]]

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
  local y = zl.embedding(idx, self.weight)
  if self.output_dtype and y:dtype() ~= self.output_dtype then y = y:to(self.output_dtype) end
  return y
end

function Embedding:extra_repr()
  return string.format('%d, %d', self.num_embeddings, self.embedding_dim)
end

return Embedding
