--[[ zlua.nn.Embedding(num_embeddings, embedding_dim [, {padding_idx = nil}]):
  a table of vectors weight [n, dim] (N(0, 1) as PyTorch initialises it),
  looked up by 0-based i64 ids of any shape: [...] -> [..., dim]. Row
  padding_idx (0-based; negative counts from the end) starts at zeros and
  gets no gradient, as PyTorch's. `output_dtype` (nil: the weight's) is the
  dtype of what it gives: the engine sets 'f32' for a bf16 model on a CPU
  without bf16 dot products (zlua.engine.precision). ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local Embedding = Module:extend('Embedding')

function Embedding:__init(num_embeddings, embedding_dim, opts)
  local o = check.options('Embedding', opts, { padding_idx = true })
  self.num_embeddings = check.positive_int('Embedding', 'num_embeddings', num_embeddings)
  self.embedding_dim = check.positive_int('Embedding', 'embedding_dim', embedding_dim)
  local w = zl.randn(num_embeddings, embedding_dim)
  if o.padding_idx ~= nil then
    local p = math.tointeger(o.padding_idx)
    if not p or p < -num_embeddings or p >= num_embeddings then
      check.error(string.format('Embedding: padding_idx must be an integer in %d..%d, got %s', -num_embeddings,
                                num_embeddings - 1, tostring(o.padding_idx)))
    end
    if p < 0 then p = p + num_embeddings end
    self.padding_idx = p
    w:select(1, p + 1):zero_()
  end
  self.weight = w
end

function Embedding:forward(idx)
  local y = zl.embedding(idx, self.weight, self.padding_idx and { padding_idx = self.padding_idx })
  if self.output_dtype and y:dtype() ~= self.output_dtype then y = y:to(self.output_dtype) end
  return y
end

function Embedding:extra_repr()
  local s = string.format('%d, %d', self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  return s
end

return Embedding
