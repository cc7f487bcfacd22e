--[[ zlua.zero.registry: what ZeRO knows about a parameter tensor, keyed by
  the tensor object (weakly, so a dropped model is collected): the chunk
  zlua.zero.Init kept when it partitioned it at construction, and, once an
  engine owns it, that engine's state and the parameter's layout entry. ]]

local M = {}

local info = setmetatable({}, { __mode = 'k' })

--- The record of p, or nil for a parameter ZeRO has not touched.
function M.get(p) return info[p] end

--- The zero.Init record of p (chunk or remote, n, shape, dtype, P, k) while
--- no engine owns it.
function M.init_record(p)
  local r = info[p]
  return r and (r.chunk or r.remote) and r or nil
end

--- An Init record's chunk (f32, k elements): the one in memory, or a copy read
--- back from the NVMe store (remote = {store=, offset=}).
function M.chunk(r)
  if r.chunk then return r.chunk end
  return r.remote.store:read(r.remote.offset, r.k)
end

--- Replace an Init record's chunk with t's values.
function M.put_chunk(r, t)
  if r.chunk then
    r.chunk:copy_(t)
  else
    r.remote.store:write(r.remote.offset, t)
  end
end

--- The chunk is no longer needed.
function M.drop_chunk(r)
  if r.chunk then r.chunk:release() end
  r.chunk, r.remote = nil, nil
end

--- zero.Init: p's chunk (f32, k elements) and what p was before release.
function M.set_init(p, rec) info[p] = rec end

--- An engine's state took p over; the construction chunk is no longer needed.
function M.bind(p, state, entry)
  info[p] = { state = state, entry = entry }
end

return M
