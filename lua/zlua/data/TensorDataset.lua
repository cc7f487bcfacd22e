--[[ zlua.data.TensorDataset(t1, t2, ...): samples are rows of tensors that
  share their first dimension. ds[i] is { t1[i], t2[i], ... } (1-based i; each
  row a view, a 0-d tensor for a 1-d input), so `for x, y in loader()` gets
  batches of the inputs and the targets:

  local ds = data.TensorDataset(images, labels)   -- [N, ...] and [N]
  local x, y = table.unpack(ds[1])

  get_batch gathers a whole batch with one index_select per tensor, the same
  values the default collate would stack from the rows. ]]

local zl = require 'zlua'
local Dataset = require 'zlua.data.Dataset'

local fmt, concat, tointeger = string.format, table.concat, math.tointeger

local TensorDataset = Dataset:extend('TensorDataset')

function TensorDataset:__init(...)
  local n = select('#', ...)
  if n == 0 then zl.raise('TensorDataset: expected at least one tensor') end
  local tensors = { ... }
  local rows
  for k = 1, n do
    local t = tensors[k]
    if not zl.is_tensor(t) then
      zl.raise(fmt('TensorDataset: argument %d is a %s, expected a tensor', k, type(t)))
    end
    if t:dim() == 0 then
      zl.raise(fmt('TensorDataset: tensor %d is 0-d, expected a first dimension to index', k))
    end
    local r = t:size(1)
    rows = rows or r
    if r ~= rows then
      zl.raise(fmt('TensorDataset: tensor %d has %d rows (shape {%s}), expected %d as tensor 1',
                   k, r, concat(t:shape(), ', '), rows))
    end
  end
  self.tensors = tensors
  self.n = rows
end

function TensorDataset:len() return self.n end

local function check_index(self, i)
  local k = tointeger(i)
  if not k or k < 1 or k > self.n then
    zl.raise(fmt('TensorDataset: index %s is out of range (expected 1..%d)', tostring(i), self.n))
  end
  return k
end

function TensorDataset:get(i)
  i = check_index(self, i)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t:select(1, i) end
  return out
end

--- ds:get_batch(indices): { t1 rows, t2 rows, ... } for a Lua array of
--- 1-based indices, each a new tensor [#indices, ...].
function TensorDataset:get_batch(indices)
  local ids = {}
  for k = 1, #indices do ids[k] = check_index(self, indices[k]) - 1 end
  local idx = zl.tensor(ids, 'i64')
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t:index_select(1, idx) end
  return out
end

return TensorDataset
