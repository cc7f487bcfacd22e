--[[ The ZeRO benchmark: step time of the GPT model (zlua.nn.GPT, the GPT
  example's model) at each stage, on 1 rank and on N ranks, with overlap_comm
  on and off, optionally with the optimizer (and at stage 3 the parameters)
  offloaded; the share of the step spent in collectives (engine:comm_time(),
  which counts the time the engine waits in them); the collectives ZeRO
  starts a step at N ranks; and the tokens per second.
  --anchor runs the ZeRO anchor instead; --compare EXE runs every row with
  a second zlua too (the engine before a change), for a before/after table;
  --repeat R launches each configuration R times and reports the median.
  Run by hand (CTest runs a tiny model only to see that it works):
    zlua scripts/bench/zero.lua [--ranks 2] [--steps 20] [--warmup 3] [--n_layer 4]
        [--n_embd 256] [--n_head 4] [--vocab 96] [--block_size 64] [--batch 16]
        [--micro M] [--precision bf16|f32] [--offload none|cpu|nvme] [--threads T]
        [--stages 0123] [--prefetch ELEMENTS] [--anchor] [--compare EXE] [--repeat R]

  --batch windows make one global batch at every world size, so the work per
  step is the same and 1 rank vs N ranks compares the same training; --micro M
  instead gives each rank M windows (the global batch is M x ranks), as in
  the anchor. --stages keeps only the stages it lists; --prefetch sets
  stage3_prefetch_bucket_size, the elements stage 3 gathers in one collective
  (many small parameters with little compute, as with --n_layer 48 --n_embd
  32 --n_head 2 --batch 2 --block_size 16, show its effect). Each
  configuration runs in its own processes (zlua --nprocs N this script
  --worker ...); threads are split evenly between the ranks of a run unless
  --threads gives the count per rank. The figure is the median step time
  after the warm-up steps. ]]

local zl = require 'zlua'
local fmt = string.format

-- The ZeRO anchor: the configuration the before/after figures are quoted at.
local ANCHOR = { n_layer = 4, n_embd = 256, n_head = 4, vocab = 50257, block_size = 128, micro = 2,
  precision = 'f32', ranks = 2, threads = 1 }
-- The anchor's rows: stage, offload.
local ANCHOR_ROWS = { { 0, 'none' }, { 1, 'none' }, { 2, 'none' }, { 3, 'none' }, { 3, 'cpu' }, { 3, 'nvme' },
  { 2, 'cpu' }, { 2, 'nvme' } }

-- offload '' means not given: none for the sweep, every anchor row for --anchor
-- (given, it keeps only that offload's rows). micro 0: batch // ranks.
local defaults = { ranks = 2, steps = 20, warmup = 3, n_layer = 4, n_embd = 256, n_head = 4, vocab = 96,
  block_size = 64, batch = 16, micro = 0, precision = 'bf16', offload = '', threads = 0, anchor = false,
  compare = '', ['repeat'] = 1, worker = false, stage = 0, overlap = 'default', folder = '', stages = '0123',
  prefetch = -1 }
-- The preset goes into the defaults before the command line is read, so an
-- option given explicitly still wins over it.
for _, a in ipairs(arg) do
  if a == '--' then break end
  if a == '--anchor' or a == '--anchor=true' then
    for k, v in pairs(ANCHOR) do defaults[k] = v end
  end
end
local args = zl.args(nil, defaults)

local median = require('zlua.util.stats').median

-- The worker uses public APIs only (zl.initialize, engine:comm_time(),
-- engine:memory_report()), so the engine before a change runs it too.
if args.worker then
  local nn = require 'zlua.nn'
  local dist = require 'zlua.dist'
  local N, rank = dist.world_size(), dist.rank()
  if args.threads > 0 then zl.set_num_threads(args.threads) end
  local T, V = args.block_size, args.vocab
  local micro = args.micro > 0 and args.micro or args.batch // N
  local zc = { stage = args.stage }
  if args.overlap ~= 'default' then zc.overlap_comm = args.overlap == 'on' end
  if args.prefetch >= 0 and args.stage == 3 then zc.stage3_prefetch_bucket_size = args.prefetch end
  -- Offload only where it applies (the config would warn and ignore the rest):
  -- the optimizer from stage 1, the parameters at stage 3.
  if args.stage >= 1 and (args.offload == 'cpu' or args.offload == 'nvme') then
    zc.offload_optimizer = { device = args.offload, nvme_path = args.offload == 'nvme' and args.folder or nil }
  end
  if args.stage == 3 and args.offload == 'nvme' then
    -- max_in_cpu 0: at its default (1e9 elements kept in memory) a model this
    -- size would never read its parameters from the disk.
    zc.offload_param = { device = 'nvme', nvme_path = args.folder, max_in_cpu = 0 }
  end
  local cfg = { train_batch_size = args.micro > 0 and args.micro * N or args.batch,
    train_micro_batch_size_per_gpu = micro, optimizer = { type = 'AdamW', params = { lr = 1e-3 } },
    bf16 = { enabled = args.precision == 'bf16' }, zero_optimization = zc, steps_per_print = 1000000 }
  zl.manual_seed(1)
  local model = nn.GPT { vocab_size = V, block_size = T, n_layer = args.n_layer, n_head = args.n_head,
    n_embd = args.n_embd }
  -- Counted before initialize: at stage 3 a released parameter has no elements.
  local params = model:num_parameters()
  local engine = zl.initialize { model = model, config = cfg }
  engine:set_progress(false)
  local g = zl.Generator(7)
  local times, comms = {}, {}
  -- An engine before the count was reported gives -1.
  local function collectives() return engine:memory_report().collectives or -1 end
  local started
  for s = 1, args.warmup + args.steps do
    if s == args.warmup + 1 then started = collectives() end
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
  local per_step = started >= 0 and (collectives() - started) / args.steps or -1
  if rank == 0 then
    print(fmt('RESULT %.6f %.6f %d %d %.1f', median(times), median(comms), rep.model_states, params, per_step))
  end
  os.exit(0, true)
end

if args.offload ~= '' and args.offload ~= 'none' and args.offload ~= 'cpu' and args.offload ~= 'nvme' then
  io.stderr:write(fmt('zero.lua: --offload is none, cpu or nvme, got %q\n', args.offload))
  os.exit(1)
end
if args.compare ~= '' then
  local f = io.open(args.compare)
  if not f then
    io.stderr:write(fmt('zero.lua: --compare %s: no such executable\n', args.compare))
    os.exit(1)
  end
  f:close()
end

local exe = require('zlua.args').executable()
local script = arg[0]
local cores = tonumber(io.popen('nproc'):read('l')) or 2
local failed = false

local machine = dofile((arg[0]:match('^(.*)/[^/]*$') or '.') .. '/machine.lua')

local function threads_per_rank(ranks) return args.threads > 0 and args.threads or math.max(1, cores // ranks) end

-- What a row's offload does at its stage (the worker drops what does not apply).
local function offload_label(stage, offload)
  if offload == 'none' or offload == '' or stage == 0 then return 'none' end
  if offload == 'nvme' and stage == 3 then return 'nvme opt+param' end
  return offload .. ' opt'
end

-- One configuration with one executable, in its own processes: a table of
-- step, comm (seconds), bytes (model states per rank), or nil when it failed
-- (its command and output go to stderr and the table goes on). An NVMe run
-- swaps into a fresh folder of its own, removed after it.
local function run(with, ranks, stage, overlap, offload)
  local folder = ''
  if offload == 'nvme' and stage >= 1 then
    folder = os.tmpname()
    os.remove(folder)
    zl.core.mkdirs(folder)
  end
  local cmd = fmt('%s%s %s --worker --stage %d --overlap %s --offload %s%s --threads %d --steps %d --warmup %d '
    .. '--n_layer %d --n_embd %d --n_head %d --vocab %d --block_size %d --batch %d --micro %d --precision %s '
    .. '--prefetch %d 2>&1',
    with, ranks > 1 and (' --nprocs ' .. ranks) or '', script, stage, overlap, offload == '' and 'none' or offload,
    folder ~= '' and (' --folder ' .. folder) or '', threads_per_rank(ranks), args.steps, args.warmup, args.n_layer,
    args.n_embd, args.n_head, args.vocab, args.block_size, args.batch, args.micro, args.precision, args.prefetch)
  local p = io.popen(cmd)
  local out = p:read('a')
  p:close()
  if folder ~= '' then zl.core.remove_tree(folder) end
  local step, comm, bytes, colls = out:match('RESULT (%S+) (%S+) (%d+) %d+ (%S+)')
  if not step then
    io.stderr:write('zero.lua: a run failed: ', cmd, '\n', out, '\n')
    failed = true
    return nil
  end
  return { step = tonumber(step), comm = tonumber(comm), bytes = tonumber(bytes), colls = tonumber(colls) }
end

-- The median run of several (by step time, comm time taken alike); nil when one failed.
local function median_run(runs)
  for _, r in ipairs(runs) do if not r then return nil end end
  local steps, comms = {}, {}
  for i, r in ipairs(runs) do steps[i], comms[i] = r.step, r.comm end
  return { step = median(steps), comm = median(comms), bytes = runs[1].bytes, colls = runs[1].colls }
end

-- A configuration with the running executable and, with --compare, the other
-- one straight after it, --repeat times: new, old alternate run by run, so a
-- machine that slows down over the run weighs on both columns alike, and the
-- median over the repeats damps the spread from one launch to the next.
local function measure(ranks, stage, overlap, offload)
  local news, olds = {}, {}
  for i = 1, args['repeat'] do
    news[i] = run(exe, ranks, stage, overlap, offload) or false
    if args.compare ~= '' then olds[i] = run(args.compare, ranks, stage, overlap, offload) or false end
  end
  return median_run(news), args.compare ~= '' and median_run(olds) or nil
end

-- A table as a list of columns { title, width, format, value(row) }; a value
-- of nil prints '-' (a failed run, or nothing to compare).
local function printer(cols)
  local head = {}
  for i, c in ipairs(cols) do head[i] = fmt('%' .. c[2] .. 's', c[1]) end
  print(table.concat(head, ' '))
  return function(row, note)
    local cells = {}
    for i, c in ipairs(cols) do
      local v = c[4](row)
      cells[i] = v == nil and fmt('%' .. c[2] .. 's', '-') or fmt('%' .. c[2] .. c[3], v)
    end
    print(table.concat(cells, ' ') .. (note or ''))
  end
end

local function ms(r, key) return r and r[key] * 1e3 end
local function mb(r) return r and r.bytes / 2 ^ 20 end
local function ratio(row) return row.new and row.old and row.new.step / row.old.step end

local compare = args.compare ~= ''
local function step_columns(cols)
  cols[#cols + 1] = { compare and 'new ms' or 'step ms', 10, '.1f', function(r) return ms(r.new, 'step') end }
  if compare then
    cols[#cols + 1] = { 'old ms', 10, '.1f', function(r) return ms(r.old, 'step') end }
    cols[#cols + 1] = { 'new/old', 8, '.2f', ratio }
  end
  return cols
end

local batch = args.micro > 0 and fmt('batch %d x %d per rank', args.micro, args.block_size)
  or fmt('context %d, global batch %d', args.block_size, args.batch)
local function header(ranks_note)
  print(fmt('GPT %d layers, %d wide, %d heads, vocabulary %d, %s, %s, AdamW; %s, %d threads, %s; median of %d '
    .. 'steps after %d, median of %d launches', args.n_layer, args.n_embd, args.n_head, args.vocab, batch,
    args.precision, machine.cpu_model(), cores, ranks_note, args.steps, args.warmup, args['repeat']))
  if compare then print(fmt('new: %s   old: %s', exe, args.compare)) end
end

if args.anchor then
  local t = threads_per_rank(args.ranks)
  header(fmt('%d ranks x %d thread%s', args.ranks, t, t > 1 and 's' or ''))
  local cols = step_columns({ { 'stage', '-5', 'd', function(r) return r.stage end },
    { 'offload', '-14', 's', function(r) return r.offload end } })
  cols[#cols + 1] = { 'comm ms', 10, '.1f', function(r) return ms(r.new, 'comm') end }
  if compare then cols[#cols + 1] = { 'old comm', 10, '.1f', function(r) return ms(r.old, 'comm') end } end
  cols[#cols + 1] = { 'states MB/rank', 14, '.2f', function(r) return mb(r.new) end }
  if compare then cols[#cols + 1] = { 'old MB/rank', 12, '.2f', function(r) return mb(r.old) end } end
  local row = printer(cols)
  for _, sc in ipairs(ANCHOR_ROWS) do
    local stage, offload = sc[1], sc[2]
    if args.offload == '' or args.offload == offload then
      local new, old = measure(args.ranks, stage, 'default', offload)
      row({ stage = stage, offload = offload_label(stage, offload), new = new, old = old })
    end
  end
  os.exit(failed and 1 or 0)
end

header('threads split evenly between the ranks' .. (args.threads > 0 and fmt(' (%d per rank)', args.threads) or ''))
local offloading = args.offload ~= '' and args.offload ~= 'none'
local cols = { { 'ranks', '-6', 'd', function(r) return r.ranks end },
  { 'stage', '-5', 'd', function(r) return r.stage end }, { 'overlap', '-8', 's', function(r) return r.overlap end } }
if offloading then cols[#cols + 1] = { 'offload', '-14', 's', function(r) return r.offload end } end
step_columns(cols)
local function share(r) return r.new and fmt('%.1f%%', 100 * r.new.comm / r.new.step) end
local function tokens(r)
  return r.new and (args.micro > 0 and args.micro * r.ranks or args.batch) * args.block_size / r.new.step
end
cols[#cols + 1] = { 'comm ms', 10, '.1f', function(r) return ms(r.new, 'comm') end }
cols[#cols + 1] = { 'comm %', 8, 's', share }
-- Collectives a step at N ranks (one rank starts none); an engine that does
-- not report them shows '-'.
local function colls(r) return r and r.colls >= 0 and r.colls or nil end
cols[#cols + 1] = { 'colls/step', 10, '.0f', function(r) return r.ranks > 1 and colls(r.new) or nil end }
if compare then
  cols[#cols + 1] = { 'old colls', 10, '.0f', function(r) return r.ranks > 1 and colls(r.old) or nil end }
end
cols[#cols + 1] = { 'tokens/s', 12, '.0f', tokens }
cols[#cols + 1] = { 'states MB/rank', 14, '.2f', function(r) return mb(r.new) end }
local row = printer(cols)
local base = {}
for _, ranks in ipairs({ 1, args.ranks }) do
  for stage = 0, 3 do
    for _, overlap in ipairs(args.stages:find(tostring(stage), 1, true) and (ranks > 1 and { 'off', 'on' } or { 'off' })
        or {}) do
      local new, old = measure(ranks, stage, overlap, args.offload)
      if ranks == 1 then base[stage] = new and new.step end
      local note = ranks > 1 and new and base[stage] and fmt('   (%.2fx the 1-rank step)', new.step / base[stage])
      row({ ranks = ranks, stage = stage, overlap = overlap, offload = offload_label(stage, args.offload), new = new,
        old = old }, note)
    end
  end
end
os.exit(failed and 1 or 0)
