--[[ zlua.zero.registry: what ZeRO knows about a parameter tensor, keyed by
  the tensor object (weakly, so a dropped model is collected): the chunk
  zlua.zero.Init kept when it partitioned it at construction, and, once an
  engine owns it, that engine's state and the parameter's layout entry. ]]

local M = {}

local info = setmetatable({}, { __mode = 'k' })

--- The record of p, or nil for a parameter ZeRO has not touched.
function M.get(p) return info[p] end

--- The zero.Init record of p (chunk, n, shape, dtype) while no engine owns it.
function M.init_record(p)
  local r = info[p]
  return r and r.chunk and r or nil
end

--- zero.Init: p's chunk (f32, k elements) and what p was before release.
function M.set_init(p, rec) info[p] = rec end

--- An engine's state took p over; the construction chunk is no longer needed.
function M.bind(p, state, entry)
  info[p] = { state = state, entry = entry }
end

return M
