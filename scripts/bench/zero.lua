--[[ The ZeRO benchmark: step time of the GPT model (zlua.nn.GPT, the GPT
  example's model) at each stage, on 1 rank and on N ranks, with overlap_comm
  on and off; the share of the step spent in collectives (engine:comm_time(),
  which counts the time the engine waits in them); and the tokens per second.
  Run by hand, not in CI:
    zlua scripts/bench/zero.lua [--ranks 2] [--steps 20] [--warmup 3] [--n_layer 4]
        [--n_embd 256] [--block_size 64] [--batch 16] [--precision bf16|f32]

  --batch windows make one global batch at every world size, so the work per
  step is the same and 1 rank vs N ranks compares the same training. Each
  configuration runs in its own processes (zlua --nprocs N this script
  --worker ...); threads are split evenly between the ranks of a run. The
  figure is the median step time after the warm-up steps. ]]

local zl = require 'zlua'
local fmt = string.format

local args = zl.args(nil, { ranks = 2, steps = 20, warmup = 3, n_layer = 4, n_embd = 256, block_size = 64,
  batch = 16, precision = 'bf16', worker = false, stage = 0, overlap = 'default', threads = 0 })

local median = require('zlua.util.stats').median

if args.worker then
  local nn = require 'zlua.nn'
  local dist = require 'zlua.dist'
  local N, rank = dist.world_size(), dist.rank()
  if args.threads > 0 then zl.set_num_threads(args.threads) end
  local T, V = args.block_size, 96
  local micro = args.batch // N
  local zc = { stage = args.stage }
  if args.overlap ~= 'default' then zc.overlap_comm = args.overlap == 'on' end
  local cfg = { train_batch_size = args.batch, train_micro_batch_size_per_gpu = micro,
    optimizer = { type = 'AdamW', params = { lr = 1e-3 } }, bf16 = { enabled = args.precision == 'bf16' },
    zero_optimization = zc, steps_per_print = 1000000 }
  zl.manual_seed(1)
  local model = nn.GPT { vocab_size = V, block_size = T, n_layer = args.n_layer, n_head = 4, n_embd = args.n_embd }
  local engine = zl.initialize { model = model, config = cfg }
  engine:set_progress(false)
  local g = zl.Generator(7)
  local times, comms = {}, {}
  for s = 1, args.warmup + args.steps do
    local ids = zl.tensor((function()
      local t = {}
      for i = 1, micro * (T + 1) do t[i] = g:randint(V) - 1 end
      return t
    end)(), 'i64'):view(micro, T + 1)
    local x, y = ids:narrow(2, 1, T), ids:narrow(2, 2, T)
    dist.barrier()
    local c0, t0 = engine:comm_time(), zl.core.now()
    local _, loss = engine(x:contiguous(), y:contiguous())
    engine:backward(loss)
    engine:step()
    local t1, c1 = zl.core.now(), engine:comm_time()
    if s > args.warmup then
      times[#times + 1] = t1 - t0
      comms[#comms + 1] = c1 - c0
    end
  end
  local rep = engine:memory_report()
  if rank == 0 then
    print(fmt('RESULT %.6f %.6f %d %d', median(times), median(comms), rep.model_states, model:num_parameters()))
  end
  os.exit(0)
end

local exe = require('zlua.args').executable()
local script = arg[0]
local cores = tonumber(io.popen('nproc'):read('l')) or 2

local function run(ranks, stage, overlap)
  local threads = math.max(1, cores // ranks)
  local cmd = fmt('%s%s %s --worker --stage %d --overlap %s --threads %d --steps %d --warmup %d --n_layer %d '
    .. '--n_embd %d --block_size %d --batch %d --precision %s 2>&1', exe, ranks > 1 and (' --nprocs ' .. ranks) or '',
    script, stage, overlap, threads, args.steps, args.warmup, args.n_layer, args.n_embd, args.block_size, args.batch,
    args.precision)
  local p = io.popen(cmd)
  local out = p:read('a')
  p:close()
  local step, comm, bytes, params = out:match('RESULT (%S+) (%S+) (%d+) (%d+)')
  if not step then
    io.stderr:write('zero.lua: a run failed: ', cmd, '\n', out, '\n')
    os.exit(1)
  end
  return tonumber(step), tonumber(comm), tonumber(bytes), tonumber(params)
end

print(fmt('GPT %d layers, %d wide, context %d, global batch %d, %s, %d cores; median of %d steps',
  args.n_layer, args.n_embd, args.block_size, args.batch, args.precision, cores, args.steps))
print(fmt('%-6s %-5s %-8s %10s %10s %8s %12s %14s', 'ranks', 'stage', 'overlap', 'step ms', 'comm ms', 'comm %',
  'tokens/s', 'states MB/rank'))
local base = {}
for _, ranks in ipairs({ 1, args.ranks }) do
  for stage = 0, 3 do
    for _, overlap in ipairs(ranks > 1 and { 'off', 'on' } or { 'off' }) do
      local step, comm, bytes = run(ranks, stage, overlap)
      if ranks == 1 then base[stage] = step end
      print(fmt('%-6d %-5d %-8s %10.1f %10.1f %7.1f%% %12.0f %14.2f%s', ranks, stage, overlap, step * 1e3, comm * 1e3,
        100 * comm / step, args.batch * args.block_size / step, bytes / 2 ^ 20,
        ranks > 1 and fmt('   (%.2fx the 1-rank step)', step / base[stage]) or ''))
    end
  end
end
