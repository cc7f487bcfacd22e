--[[ zlua.engine.accelerator: where zlua.initialize trains the model.
  DeepSpeed's initialize moves the model to the local rank's accelerator;
  zlua does the same with CUDA: cuda:<local rank> when this zlua has CUDA and
  sees a device, host memory otherwise (so without a GPU nothing changes).
  ZLUA_ACCELERATOR (or DeepSpeed's DS_ACCELERATOR) names it: 'cpu' keeps the
  model in host memory, 'cuda' insists on a GPU. A model the script put on a
  device already trains there. Only the model moves, in place (its tensors
  stay the script's); engine(...) moves tensor inputs still in host memory
  to engine.device, which DeepSpeed leaves to the script. ]]

local zl = require 'zlua'
local fmt = string.format

local M = {}

-- The first device among the module's parameters, or nil when all are in host memory.
local function placed(module)
  for _, p in ipairs(module:parameters()) do
    local d = p:device()
    if d ~= 'cpu' then return d end
  end
end

--- M.choose(module, local_rank [, getenv = os.getenv]) -> 'cpu' or 'cuda:N'
function M.choose(module, local_rank, getenv)
  getenv = getenv or os.getenv
  local name, want = 'ZLUA_ACCELERATOR', getenv('ZLUA_ACCELERATOR')
  if not want then name, want = 'DS_ACCELERATOR', getenv('DS_ACCELERATOR') end
  if want and want ~= 'cpu' and want ~= 'cuda' then
    zl.raise(fmt("zlua.initialize: %s=%s: zlua's accelerators are 'cuda' and 'cpu'", name, want))
  end
  if want == 'cpu' then return 'cpu' end
  local here = placed(module)
  if here then return here end
  local n, why = zl.cuda.device_count()
  if n == 0 then
    if want == 'cuda' then zl.raise(fmt('zlua.initialize: %s=cuda, but %s', name, why)) end
    return 'cpu'
  end
  if local_rank >= n then
    zl.raise(fmt('zlua.initialize: local rank %d has no GPU of its own (%d visible): start at most %d ranks '
      .. 'a host, or set ZLUA_ACCELERATOR=cpu', local_rank, n, n))
  end
  return 'cuda:' .. local_rank
end

return M
