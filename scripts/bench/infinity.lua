--[[ The ZeRO-Infinity benchmark: the largest character GPT whose training
  state (16 bytes a parameter: the f32 master, Adam's two moments and the f32
  gradient) is --multiple times a memory limit, trained at stage 3 with the
  optimizer state and the parameters both on NVMe (max_in_cpu 0), inside a
  memory cgroup of that limit. Run by hand (CTest runs a tiny model only
  to see that it works):
    zlua scripts/bench/infinity.lua --nvme_path DIR [--mem 400M] [--multiple 8]
        [--n_embd 1024] [--n_layer N] [--steps 3] [--batch 4] [--block_size 64]
        [--bf16] [--aio_block 1M] [--queue_depth 8] [--disk_size 256M] [--data FILE]

  The width is --n_embd (n_head = n_embd / 64) and the depth the most layers
  that keep the state within --multiple x --mem, unless --n_layer is given.
  The swap buffers, the gathered parameters and the activations (gradient
  checkpointing is turned on when they would take more than an eighth of the
  limit) are sized from the limit; the config is printed. As root the
  training runs in a child process inside a memory cgroup of --mem (v1 or v2),
  so a run the limit is too small for ends with "killed by the memory limit
  at step N" instead of silently; otherwise nothing enforces the limit and
  the figures are only reported against it.

  Before training, scripts/aio_bench.lua measures the disk's own direct-I/O
  bandwidth with the libaio engine (O_DIRECT) at the config's aio block_size,
  queue_depth (DeepSpeed's default, 8, unless --queue_depth) and threads: a
  --disk_size file in --nvme_path written, then read, three times (medians).
  Each step prints its loss and time, the NVMe bytes it read and wrote (the
  engine's swap counters), the time the swap's I/O was in flight (io busy: the
  libaio engine had a request queued or moving) and the part of it the step
  waited for (io wait), and:
    disk s     = read / read bandwidth + written / write bandwidth: the time
                 the disk alone needs for the step's traffic;
    efficiency = disk s / io busy s: the swap's rate while it moves data, as
                 a share of the disk's own (100%: the swap keeps the disk as
                 busy as the raw benchmark does);
    hidden     = 1 - io wait / io busy s: the share of the I/O time that the
                 compute hid (the step did not wait for it);
    of step    = disk s / step s: the step's traffic over the whole step, as
                 a share of the disk's bandwidth (a step that computes longer
                 than the disk needs cannot reach 100%).
  The line after the steps sums the steps after the first, which allocates
  the swap buffers and has no optimizer state to read yet. Then the peak resident
  memory of the training process (VmHWM) and the cgroup's peak usage against
  the limit; then the disk measured again, and that line's disk s, efficiency
  and of step against it (a virtual disk's rate can move by half in minutes).
  MB and GB are 1e6 and 1e9 bytes, MiB 2^20. ]]

local zl = require 'zlua'
local fmt = string.format

local USAGE = [=[
usage: zlua scripts/bench/infinity.lua --nvme_path DIR [--mem 400M] [--multiple 8] [--n_embd 1024] [--n_layer N]
         [--steps 3] [--batch 4] [--block_size 64] [--bf16] [--aio_block 1M] [--queue_depth 8]
         [--disk_size 256M] [--data FILE]]=]

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local DEFAULTS = { nvme_path = '', mem = '400M', multiple = 8.0, n_embd = 1024, n_layer = 0, steps = 3, batch = 4,
  block_size = 64, bf16 = false, aio_block = '1M', queue_depth = 8, disk_size = '256M',
  data = here .. '/../../examples/gpt/data/zlua.txt', child = false, read_bw = 0.0, write_bw = 0.0 }
local o, die = require('zlua.args').script('infinity', USAGE, arg, DEFAULTS)
if o.nvme_path == '' then die('--nvme_path is required\n' .. USAGE) end
local cgroup = dofile(here .. '/../../examples/common/cgroup.lua')
local limit = cgroup.bytes(o.mem)
if not limit then die(fmt("--mem: '%s' is not a size (400M, 1G)", o.mem)) end
local aio_block = cgroup.bytes(o.aio_block)
if not aio_block or aio_block % 4096 ~= 0 then die(fmt("--aio_block: '%s' is not a multiple of 4K", o.aio_block)) end
local disk_size = cgroup.bytes(o.disk_size)
if not disk_size or disk_size % aio_block ~= 0 then
  die(fmt("--disk_size: '%s' is not a whole number of --aio_block blocks", o.disk_size))
end
if o.steps < 1 or o.batch < 1 or o.block_size < 1 or o.n_embd < 1 or o.n_layer < 0 or o.multiple <= 0 then
  die('--steps, --batch, --block_size, --n_embd and --multiple must be positive, --n_layer 0 (chosen) or more')
end

local MiB = 2 ^ 20
local text = zl.read_text(o.data)
local vocab = zl.text_vocab(text)
local n_head = math.max(1, o.n_embd // 64)
while o.n_embd % n_head ~= 0 do n_head = n_head - 1 end
local wsize = o.bf16 and 2 or 4

local function gpt_config(n_layer)
  return { vocab_size = #vocab, block_size = o.block_size, n_layer = n_layer, n_head = n_head, n_embd = o.n_embd }
end

-- What the buffers and the activations may take, as shares of the limit: what
-- is left holds the process itself and (until the engine swaps it) the f32
-- gradient partition.
local OPTIMIZER_SHARE, PARAM_SHARE, GATHERED_SHARE, ACTIVATION_SHARE = 1 / 4, 1 / 8, 1 / 8, 1 / 8

-- The config, from the limit and the shape: the same in the parent, which
-- prints it, and in the child, which trains with it.
local function plan(n_layer)
  local E = o.n_embd
  -- A sub-group, a parameter buffer and a gather each hold at least one whole parameter.
  local largest = math.max(4 * E * E, #vocab * E, o.block_size * E)
  -- buffer_count 6 over Adam's three f32 tensors (master, two moments) is two
  -- buffers of a sub-group each, so the pipeline reads one while stepping the other.
  local sub_group = math.max(largest, math.floor(limit * OPTIMIZER_SHARE / (2 * 3 * 4)))
  local param_buffers = math.max(2, math.min(8, math.floor(limit * PARAM_SHARE / (largest * wsize))))
  local live = math.max(largest, math.floor(limit * GATHERED_SHARE / wsize))
  local act = require('zlua.nn.gpt_activations')
  local estimate = function(ckpt)
    return act.estimate(gpt_config(n_layer), { batch = o.batch, precision = o.bf16 and 'bf16' or 'f32',
      checkpointing = ckpt }).peak
  end
  local checkpointing = estimate(false) > limit * ACTIVATION_SHARE
  local aio = { block_size = aio_block, queue_depth = o.queue_depth, intra_op_parallelism = 1, single_submit = false,
    overlap_events = true }
  local cfg = {
    train_batch_size = o.batch, gradient_clipping = 1.0,
    optimizer = { type = 'AdamW', params = { lr = 3e-4, betas = { 0.9, 0.95 }, weight_decay = 0.1 } },
    bf16 = { enabled = o.bf16 },
    zero_optimization = {
      stage = 3, sub_group_size = sub_group, stage3_param_persistence_threshold = 1e4,
      stage3_prefetch_bucket_size = largest, stage3_max_live_parameters = live, stage3_max_reuse_distance = 0,
      reduce_bucket_size = largest,
      offload_optimizer = { device = 'nvme', nvme_path = o.nvme_path, buffer_count = 6, pipeline_read = true,
        pipeline_write = true },
      offload_param = { device = 'nvme', nvme_path = o.nvme_path, buffer_count = param_buffers, buffer_size = largest,
        max_in_cpu = 0 },
    },
    aio = aio, steps_per_print = 1e9,
  }
  local buffers = { optimizer = 2 * 3 * 4 * sub_group, params = param_buffers * largest * wsize,
    gathered = live * wsize, activations = estimate(checkpointing) }
  return cfg, checkpointing, buffers
end

-- The training, in the child process (inside the cgroup when there is one).
if o.child then
  io.stdout:setvbuf('line')
  local nn = require 'zlua.nn'
  local zero = require 'zlua.zero'
  -- Freed activations and gradients leave the process, so what it holds is what it uses.
  zl.set_memory_release(1 << 20)
  local ids = zl.text_encode(text, vocab)
  local at_start = cgroup.resident_peak()
  local cfg, checkpointing = plan(o.n_layer)
  zl.manual_seed(1)
  local t0 = zl.core.now()
  local model = zero.Init(cfg, function() return nn.GPT(gpt_config(o.n_layer)) end)
  if checkpointing then model:gradient_checkpointing_enable() end
  local engine = zl.initialize { model = model, config = cfg }
  engine:set_progress(false)
  local psi = 0
  for _, e in ipairs(engine.zero.entries) do psi = psi + e.n end
  print(fmt('set up in %.1f s: the engine trains %d parameters, %.1f MiB of training state; the process held %.0f MiB '
    .. 'before the model (its libraries, the text)', zl.core.now() - t0, psi, 16 * psi / MiB, at_start / MiB))
  print(fmt('%4s %8s %8s %9s %9s %9s %9s %8s %10s %7s %8s', 'step', 'loss', 'step s', 'read MB', 'write MB',
    'io busy s', 'io wait s', 'disk s', 'efficiency', 'hidden', 'of step'))

  local function row(label, loss, secs, read, written, busy, wait)
    local disk = read / o.read_bw + written / o.write_bw
    print(fmt('%4s %8s %8.2f %9.1f %9.1f %9.2f %9.2f %8.2f %9.0f%% %6.0f%% %7.0f%%', label, loss, secs, read / 1e6,
      written / 1e6, busy, wait, disk, busy > 0 and 100 * disk / busy or 0, busy > 0 and 100 * (1 - wait / busy) or 0,
      100 * disk / secs))
  end

  local g = zl.Generator(1)
  local n, T = ids:size(1), o.block_size
  local rest = { secs = 0, read = 0, written = 0, busy = 0, wait = 0 }
  for step = 1, o.steps do
    local xs, ys = {}, {}
    for b = 1, o.batch do
      local at = g:randint(n - T)
      xs[b], ys[b] = ids:narrow(1, at, T), ids:narrow(1, at + 1, T)
    end
    local x, y = zl.stack(xs), zl.stack(ys)
    local r0, s0 = engine:memory_report(), zl.core.now()
    local _, loss = engine(x, y)
    engine:backward(loss)
    engine:step()
    local secs, r1 = zl.core.now() - s0, engine:memory_report()
    local read, written = r1.swap_read_bytes - r0.swap_read_bytes, r1.swap_write_bytes - r0.swap_write_bytes
    local busy, wait = r1.io_busy_seconds - r0.io_busy_seconds, r1.io_seconds - r0.io_seconds
    row(tostring(step), fmt('%.4f', loss:float():item()), secs, read, written, busy, wait)
    if step > 1 then
      rest.secs, rest.read, rest.written = rest.secs + secs, rest.read + read, rest.written + written
      rest.busy, rest.wait = rest.busy + busy, rest.wait + wait
    end
  end
  if o.steps > 2 then row(fmt('2-%d', o.steps), '', rest.secs, rest.read, rest.written, rest.busy, rest.wait) end
  local rep = engine:memory_report()
  print(fmt('the engine holds: working parameters %.1f MiB (their swap buffers included), gradients %.1f MiB, '
    .. 'optimizer swap buffers %.1f MiB; on NVMe %.1f MiB', rep.params / MiB, rep.grads / MiB,
    (rep.bucket_buffers.swap or 0) / MiB, (rep.nvme or 0) / MiB))
  -- VmHWM counts the libraries' shared pages, which the cgroup is charged for only where this process read them first.
  print(fmt('peak resident memory of the training process: %.1f MiB (VmHWM, shared library pages included)',
    cgroup.resident_peak() / MiB))
  os.exit(0, true)
end

-- The parent: the model chosen, the config printed, the disk measured, then the child.
local machine = dofile(here .. '/machine.lua')
local nn = require 'zlua.nn'
-- Counted on real modules, as the engine counts them (the tied head once).
local one = nn.GPT(gpt_config(1)):num_parameters()
local per_layer = nn.TransformerBlock { n_embd = o.n_embd, n_head = n_head }:num_parameters()
local n_layer = o.n_layer
if n_layer == 0 then
  n_layer = math.max(1, 1 + math.floor((o.multiple * limit / 16 - one) / per_layer))
end
local psi = one + (n_layer - 1) * per_layer
local cfg, checkpointing, buffers = plan(n_layer)

print(fmt('infinity: %s; GPT %d layers x %d wide, %d heads, vocabulary %d, %.1fM parameters: training state '
  .. '%.0f MiB = %.2f x the %.0f MiB limit; batch %d x %d, %s', machine.cpu_model(), n_layer, o.n_embd, n_head,
  #vocab, psi / 1e6, 16 * psi / MiB, 16 * psi / limit, limit / MiB, o.batch, o.block_size, o.bf16 and 'bf16' or 'f32'))
print('config: ' .. require('zlua.json').encode(cfg))
print(fmt('planned within the %.0f MiB limit: optimizer swap buffers %.0f MiB, parameter swap buffers %.0f MiB, '
  .. 'gathered parameters up to %.0f MiB, activations about %.0f MiB (gradient checkpointing %s)', limit / MiB,
  buffers.optimizer / MiB, buffers.params / MiB, buffers.gathered / MiB, buffers.activations / MiB,
  checkpointing and 'on' or 'off'))

local made_folder = not zl.core.exists(o.nvme_path)
local swap_folder = o.nvme_path .. '/zlua_swap'
local made_swap = not zl.core.exists(swap_folder)
local ok, err = pcall(zl.core.mkdirs, o.nvme_path)
if not ok then die(require('zlua.args').message(err)) end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local exe = require('zlua.args').executable()

-- The disk alone, by scripts/aio_bench.lua with the config's aio block, in
-- its own process outside the cgroup (its buffer is no part of the training):
-- write and read bandwidth in bytes/s, and whether the folder took O_DIRECT.
local function measure_disk()
  local bench = fmt('%s %s --folder %s --size %d --block_sizes %d --queue_depths %d --threads %d --loops 3 2>&1',
    quote(exe), quote(here .. '/../aio_bench.lua'), quote(o.nvme_path), disk_size, cfg.aio.block_size,
    cfg.aio.queue_depth, cfg.aio.intra_op_parallelism)
  local measured = assert(io.popen(bench))
  local report = measured:read('a')
  measured:close()
  local write_gbs, read_gbs = report:match('best [^\n]*%(write ([%d.]+) GB/s, read ([%d.]+) GB/s%)')
  if not write_gbs then die('the disk measurement failed: ' .. bench .. '\n' .. report) end
  return tonumber(write_gbs) * 1e9, tonumber(read_gbs) * 1e9, not report:find('does not take O_DIRECT', 1, true)
end
local write_bw, read_bw, direct = measure_disk()
print(fmt('disk: %s, libaio %s, block_size %s, queue_depth %d, a %.0f MiB file, median of 3: write %.3f GB/s, '
  .. 'read %.3f GB/s', o.nvme_path, direct and 'O_DIRECT' or 'buffered (the folder refuses O_DIRECT)', o.aio_block,
  o.queue_depth, disk_size / MiB, write_bw / 1e9, read_bw / 1e9))

local cg
if cgroup.root() then
  local cerr
  cg, cerr = cgroup.new('zlua-infinity-bench', limit)
  if not cg then die(cerr) end
  print(fmt('memory limit: %.0f MiB, enforced by the cgroup %s', limit / MiB, cg.path))
else
  print(fmt('memory limit: %.0f MiB, enforced by nothing (not root: no cgroup); the figures are only reported '
    .. 'against it', limit / MiB))
end

local argv = { quote(exe), quote(arg[0]), '--child', '--n_layer', n_layer,
  '--read_bw', fmt('%.17g', read_bw), '--write_bw', fmt('%.17g', write_bw) }
for _, k in ipairs({ 'nvme_path', 'mem', 'n_embd', 'steps', 'batch', 'block_size', 'aio_block', 'queue_depth',
  'data' }) do
  argv[#argv + 1] = '--' .. k .. ' ' .. quote(o[k])
end
if o.bf16 then argv[#argv + 1] = '--bf16' end
-- The child joins the cgroup before it starts, so all it ever holds is charged there.
local cmd = (cg and 'echo $$ > ' .. quote(cg.procs) .. ' && ' or '') .. 'exec ' .. table.concat(argv, ' ') .. ' 2>&1'
local p = assert(io.popen(cmd))
local set_up, done, rest = false, 0, nil
for line in p:lines() do
  print(line)
  set_up = set_up or line:find('^set up in') ~= nil
  done = tonumber(line:match('^%s*(%d+) ')) or done
  local secs, read, written, busy = line:match('^%s*2%-%d+%s+([%d.]+)%s+([%d.]+)%s+([%d.]+)%s+([%d.]+)')
  if secs then rest = { secs = tonumber(secs), read = tonumber(read) * 1e6, written = tonumber(written) * 1e6,
    busy = tonumber(busy) } end
end
local _, how, code = p:close()

local failed = how ~= 'exit' or code ~= 0
local peak = cg and cg:peak()
if peak then
  print(fmt('cgroup peak usage: %.1f MiB of the %.0f MiB limit (%.0f%%)', peak / MiB, limit / MiB, 100 * peak / limit))
end

-- A shared or virtual disk's own rate drifts from minute to minute: measured
-- again after the steps, the later steps' figures against it too.
if rest then
  local w2, r2 = measure_disk()
  local disk = rest.read / r2 + rest.written / w2
  print(fmt('disk again after the steps: write %.3f GB/s, read %.3f GB/s; steps 2-%d against it: disk s %.2f, '
    .. 'efficiency %.0f%%, of step %.0f%%', w2 / 1e9, r2 / 1e9, o.steps, disk,
    rest.busy > 0 and 100 * disk / rest.busy or 0, 100 * disk / rest.secs))
end
if failed then
  local at = set_up and fmt('at step %d (after %d of %d steps)', done + 1, done, o.steps) or 'while setting up'
  local killed = how == 'signal' and code == 9 or how == 'exit' and code == 137
  if killed and cg and cg:oom_kills() > 0 then
    print('killed by the memory limit ' .. at)
  elseif how == 'signal' then
    print(fmt('the training process was killed by signal %d %s', code, at))
  else
    print(fmt('the training process failed (exit status %d) %s', code, at))
  end
end

if cg then
  local rok, rerr = cg:remove()
  if not rok then print(rerr) end
end
-- A killed child leaves its swap files: the folder made for this run goes with them.
if made_swap and zl.core.exists(swap_folder .. '/.zlua_swap') then zl.core.remove_tree(swap_folder) end
if made_folder then os.remove(o.nvme_path) end
os.exit(failed and 1 or 0)
