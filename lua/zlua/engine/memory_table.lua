--[[ zlua.engine.memory_table: this rank's memory after a run, estimated and
  measured side by side per category. The estimate is the seeds' memory
  analysis (the ZeRO paper's, DeepSpeed's estimators'): per trained
  parameter, its working copy (2 bytes under bf16/fp16, else 4), its
  gradient (the grad_accum dtype's size), an f32 master where the working
  copy is not one, and 4 bytes per optimizer state (Adam and Lamb keep two,
  SGD with momentum one), each cut N ways from the stage that partitions it
  (optimizer states from 1, gradients from 2, parameters at 3). Measured are
  the bytes the engine holds for each (engine:memory_report()) and the
  allocator's current and peak bytes per category, which count only what
  was allocated: never reserved buckets or cached free blocks. Last, the
  most memory the process may use and where that limit comes from.

  for _, r in ipairs(require('zlua.engine.memory_table').rows(engine)) do ... end
  require('zlua.engine.memory_table').print(engine, io.stderr [, {activations = bytes}])
  The activations have no estimate here (they depend on the model): a
  caller that has one (zlua.nn.gpt_activations for the GPT,
  zlua.nn.llama_activations for a LLaMA) passes it. ]]

local zl = require 'zlua'
local fmt = string.format

local M = {}

local SIZES = { f32 = 4, bf16 = 2, f16 = 2 }

--- M.rows(engine [, estimates]) -> { {category =, estimated = bytes or nil, engine = bytes
--- or nil, allocated = current bytes, peak = peak bytes}, ... }: params, grads, optimizer
--- (masters and states), comm buffers, activations and other; estimates.activations
--- fills that row's estimate.
-- The rows in order: their names and the allocator's category each reads.
local CATEGORIES = { { 'params', 'params' }, { 'grads', 'grads' }, { 'optimizer', 'optimizer' },
                     { 'comm buffers', 'comm' }, { 'activations', 'activations' }, { 'other', 'other' } }

function M.rows(engine, estimates)
  local rep = engine:memory_report()
  local est, held = {}, {}
  local z = engine.zero
  if z then
    local n = 0
    for _, e in ipairs(z.entries) do n = n + e.n end
    local stage, N = rep.stage, rep.world_size
    local _, _, wdtype, keys = z.c:info()
    local cfg = engine.config
    local gname = cfg.data_types and cfg.data_types.grad_accum_dtype
    local gsize = ({ fp32 = 4, bf16 = 2, fp16 = 2 })[gname] or SIZES[wdtype] or 4
    local wsize = SIZES[wdtype] or 4
    local function cut(bytes, from) return stage >= from and bytes / N or bytes end
    local frozen = rep.frozen or 0
    local master = (wsize == 4 and stage == 0) and 0 or cut(4 * n, 1)
    est.params, held.params = cut(wsize * n, 3) + frozen, rep.params + frozen
    est.grads, held.grads = cut(gsize * n, 2), rep.grads
    est.optimizer, held.optimizer = master + cut(4 * #keys * n, 1), rep.master + rep.moments
    held.comm = rep.buffers
  end
  est.activations = estimates and estimates.activations
  local rows = {}
  for i, c in ipairs(CATEGORIES) do
    local kind = c[2]
    rows[i] = { category = c[1], estimated = est[kind], engine = held[kind],
                allocated = rep.allocator[kind].current, peak = rep.allocator[kind].peak }
  end
  return rows
end

local function mib(v) return v and fmt('%10.2f', v / 2 ^ 20) or fmt('%10s', '-') end

--- M.print(engine, file [, estimates]): the rows as a table in MiB, rank and stage in its title.
function M.print(engine, out, estimates)
  local world = engine.world_size
  out:write(fmt('memory of rank %d (stage %d, %d rank%s), MiB:\n', engine.rank,
                engine.config.zero_optimization.stage, world, world == 1 and '' or 's'))
  out:write(fmt('  %-13s %10s %10s %10s %10s\n', 'category', 'estimated', 'engine', 'allocated', 'peak'))
  for _, r in ipairs(M.rows(engine, estimates)) do
    out:write(fmt('  %-13s %s %s %s %s\n', r.category, mib(r.estimated), mib(r.engine), mib(r.allocated), mib(r.peak)))
  end
  local limit, source = zl.memory_limit()
  out:write(fmt('  limit %.2f MiB: %s\n', limit / 2 ^ 20, source))
end

return M
