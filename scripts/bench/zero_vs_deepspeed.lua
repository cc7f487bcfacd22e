--[[ ZeRO against DeepSpeed on the CPU: the GPT
  anchor at stage 2 and 3, N ranks x T threads, trained by zlua and by
  DeepSpeed (zero_deepspeed.py beside this, gpt_torch.py's model) from the
  same weights, on the same windows per rank, under the same ds_config.json
  (AdamW, gradient_clipping, f32), the two alternating launch by launch.
  Prints ms/step (median of the timed steps, then of --repeat launches),
  tokens/s, DeepSpeed ms / zlua ms (above 1: zlua is faster), and the losses
  of rank 0 compared step by step (the largest absolute and relative
  difference). Run by hand (CTest runs a tiny model, zlua alone, only to
  see that it works):
    zlua scripts/bench/zero_vs_deepspeed.lua [--stages 2,3] [--repeat 3] [--steps 10] [--warmup 3]
        [--ranks 2] [--threads 1] [--n_layer 4] [--n_embd 256] [--n_head 4] [--vocab 50257]
        [--block_size 128] [--micro 2] [--ds=false]
  DeepSpeed runs as `deepspeed --num_gpus N` with DS_ACCELERATOR=cpu (gloo);
  --ds=false, or DeepSpeed or PyTorch missing, times zlua alone. ]]

local zl = require 'zlua'
local fmt = string.format

local args = zl.args(nil, { stages = '2,3', ['repeat'] = 3, steps = 10, warmup = 3, ranks = 2, threads = 1,
  n_layer = 4, n_embd = 256, n_head = 4, vocab = 50257, block_size = 128, micro = 2, ds = true,
  worker = false, stage = 2, dir = '' })
local median = require('zlua.util.stats').median

-- ---------------------------------------------------------------------------
-- One zlua launch (every rank runs this): rank 0 prints the figures.
if args.worker then
  local nn = require 'zlua.nn'
  local dist = require 'zlua.dist'
  local rank = dist.rank()
  zl.set_num_threads(args.threads)
  local model = nn.GPT { vocab_size = args.vocab, block_size = args.block_size, n_layer = args.n_layer,
    n_head = args.n_head, n_embd = args.n_embd }
  local w = zl.load_safetensors(args.dir .. '/weights.safetensors')
  zl.no_grad(function()
    for i, p in ipairs(model:parameters()) do p:copy_(w[fmt('p%03d', i)]) end
  end)
  w = nil
  local cfg = require('zlua.json').decode(io.open(args.dir .. '/ds_config.json'):read('a'))
  cfg.zero_optimization.stage = args.stage
  local engine = zl.initialize { model = model, config = cfg }
  engine:set_progress(false)
  local tokens = zl.load_safetensors(args.dir .. '/data.safetensors').tokens
  local times, losses = {}, {}
  for s = 1, args.warmup + args.steps do
    local ids = tokens:select(1, s):select(1, rank + 1)
    local x = ids:narrow(2, 1, args.block_size):contiguous()
    local y = ids:narrow(2, 2, args.block_size):contiguous()
    dist.barrier()
    local t0 = zl.core.now()
    local _, loss = engine(x, y)
    engine:backward(loss)
    engine:step()
    times[#times + 1] = zl.core.now() - t0
    losses[#losses + 1] = fmt('%.9g', loss:item())
  end
  if rank == 0 then
    print(fmt('RESULT %.6f', median(table.move(times, args.warmup + 1, #times, 1, {}))))
    print('LOSSES ' .. table.concat(losses, ' '))
  end
  os.exit(0, true)
end

-- ---------------------------------------------------------------------------
-- The driver: weights, windows and config into a folder both engines read.
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local machine = dofile(here .. '/machine.lua')
local exe = require('zlua.args').executable()
local dir = os.tmpname()
os.remove(dir)
zl.core.mkdirs(dir)

do
  local nn = require 'zlua.nn'
  zl.manual_seed(1)
  local model = nn.GPT { vocab_size = args.vocab, block_size = args.block_size, n_layer = args.n_layer,
    n_head = args.n_head, n_embd = args.n_embd }
  local named = {}
  for i, p in ipairs(model:parameters()) do named[i] = { fmt('p%03d', i), p } end
  zl.save_safetensors(dir .. '/weights.safetensors', named)
  -- Every step's windows for every rank: [steps, ranks, micro, block_size + 1] token ids.
  local n = (args.warmup + args.steps) * args.ranks * args.micro * (args.block_size + 1)
  local g, ids = zl.Generator(7), {}
  for i = 1, n do ids[i] = g:randint(args.vocab) - 1 end
  zl.save_safetensors(dir .. '/data.safetensors', { tokens = zl.tensor(ids, 'i64'):view(args.warmup + args.steps,
    args.ranks, args.micro, args.block_size + 1) })
  local cfg = { train_micro_batch_size_per_gpu = args.micro, gradient_accumulation_steps = 1,
    train_batch_size = args.micro * args.ranks, gradient_clipping = 1.0, steps_per_print = 1000000000,
    optimizer = { type = 'AdamW', params = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0.01 } },
    zero_optimization = { stage = 2 } }
  local f = assert(io.open(dir .. '/ds_config.json', 'w'))
  f:write(require('zlua.json').encode(cfg, 2))
  f:close()
end

local shape = fmt('--n_layer %d --n_embd %d --n_head %d --vocab %d --block_size %d --micro %d --steps %d --warmup %d '
  .. '--threads %d', args.n_layer, args.n_embd, args.n_head, args.vocab, args.block_size, args.micro, args.steps,
  args.warmup, args.threads)

local function zlua_cmd(stage)
  return fmt('%s OMP_NUM_THREADS=%d %s --nprocs %d %s --worker --stage %d --dir %s %s', machine.ENV, args.threads, exe,
    args.ranks, arg[0], stage, dir, shape)
end

-- The launcher picks the port of its rendezvous, so two runs at once do not collide.
local function deepspeed_cmd(stage)
  return fmt('%s DS_ACCELERATOR=cpu OMP_NUM_THREADS=%d deepspeed '
    .. '--num_gpus %d --master_port %d %s/zero_deepspeed.py --stage %d --weights %s/weights.safetensors '
    .. '--data %s/data.safetensors --config %s/ds_config.json %s', machine.ENV, args.threads, args.ranks,
    29500 + math.random(0, 999), here, stage, dir, dir, dir, shape)
end

-- Runs a command: {ms =, losses = {...}, version =}, or nil, why, skipped.
local function run(cmd)
  local p = io.popen(cmd .. ' 2>&1')
  local out = p:read('a')
  local _, _, code = p:close()
  local s = out:match('RESULT (%S+)')
  if s then
    local losses = {}
    for v in (out:match('LOSSES ([^\n]*)') or ''):gmatch('%S+') do losses[#losses + 1] = tonumber(v) end
    return { ms = tonumber(s) * 1e3, losses = losses, version = out:match('version (%S+)') }
  end
  local skip = out:match('SKIP ([^\n]*)')
  if skip or code == 77 then return nil, skip or 'skipped', true end
  return nil, cmd .. '\n' .. out:sub(-3000) .. fmt('\n(exit %s)', tostring(code))
end

local function load()
  local f = io.open('/proc/loadavg')
  local s = f and f:read('l') or '?'
  if f then f:close() end
  return s:match('^(%S+ %S+ %S+)') or s
end

local tokens = args.micro * args.ranks * args.block_size
print(fmt('GPT %d layers, %d wide, %d heads, vocabulary %d, micro %d x %d per rank, f32, AdamW, clipping 1.0; '
  .. '%d ranks x %d thread; %s, zlua with %s; median of %d steps after %d, median of %d launches', args.n_layer,
  args.n_embd, args.n_head, args.vocab, args.micro, args.block_size, args.ranks, args.threads, machine.cpu_model(),
  machine.blas(exe), args.steps, args.warmup, args['repeat']))
print(fmt('load before: %s', load()))
print(fmt('%-5s %10s %10s %8s %10s %10s %12s %12s', 'stage', 'zlua ms', 'DS ms', 'DS/zlua', 'zlua tok/s',
  'DS tok/s', 'max |dloss|', 'max rel'))
math.randomseed(os.time())
-- DeepSpeed is skipped, with the reason printed, unless both its launcher and its modules are there.
local function deepspeed_missing()
  if not args.ds then return 'not run (--ds=false)' end
  if not os.execute('command -v deepspeed >/dev/null 2>&1') then
    return 'skipped: no deepspeed launcher on PATH; python3 -m pip install torch deepspeed'
  end
  if not os.execute('python3 -c "import torch, deepspeed" >/dev/null 2>&1') then
    return 'skipped: python3 cannot import torch and deepspeed; python3 -m pip install torch deepspeed'
  end
end
local failed, ds_note, ds_version = false, deepspeed_missing(), nil
for stage in args.stages:gmatch('%d+') do
  stage = tonumber(stage)
  local ours, theirs, ol, tl = {}, {}, nil, nil
  for _ = 1, args['repeat'] do
    local r, why = run(zlua_cmd(stage))
    if r then ours[#ours + 1], ol = r.ms, r.losses
    else io.stderr:write('zero_vs_deepspeed.lua: zlua failed: ', why, '\n'); failed = true end
    if not ds_note then
      local d, dwhy, skipped = run(deepspeed_cmd(stage))
      if d then theirs[#theirs + 1], tl, ds_version = d.ms, d.losses, d.version
      elseif skipped then ds_note = dwhy
      else io.stderr:write('zero_vs_deepspeed.lua: DeepSpeed failed: ', dwhy, '\n'); failed = true end
    end
  end
  local zm = #ours > 0 and median(ours) or nil
  local dm = #theirs > 0 and median(theirs) or nil
  local dabs, drel = nil, nil
  if ol and tl and #ol == #tl then
    dabs, drel = 0, 0
    for i = 1, #ol do
      local d = math.abs(ol[i] - tl[i])
      dabs, drel = math.max(dabs, d), math.max(drel, d / math.abs(tl[i]))
    end
  end
  local function cell(v, f) return v and fmt(f, v) or '-' end
  print(fmt('%-5d %10s %10s %8s %10s %10s %12s %12s', stage, cell(zm, '%.1f'), cell(dm, '%.1f'),
    cell(zm and dm and dm / zm, '%.2fx'), cell(zm and tokens / zm * 1e3, '%.0f'),
    cell(dm and tokens / dm * 1e3, '%.0f'), cell(dabs, '%.3g'), cell(drel, '%.3g')))
  if ol then print(fmt('      zlua losses: %s', table.concat(ol, ' ', 1, math.min(#ol, 6)) .. ' ...')) end
  if tl then print(fmt('      DS losses:   %s', table.concat(tl, ' ', 1, math.min(#tl, 6)) .. ' ...')) end
end
print(fmt('load after: %s', load()))
if ds_version then print('DeepSpeed ' .. ds_version) end
if ds_note then print('DeepSpeed: ' .. ds_note) end
zl.core.remove_tree(dir)
os.exit(failed and 1 or 0)
