--[[ zlua.data.collate: the default collate_fn of a DataLoader, turning a list
  of samples into one batch with the samples' structure:
    tensors of one shape  -> zl.stack(samples): [B, ...]
    numbers               -> a tensor [B]: i64 when all are integers, else f32
    booleans              -> a bool tensor [B]
    plain tables          -> a table of the same keys, each collated in turn
                             ({x, y} samples give {X, Y}; {img =, label =} give
                             {img = IMG, label = LABEL}), to any depth
    anything else         -> the list of values as they are (strings, objects)
  Samples that differ in structure, type or shape are an error naming the
  field and the sample. ]]

local zl = require 'zlua'

local fmt, concat, sort = string.format, table.concat, table.sort
local is_tensor, math_type = zl.is_tensor, math.type

-- "sample 2" or "field .x[1] of sample 2".
local function where(path, i)
  if path == '' then return 'sample ' .. i end
  return 'field ' .. path .. ' of sample ' .. i
end

local function key_path(path, k)
  if type(k) == 'string' and k:match('^[%a_][%w_]*$') then return path .. '.' .. k end
  return path .. '[' .. (type(k) == 'string' and fmt('%q', k) or tostring(k)) .. ']'
end

local function kind(v)
  if is_tensor(v) then return 'tensor' end
  if type(v) == 'table' and getmetatable(v) == nil then return 'table' end
  return type(v)
end

local function mismatch(path, i, what, expected)
  zl.raise(fmt('collate: %s is %s, expected %s (as in sample 1)', where(path, i), what, expected))
end

local function shape_str(t) return '{' .. concat(t:shape(), ', ') .. '}' end

local collate

local function collate_tensors(samples, path)
  local first = samples[1]
  local nd, shape = first:dim(), first:shape()
  for i = 2, #samples do
    local t = samples[i]
    local same = t:dim() == nd
    if same then
      local s = t:shape()
      for d = 1, nd do if s[d] ~= shape[d] then same = false break end end
    end
    if not same then mismatch(path, i, 'a tensor of shape ' .. shape_str(t), 'shape ' .. shape_str(first)) end
  end
  return zl.stack(samples)
end

local function collate_tables(samples, path)
  local first = samples[1]
  local keys = {}
  for k in pairs(first) do keys[#keys + 1] = k end
  -- A stable key order, so the same samples always fail on the same field.
  sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == 'number' or type(a) == 'string') then return a < b end
    return type(a) < type(b)
  end)
  for i = 2, #samples do
    local s, count = samples[i], 0
    for _ in pairs(s) do count = count + 1 end
    for _, k in ipairs(keys) do
      if s[k] == nil then
        zl.raise(fmt('collate: %s is missing (sample 1 has it)', where(key_path(path, k), i)))
      end
    end
    if count ~= #keys then
      zl.raise(fmt('collate: %s has %d entries, expected %d (as in sample 1)', where(path, i), count, #keys))
    end
  end
  local out = {}
  for _, k in ipairs(keys) do
    local column = {}
    for i = 1, #samples do column[i] = samples[i][k] end
    out[k] = collate(column, key_path(path, k))
  end
  return out
end

-- The samples (a non-empty list) as one batch; path names the field for errors.
function collate(samples, path)
  local k1 = kind(samples[1])
  for i = 2, #samples do
    local ki = kind(samples[i])
    if ki ~= k1 then mismatch(path, i, 'a ' .. ki, 'a ' .. k1) end
  end
  if k1 == 'tensor' then return collate_tensors(samples, path) end
  if k1 == 'table' then return collate_tables(samples, path) end
  if k1 == 'number' then
    for i = 1, #samples do
      if math_type(samples[i]) ~= 'integer' then return zl.tensor(samples, 'f32') end
    end
    return zl.tensor(samples, 'i64')
  end
  if k1 == 'boolean' then return zl.tensor(samples, 'bool') end
  local copy = {}
  for i = 1, #samples do copy[i] = samples[i] end
  return copy
end

--- collate.default(samples): the batch of a non-empty list of samples.
local function default(samples)
  if type(samples) ~= 'table' or samples[1] == nil then
    zl.raise('collate: expected a non-empty list of samples')
  end
  return collate(samples, '')
end

return { default = default }
