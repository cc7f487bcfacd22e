--[[ zlua.data.Dataset: the base of map-style datasets. A DataLoader needs only
  #ds (the number of samples) and ds[i] (sample i, 1-based), so a plain Lua
  array of samples is a dataset too; this class turns two methods into those
  operators:

  local Squares = data.Dataset:extend('Squares')
  function Squares:__init(n) self.n = n end
  function Squares:len() return self.n end
  function Squares:get(i) return { zl.tensor{i}, i * i } end
  local ds = Squares(10)              -- #ds == 10, ds[3] is { tensor{3}, 9 }

  A subclass may also define get_batch(indices) returning the collated batch
  of those samples at once; the DataLoader uses it in place of get and the
  default collate (TensorDataset does, with one index_select per tensor). ]]

local zl = require 'zlua'
local util = require 'zlua.data.util'

local fmt = string.format

local Dataset = util.class('Dataset')

-- Integer keys are samples; any other key is a method or field of the class.
function Dataset.__index(self, k)
  local cls = getmetatable(self)
  if type(k) == 'number' then return cls.get(self, k) end
  return cls[k]
end

function Dataset.__len(self) return self:len() end

function Dataset.__tostring(self)
  return fmt('%s(%d samples)', getmetatable(self).__name, #self)
end

function Dataset:len()
  zl.raise(fmt('%s: len() is not implemented (define %s:len())',
               getmetatable(self).__name, getmetatable(self).__name))
end

function Dataset:get()
  zl.raise(fmt('%s: get(i) is not implemented (define %s:get(i))',
               getmetatable(self).__name, getmetatable(self).__name))
end

return Dataset
