--[[ zlua.engine.wire: Lua numbers exchanged between ranks exactly. Tensors
  have no f64 and integers reach Lua through doubles, so each number travels
  as the two 32-bit halves of its 8 bytes in an i32 tensor. ]]

local zl = require 'zlua'

local M = {}

--- Every rank's list of n numbers (floats, or integers kept as integers),
--- in rank order: out[r + 1][i].
function M.all_gather(dist, world, values)
  local n = #values
  local words = {}
  for i, v in ipairs(values) do
    local bytes = math.type(v) == 'integer' and string.pack('<i8', v) or string.pack('<d', v)
    words[2 * i - 1], words[2 * i] = string.unpack('<i4i4', bytes)
    words[2 * n + i] = math.type(v) == 'integer' and 1 or 0
  end
  local mine = zl.tensor(words, 'i32')
  local all = mine
  if world > 1 then
    -- in the memory the communicator takes (a GPU's for nccl)
    local where = dist.device()
    mine = mine:to(where)
    all = zl.zeros(world * 3 * n, { dtype = 'i32', device = where })
    dist.all_gather(all, mine)
  end
  local w = all:cpu():totable()
  local out = {}
  for r = 0, world - 1 do
    local base, row = r * 3 * n, {}
    for i = 1, n do
      local a, b = math.tointeger(w[base + 2 * i - 1]), math.tointeger(w[base + 2 * i])
      local bytes = string.pack('<i4i4', a, b)
      row[i] = w[base + 2 * n + i] == 1 and string.unpack('<i8', bytes) or string.unpack('<d', bytes)
    end
    out[r + 1] = row
  end
  return out
end

return M
