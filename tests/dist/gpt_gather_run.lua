--[=[ One GPT training run for stage 3's bucketed gathers (tests/dist/test_zero.sh)
  and for timing them: zlua.nn.GPT on random tokens, the same global batch at
  any world size (each rank takes its rows), AdamW in f32. Prints from rank 0
  "step N loss L" per step (the global mean loss, %.9g), then "collectives C"
  (the collectives ZeRO started in the last step, C empty when the engine
  does not count them) and "median step S fastest F comm C" (seconds: the
  median and the fastest step, and the median time a step spent in ZeRO's
  collectives).

    zlua [--nprocs N] gpt_gather_run.lua --stage S [--steps 4] [--layers 8] [--width 64] [--heads 4]
        [--batch 8] [--block 16] [--vocab 32] [--zero key=value,...]
        [--nvme DIR [--max_in_cpu 0]]   (offload_param to NVMe under DIR, past max_in_cpu elements) ]=]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'

local args = zl.args(nil, { stage = 3, steps = 4, layers = 8, width = 64, heads = 4, batch = 8, block = 16, vocab = 32,
  zero = '', nvme = '', max_in_cpu = 0 })
local N, rank = dist.world_size(), dist.rank()
local micro = args.batch // N
local cfg = {
  train_batch_size = args.batch, train_micro_batch_size_per_gpu = micro,
  optimizer = { type = 'AdamW', params = { lr = 1e-3, weight_decay = 0.01 } },
  zero_optimization = { stage = args.stage },
  steps_per_print = 1000000,
}
if args.nvme ~= '' then
  cfg.zero_optimization.offload_param = { device = 'nvme', nvme_path = args.nvme, buffer_count = 8,
    buffer_size = 4 * args.width * args.width, max_in_cpu = args.max_in_cpu }
end
for key, value in args.zero:gmatch('([%w_]+)=([^,]+)') do
  cfg.zero_optimization[key] = value == 'true' or (value ~= 'false' and (tonumber(value) or value))
end

zl.manual_seed(7)
local model = nn.GPT{ vocab_size = args.vocab, block_size = args.block, n_layer = args.layers, n_head = args.heads,
  n_embd = args.width }
local engine = zl.initialize { model = model, config = cfg }
engine:set_progress(false)

local T = args.block
local times, comms, before = {}, {}, 0
for s = 1, args.steps do
  local g = zl.Generator(100 + s)
  local ids = {}
  for i = 1, args.batch * (T + 1) do ids[i] = g:randint(args.vocab) - 1 end
  local all = zl.tensor(ids, 'i64'):view(args.batch, T + 1)
  local rows = all:narrow(1, rank * micro + 1, micro)
  local x, y = rows:narrow(2, 1, T):contiguous(), rows:narrow(2, 2, T):contiguous()
  before = engine:memory_report().collectives
  local t0, c0 = zl.core.now(), engine:comm_time()
  local _, loss = engine(x, y)
  engine:backward(loss)
  engine:step()
  times[s], comms[s] = zl.core.now() - t0, engine:comm_time() - c0
  local l = dist.all_reduce(zl.full({ 1 }, loss:float():item()), 'avg')
  if rank == 0 then print(string.format('step %d loss %.9g', s, l:item())) end
end
local after = engine:memory_report().collectives
table.sort(times)
table.sort(comms)
if rank == 0 then
  print(string.format('collectives %s', after and after - before or ''))
  local mid = (#times + 1) // 2
  print(string.format('median step %.4f fastest %.4f comm %.4f', times[mid], times[1], comms[mid]))
end
