--[[ zlua.zero.registry: what ZeRO knows about a parameter tensor, keyed by
  the tensor object (weakly, so a dropped model is collected): the zero.Init
  store (engine/zero's zl_zero_init) that partitioned it at construction,
  and, once an engine owns it, that engine's state and the parameter's
  entry. ]]

local M = {}

local info = setmetatable({}, { __mode = 'k' })

--- The record of p, or nil for a parameter ZeRO has not touched.
function M.get(p) return info[p] end

--- The zero.Init store holding p while no engine owns it, or nil.
function M.init_store(p)
  local r = info[p]
  return r and r.store or nil
end

--- zero.Init partitioned p (its whole shape, a list) into `store`.
function M.set_init(p, store, shape)
  if not store then info[p] = nil return end
  local numel = 1
  for _, d in ipairs(shape) do numel = numel * d end
  info[p] = { store = store, shape = shape, numel = numel }
end

--- An engine's state took p over.
function M.bind(p, state, entry) info[p] = { state = state, entry = entry } end

return M
