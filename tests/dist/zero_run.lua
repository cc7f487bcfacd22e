--[=[ One training run for the ZeRO tests (tests/dist/test_zero.sh), on
  however many ranks it is started with: a small MLP on a fixed global batch
  of 8 rows per step (--global; each rank takes its rows of each micro-step), written so
  that every world size and stage sees the same global batch. Prints one line
  per step, "step N loss L", L the global mean loss in %.9g, from rank 0.

    zlua [--nprocs N] zero_run.lua --stage S --mode f32|gas2|clip|bf16|fp16|overflow
        [--steps 50] [--init] [--save DIR --save_at K] [--load DIR] [--memory]
        [--zero key=value,...]   (zero_optimization keys over the defaults below)
        [--dump FILE]            (the whole f32 masters at the end, by name, from rank 0)
        [--save16 DIR]           (engine:save_16bit_model at the end)
        [--nvme DIR --offload optimizer|param|both [--device cpu] [--pipeline]]
                                 (offload to NVMe under DIR, or to cpu)
        [--sabotage K:delete|K:truncate]   (after step K, rank 0's first optimizer swap
                                 file is removed or emptied: the next step must fail naming it)
  Mode overflow is fp16 starting at a loss scale of 2^40, so that the first
  steps overflow on every rank and are skipped. ]=]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'
local zero = require 'zlua.zero'

local args = zl.args(nil, { stage = 0, mode = 'f32', steps = 50, init = false, save = '', save_at = 0, load = '',
  memory = false, width = 32, zero = '', dump = '', global = 8, save16 = '', nvme = '', offload = '',
  device = 'nvme', pipeline = false, sabotage = '' })
local N, rank = dist.world_size(), dist.rank()
local GLOBAL = args.global
local gas = args.mode == 'gas2' and 2 or 1
local micro = GLOBAL // (N * gas)

local cfg = {
  train_batch_size = GLOBAL, train_micro_batch_size_per_gpu = micro, gradient_accumulation_steps = gas,
  optimizer = { type = 'AdamW', params = { lr = 1e-2, weight_decay = 0.01 } },
  gradient_clipping = args.mode == 'clip' and 0.05 or 0,
  bf16 = { enabled = args.mode == 'bf16' },
  fp16 = { enabled = args.mode == 'fp16' or args.mode == 'overflow',
    initial_scale_power = args.mode == 'overflow' and 40 or 12, loss_scale_window = 20 },
  zero_optimization = {
    stage = args.stage, reduce_bucket_size = 300, allgather_bucket_size = 500,
    overlap_comm = args.stage >= 2,
    stage3_param_persistence_threshold = 40, stage3_prefetch_bucket_size = 400,
    stage3_max_live_parameters = 3000, stage3_max_reuse_distance = 200,
    stage3_gather_16bit_weights_on_model_save = true,
  },
  steps_per_print = 1000000,
}
if args.offload ~= '' then
  local z = cfg.zero_optimization
  -- Several sub-groups and few buffers, so that swapping really cycles.
  z.sub_group_size = 700
  if args.offload == 'optimizer' or args.offload == 'both' then
    z.offload_optimizer = { device = args.device, nvme_path = args.nvme, buffer_count = 4,
      pipeline_read = args.pipeline, pipeline_write = args.pipeline }
  end
  if args.offload == 'param' or args.offload == 'both' then
    z.offload_param = { device = args.device, nvme_path = args.nvme, buffer_count = 6, buffer_size = 2000,
      max_in_cpu = 400 }
  end
end
for key, value in args.zero:gmatch('([%w_]+)=([^,]+)') do
  cfg.zero_optimization[key] = value == 'true' or (value ~= 'false' and (tonumber(value) or value))
end

local W = args.width
local function build()
  zl.manual_seed(1234)
  return nn.Sequential(nn.Linear(10, W), nn.GELU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, 3))
end
zl.reset_peak_memory()
local model = args.init and zero.Init(cfg, build) or build()
local build_peak = zl.memory().params.peak
local engine = zl.initialize { model = model, config = cfg }
zl.reset_peak_memory()
engine:set_progress(false)

-- The global batch of step s: 8 rows of 10 features and their classes.
local function batch(s)
  local g = zl.Generator(1000 + s)
  local x = zl.randn({ GLOBAL, 10 }, 'f32', g)
  local cls = {}
  for i = 1, GLOBAL do cls[i] = g:randint(3) - 1 end
  local y = zl.tensor(cls, 'i64')
  return x, y
end

local first = 1
if args.load ~= '' then
  engine:load_checkpoint(args.load)
  first = engine.global_steps + 1
end

for s = first, args.steps do
  local x, y = batch(s)
  local total = 0.0
  for m = 0, gas - 1 do
    local off = (m * N + rank) * micro
    local xb, yb = x:narrow(1, off + 1, micro), y:narrow(1, off + 1, micro)
    local loss = zl.cross_entropy(engine(xb):float(), yb)
    engine:backward(loss)
    engine:step()
    total = total + loss:float():item()
  end
  local t = zl.full({ 1 }, total)
  dist.all_reduce(t)
  if rank == 0 then
    print(string.format('step %d loss %.9g%s', s, t:item() / (N * gas), engine:was_step_applied() and '' or ' skipped'))
  end
  if args.save ~= '' and s == args.save_at then engine:save_checkpoint(args.save, 'ckpt') end
  local at, how = args.sabotage:match('^(%d+):(%a+)$')
  if rank == 0 and tonumber(at) == s then
    local swp = args.nvme .. '/zlua_swap/optimizer/rank0/optimizer.swp'
    if how == 'delete' then assert(os.remove(swp)) else assert(io.open(swp, 'w')):close() end
  end
  if args.memory and s == 2 then
    local x2, y2 = batch(s + 1)
    engine:backward(zl.cross_entropy(engine(x2:narrow(1, rank * micro + 1, micro)), y2:narrow(1, rank * micro + 1, micro)))
    local rep = engine:memory_report()
    local psi = 0
    for _, e in ipairs(engine.zero.entries) do psi = psi + e.n end
    -- The ZeRO paper's bytes per parameter (bf16, Adam) at this stage and N ranks.
    local want = ({ 16, 4 + 12 / N, 2 + 14 / N, 16 / N })[args.stage + 1]
    local got = rep.model_states / psi
    local verdict = math.abs(got - want) <= 0.05 * want and 'ok' or 'FAIL'
    print(string.format('%s memory rank %d stage %d: %.3f bytes per parameter (paper %.3f): params %d grads %d '
      .. 'master %d moments %d, bucket buffers %d (reduce %d, allgather %d)', verdict, rank, args.stage, got, want,
      rep.params, rep.grads, rep.master, rep.moments, rep.buffers, rep.bucket_buffers.reduce,
      rep.bucket_buffers.allgather))
    if args.init then
      -- The largest layer: the most parameters one module owns (DeepSpeed's estimator's measure).
      local per, largest = {}, 0
      for _, e in ipairs(engine.zero.entries) do
        local m = e.name:match('^(.*)%.[^.]+$') or ''
        per[m] = (per[m] or 0) + e.n
        largest = math.max(largest, per[m])
      end
      local prefetch = cfg.zero_optimization.stage3_prefetch_bucket_size
      local bound = (math.ceil(psi / N) + largest + prefetch) * 2
      local run_peak = rep.allocator.params.peak
      print(string.format('%s zero.Init rank %d: peak parameter bytes while training %d <= (psi/%d + largest layer %d '
        .. '+ prefetch %d) x 2 = %d', run_peak <= bound and 'ok' or 'FAIL', rank, run_peak, N, largest, prefetch, bound))
      local fbound = (math.ceil(psi / N) + largest + prefetch) * 4
      print(string.format('%s zero.Init rank %d: peak parameter bytes while building (f32) %d <= %d',
        build_peak <= fbound and 'ok' or 'FAIL', rank, build_peak, fbound))
    end
    engine:zero_grad()
  end
end

if args.dump ~= '' then
  local entries = {}
  for name, p in model:named_parameters() do entries[#entries + 1] = { name, engine:get_full_fp32_param(p) } end
  if rank == 0 then zl.save_safetensors(args.dump, entries) end
end
if args.save16 ~= '' then engine:save_16bit_model(args.save16) end
