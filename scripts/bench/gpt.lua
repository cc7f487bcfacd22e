--[[ The GPT benchmark: training steps of zlua.nn.GPT (the GPT example's model)
  against the same model in PyTorch (gpt_torch.py beside this: same shapes,
  initialisation and AdamW), the two alternating in the same run: ms/step
  (median over the timed steps, then over --repeat launches), tokens/s,
  achieved GFLOP/s, minor page faults per steady-state step (the most of any
  launch), and the ratio
  PyTorch ms / zlua ms (above 1: zlua is faster). Each run is its own process.
  Run by hand (CTest runs a quick mode only to see that it works):
    zlua scripts/bench/gpt.lua [--configs anchor,l12] [--precision f32,bf16]
        [--threads 1,2] [--steps 10] [--warmup 8] [--repeat 3] [--device cpu|cuda]
        [--modes bare,engine] [--torch=false]

  Configurations (GPT-2 shapes, vocabulary 50257, random tokens):
    anchor  4 layers, 256 channels, 4 heads, batch 4 x 128 (the CPU anchor)
    l12     12 layers, 768 channels, 12 heads, batch 4 x 128
    gpu     12 layers, 768 channels, 12 heads, batch 8 x 1024 (the GPU anchor)
  zlua runs two ways: `bare`, the loop a PyTorch user writes (model, AdamW,
  backward, step), and `engine`, the same step through zlua.initialize (ZeRO
  stage 0, gradient clipping 1.0); bf16 always goes through the engine (bf16
  weights, f32 masters, as DeepSpeed's bf16) while PyTorch runs bf16 as its
  users do, autocast over f32 weights. --device cuda runs both on the GPU.

  Eight warm-up steps by default: oneDNN's sgemm takes its packing buffers
  (up to 1.3 MB) from malloc on every call, and Lua's garbage of the first
  steps splits the freed ones, so glibc's heap grows for a few steps (the
  zlua executable pre-faults the heap's first 16 MiB, so that growth costs
  no page faults; none of them are the engine's own tensors, which its
  block cache serves). ]]

local zl = require 'zlua'
local fmt = string.format

local CONFIGS = {
  anchor = { n_layer = 4, n_embd = 256, n_head = 4, batch = 4, block_size = 128 },
  l12 = { n_layer = 12, n_embd = 768, n_head = 12, batch = 4, block_size = 128 },
  gpu = { n_layer = 12, n_embd = 768, n_head = 12, batch = 8, block_size = 1024 },
}
local VOCAB = 50257

local args = zl.args(nil, { configs = 'anchor', precision = 'f32', threads = '', steps = 10, warmup = 8,
  ['repeat'] = 3, device = 'cpu', modes = 'bare,engine', torch = true, worker = '', n_layer = 0, n_embd = 0,
  n_head = 0, batch = 0, block_size = 0, seed = 1 })

-- Minor page faults of this process so far (field 10 of /proc/self/stat,
-- counted after the command name, which may hold spaces).
local function minflt()
  local f = io.open('/proc/self/stat')
  if not f then return 0 end
  local s = f:read('a')
  f:close()
  local rest = s:match('%) (.*)$') or ''
  local fields = {}
  for w in rest:gmatch('%S+') do fields[#fields + 1] = w end
  return tonumber(fields[8]) or 0
end

-- ---------------------------------------------------------------------------
-- One zlua run (a separate process): prints a RESULT line as gpt_torch.py does.
if args.worker ~= '' then
  local nn = require 'zlua.nn'
  local optim = require 'zlua.optim'
  local threads = math.tointeger(tonumber(args.threads)) or 1
  zl.set_num_threads(threads)
  zl.manual_seed(args.seed)
  local B, T = args.batch, args.block_size
  local model = nn.GPT { vocab_size = VOCAB, block_size = T, n_layer = args.n_layer, n_head = args.n_head,
    n_embd = args.n_embd }
  local on_device = args.device ~= 'cpu'
  if on_device then model:to(args.device) end
  local ids, tgt = {}, {}
  math.randomseed(args.seed)
  for i = 1, B * T do ids[i], tgt[i] = math.random(0, VOCAB - 1), math.random(0, VOCAB - 1) end
  local idx = zl.tensor(ids, 'i64'):view(B, T):to(args.device)
  local targets = zl.tensor(tgt, 'i64'):view(B, T):to(args.device)
  local step
  if args.worker == 'bare' then
    local opt = optim.AdamW(model:parameters(), { lr = 1e-3, weight_decay = 0.01 })
    step = function()
      local _, loss = model(idx, targets)
      loss:backward()
      opt:step()
      opt:zero_grad()
      return loss
    end
  else
    local engine = zl.initialize { model = model, config = {
      train_micro_batch_size_per_gpu = B, gradient_clipping = 1.0, steps_per_print = 1000000,
      optimizer = { type = 'AdamW', params = { lr = 1e-3, weight_decay = 0.01 } },
      bf16 = { enabled = args.precision == 'bf16' }, zero_optimization = { stage = 0 } } }
    engine:set_progress(false)
    step = function()
      local _, loss = engine(idx, targets)
      engine:backward(loss)
      engine:step()
      return loss
    end
  end
  local sync = on_device and zl.cuda.synchronize or function() end
  -- The count is read once before the loop: the first read's stdio buffer and
  -- strings, taken at the window's start, split a freed 1.3 MB oneDNN buffer
  -- and cost its 330 pages again inside the window.
  local times, losses, faults = {}, {}, minflt()
  for s = 1, args.warmup + args.steps do
    if s == args.warmup + 1 then faults = minflt() end
    sync()
    local t0 = zl.core.now()
    local loss = step()
    sync()
    times[#times + 1] = (zl.core.now() - t0) * 1e3
    losses[#losses + 1] = loss:float():item()
  end
  faults = minflt() - faults
  local timed = table.move(times, args.warmup + 1, #times, 1, {})
  local peak = on_device and zl.cuda.max_memory_allocated() or 0
  print(fmt('RESULT ms %.3f faults %.1f loss0 %.6f loss %.6f peak %d', require('zlua.util.stats').median(timed),
    faults / args.steps, losses[1], losses[#losses], peak))
  os.exit(0)
end

-- ---------------------------------------------------------------------------
-- The driver.
local exe = require('zlua.args').executable()
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local median = require('zlua.util.stats').median

local function list(s)
  local out = {}
  for w in tostring(s):gmatch('[^,%s]+') do out[#out + 1] = w end
  return out
end

local machine = dofile(here .. '/machine.lua')

-- Runs a command, returns the figures of its RESULT line, or nil, why and whether it skipped.
local function run(cmd)
  return machine.run(cmd, function(out)
    local ms, faults, loss0, loss = out:match('RESULT ms (%S+) faults (%S+) loss0 (%S+) loss (%S+)')
    return ms and { ms = tonumber(ms), faults = tonumber(faults), loss0 = tonumber(loss0), loss = tonumber(loss),
      peak = tonumber(out:match('peak (%d+)')), version = out:match('version (%S+)') }
  end)
end

-- Training FLOP per step: 6 per parameter per token for the matrix products
-- (the token embedding counts once, as the tied LM head's matrix; the
-- position embedding is a lookup), and 12 L T C per token for attention's
-- two products, forward and backward.
local function flop(c)
  local C, L, T = c.n_embd, c.n_layer, c.block_size
  local n = L * (12 * C * C + 13 * C) + 2 * C + VOCAB * C
  local tokens = c.batch * T
  return tokens * (6 * n + 12 * L * T * C)
end

-- The engine would put a host model on a GPU as DeepSpeed does: --device cpu pins it to the CPU.
local function worker_cmd(c, mode, precision, threads)
  return fmt('%s ZLUA_ACCELERATOR=%s %s %s --worker %s --device %s --precision %s --threads %d --steps %d ' ..
    '--warmup %d --n_layer %d --n_embd %d --n_head %d --batch %d --block_size %d --seed %d', machine.ENV,
    args.device == 'cpu' and 'cpu' or 'cuda', exe, arg[0], mode, args.device, precision, threads, args.steps,
    args.warmup, c.n_layer, c.n_embd, c.n_head, c.batch, c.block_size, args.seed)
end

local function torch_cmd(c, precision, threads)
  return fmt('%s python3 %s/gpt_torch.py --device %s --precision %s --threads %d --steps %d --warmup %d ' ..
    '--n_layer %d --n_embd %d --n_head %d --batch %d --block_size %d --seed %d --vocab %d', machine.ENV, here,
    args.device, precision, threads, args.steps, args.warmup, c.n_layer, c.n_embd, c.n_head, c.batch, c.block_size,
    args.seed, VOCAB)
end

local cores = tonumber(io.popen('nproc'):read('l')) or 2
local threads_list = args.threads ~= '' and list(args.threads) or (cores > 1 and { '1', tostring(cores) } or { '1' })
local modes = list(args.modes)
print(fmt('GPT training step, %s (%s), %d cores, device %s, zlua with %s; %d timed steps after %d warm-up, '
  .. 'median of %d launches', machine.cpu_model(), machine.cpu_flags(), cores, args.device, machine.blas(exe),
  args.steps, args.warmup, args['repeat']))
print(fmt('%-7s %-5s %3s %-7s %10s %10s %7s %10s %9s %9s %9s%s', 'config', 'prec', 'thr', 'zlua', 'zlua ms',
  'torch ms', 'ratio', 'tokens/s', 'GFLOP/s', 'faults/st', 'loss',
  args.device ~= 'cpu' and fmt(' %9s %9s', 'peak MB', 'torch MB') or ''))
local torch_note, failed = nil, false
for _, name in ipairs(list(args.configs)) do
  local c = CONFIGS[name]
  if not c then
    io.stderr:write(fmt('gpt.lua: unknown configuration %q (anchor, l12, gpu)\n', name))
    os.exit(2)
  end
  -- The precisions take turns launch by launch, so that a machine whose
  -- speed drifts during the run moves the f32 and bf16 figures alike.
  for _, th in ipairs(threads_list) do
    local threads = math.tointeger(tonumber(th))
    local rows = {}
    for _, precision in ipairs(list(args.precision)) do
      local row = { precision = precision, ours = {}, theirs = {} }
      for _, mode in ipairs(modes) do
        if not (precision == 'bf16' and mode == 'bare') then row.ours[#row.ours + 1] = { mode = mode, ms = {} } end
      end
      rows[#rows + 1] = row
    end
    for _ = 1, args['repeat'] do
      for _, row in ipairs(rows) do
        for _, o in ipairs(row.ours) do
          local r, why = run(worker_cmd(c, o.mode, row.precision, threads))
          if r then
            o.ms[#o.ms + 1], o.last = r.ms, r
            o.faults = math.max(o.faults or 0, r.faults)
          else
            o.why, failed = why, true
          end
        end
        if args.torch and not torch_note then
          local r, why, skipped = run(torch_cmd(c, row.precision, threads))
          if r then row.theirs[#row.theirs + 1], row.theirs.version, row.theirs.peak = r.ms, r.version, r.peak
          elseif skipped then torch_note = why
          else row.theirs.why, failed = why, true end
        end
      end
    end
    for _, row in ipairs(rows) do
      local precision, theirs = row.precision, row.theirs
      local tms = #theirs > 0 and median(theirs) or nil
      for _, o in ipairs(row.ours) do
        if #o.ms == 0 then
          print(fmt('%-7s %-5s %3d %-7s failed: %s', name, precision, threads, o.mode, o.why or '?'))
        else
          local ms = median(o.ms)
          local mb = function(b) return b and fmt('%.0f', b / 2 ^ 20) or '-' end
          print(fmt('%-7s %-5s %3d %-7s %10.1f %10s %7s %10.0f %9.1f %9.1f %9.4f%s', name, precision, threads, o.mode,
            ms, tms and fmt('%.1f', tms) or '-', tms and fmt('%.2fx', tms / ms) or '-',
            c.batch * c.block_size / (ms / 1e3), flop(c) / (ms / 1e3) / 1e9, o.faults, o.last.loss,
            args.device ~= 'cpu' and fmt(' %9s %9s', mb(o.last.peak), mb(theirs.peak)) or ''))
        end
      end
      if theirs.why then print(fmt('%-7s %-5s %3d torch   failed: %s', name, precision, threads, theirs.why)) end
    end
  end
end
if torch_note then print('torch: ' .. torch_note) end
os.exit(failed and 1 or 0)
