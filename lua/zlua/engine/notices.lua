--[[ zlua.engine.notices: the start-up lines for config keys zlua accepts but
  has no use for (zlua.config puts them in cfg.notices, each naming the key
  and why). Rank 0 prints each line once per process, however many engines
  it builds. ]]

local M = {}

local said = {}

--- Where the lines go; a test may catch them here.
function M.write(line) io.stderr:write(line, '\n') end

-- Keys that are noticed because the model is in host memory and take effect
-- when it is on a GPU (page-locked offload buffers).
local ON_DEVICE = { 'zero_optimization.offload_optimizer.pin_memory', 'zero_optimization.offload_param.pin_memory',
  'zero_optimization.cpu_offload_use_pin_memory' }

local function takes_effect(line, device)
  if device == nil or device == 'cpu' then return false end
  for _, key in ipairs(ON_DEVICE) do
    if line:sub(1, #key + 1) == key .. ' ' then return true end
  end
  return false
end

--- M.once(rank, line): "zlua: note: <line>" on rank 0, once per process.
function M.once(rank, line)
  if rank ~= 0 or said[line] then return end
  said[line] = true
  M.write('zlua: note: ' .. line)
end

--- M.say(cfg, rank [, device]): the lines of cfg.notices, on rank 0, each once.
function M.say(cfg, rank, device)
  for _, line in ipairs(cfg.notices or {}) do
    if not takes_effect(line, device) then M.once(rank, line) end
  end
end

return M
