--[[ The offload benchmark: step time of the GPT model (zlua.nn.GPT) at ZeRO
  stage 3 with no offload, with offload to cpu, and with offload to NVMe of
  the optimizer state and of the optimizer state and parameters, pipelined;
  for NVMe the bytes moved per step, the rate achieved over the optimizer
  step, and the ratio of the step time to the larger of the compute time (the
  step without offload) and the I/O time (bytes over the disk's own
  bandwidth, measured with the same aio block in the same run). Run by
  hand (CTest runs a tiny model only to see that it works):
    zlua scripts/bench/offload.lua --folder /nvme/dir [--steps 8] [--warmup 2]
        [--n_layer 4] [--n_embd 512] [--block_size 64] [--batch 8]
        [--sub_group_size 1e7] [--buffer_count 6] [--precision bf16|f32] [--disk_size 1G] ]]

local zl = require 'zlua'
local fmt = string.format

local USAGE = [=[
usage: zlua scripts/bench/offload.lua --folder DIR [--steps 8] [--warmup 2] [--n_layer 4] [--n_embd 512]
         [--block_size 64] [--batch 8] [--sub_group_size 1e7] [--buffer_count 6] [--precision bf16]
         [--disk_size 1G]]=]

local o, die = require('zlua.args').script('offload', USAGE, arg, { folder = '', steps = 8, warmup = 2, n_layer = 4,
  n_embd = 512, block_size = 64, batch = 8, sub_group_size = 1e7, precision = 'bf16', disk_size = '1G',
  worker = '', threads = 0, buffer_count = 6 })
if o.folder == '' then die('--folder is required\n' .. USAGE) end

local AIO = { block_size = 1048576, queue_depth = 32, intra_op_parallelism = 1, single_submit = false,
  overlap_events = true }

local median = require('zlua.util.stats').median

-- One configuration, in its own process: prints RESULT step_s opt_step_s bytes_per_step.
if o.worker ~= '' then
  local nn = require 'zlua.nn'
  if o.threads > 0 then zl.set_num_threads(o.threads) end
  local T, V = o.block_size, 96
  local z = { stage = 3, sub_group_size = o.sub_group_size, stage3_param_persistence_threshold = 0 }
  if o.worker == 'cpu' then
    z.offload_optimizer = { device = 'cpu' }
    z.offload_param = { device = 'cpu' }
  elseif o.worker == 'nvme_opt' or o.worker == 'nvme_both' then
    z.offload_optimizer = { device = 'nvme', nvme_path = o.folder, buffer_count = o.buffer_count, pipeline_read = true,
      pipeline_write = true }
    if o.worker == 'nvme_both' then
      z.offload_param = { device = 'nvme', nvme_path = o.folder, buffer_count = 8, max_in_cpu = 0 }
    end
  end
  local cfg = { train_batch_size = o.batch, optimizer = { type = 'AdamW', params = { lr = 1e-4 } },
    bf16 = { enabled = o.precision == 'bf16' }, zero_optimization = z, aio = AIO, steps_per_print = 1e9 }
  zl.manual_seed(1)
  local model = nn.GPT { vocab_size = V, block_size = T, n_layer = o.n_layer, n_head = 8, n_embd = o.n_embd }
  -- Counted before initialize: at stage 3 a released parameter has no elements.
  local params = model:num_parameters()
  local engine = zl.initialize { model = model, config = cfg }
  engine:set_progress(false)
  local g = zl.Generator(3)
  local function moved()
    local rep = engine:memory_report()
    return rep.swap_read_bytes + rep.swap_write_bytes
  end
  local steps, opt_steps, bytes = {}, {}, {}
  for s = 1, o.warmup + o.steps do
    local t = {}
    for i = 1, o.batch * (T + 1) do t[i] = g:randint(V) - 1 end
    local ids = zl.tensor(t, 'i64'):view(o.batch, T + 1)
    local x, y = ids:narrow(2, 1, T):contiguous(), ids:narrow(2, 2, T):contiguous()
    local b0, t0 = moved(), zl.core.now()
    local _, loss = engine(x, y)
    engine:backward(loss)
    local t1 = zl.core.now()
    engine:step()
    local t2 = zl.core.now()
    if s > o.warmup then
      steps[#steps + 1], opt_steps[#opt_steps + 1], bytes[#bytes + 1] = t2 - t0, t2 - t1, moved() - b0
    end
  end
  print(fmt('RESULT %.6f %.6f %d %d', median(steps), median(opt_steps), median(bytes), params))
  os.exit(0, true)
end

-- The disk's own bandwidth with the same aio block: a file written, then read.
local aio = require 'zlua.offload.aio'
local function disk_bandwidth()
  local units = { K = 1 << 10, M = 1 << 20, G = 1 << 30 }
  local num, unit = o.disk_size:upper():match('^(%d+)([KMG]?)')
  local size = math.tointeger(tonumber(num) * (units[unit] or 1))
  zl.core.mkdirs(o.folder)
  local path = o.folder .. '/zlua_offload_bench.swp'
  local engine = aio.new(AIO)
  local buf = aio.buffer(size, 'u8')
  buf:fill_(7)
  local w, r = {}, {}
  for _ = 1, 3 do
    local t0 = zl.core.now()
    engine:write(path, buf, 0):wait()
    local t1 = zl.core.now()
    engine:read(path, buf, 0):wait()
    local t2 = zl.core.now()
    w[#w + 1], r[#r + 1] = size / (t1 - t0), size / (t2 - t1)
  end
  engine:close()
  os.remove(path)
  return (median(w)), (median(r))
end

local exe = require('zlua.args').executable()
local function run(mode)
  local cmd = fmt('%s %s --worker %s --folder %s --steps %d --warmup %d --n_layer %d --n_embd %d --block_size %d '
    .. '--batch %d --sub_group_size %d --buffer_count %d --precision %s 2>&1', exe, arg[0], mode, o.folder, o.steps,
    o.warmup, o.n_layer, o.n_embd, o.block_size, o.batch, math.floor(o.sub_group_size), o.buffer_count, o.precision)
  local p = io.popen(cmd)
  local out = p:read('a')
  p:close()
  local step, opt_step, bytes, params = out:match('RESULT (%S+) (%S+) (%d+) (%d+)')
  if not step then die('a run failed: ' .. cmd .. '\n' .. out) end
  return tonumber(step), tonumber(opt_step), tonumber(bytes), tonumber(params)
end

local wbw, rbw = disk_bandwidth()
print(fmt('disk (%s, aio block_size 1M, queue_depth 32): write %.2f GB/s, read %.2f GB/s', o.folder, wbw / 1e9,
  rbw / 1e9))
local base, _, _, params = run('none')
print(fmt('GPT %d layers, %d wide, %.1fM parameters, batch %d x %d, %s, stage 3; median of %d steps', o.n_layer,
  o.n_embd, params / 1e6, o.batch, o.block_size, o.precision, o.steps))
print(fmt('%-10s %9s %9s %12s %10s %9s %22s', 'offload', 'step s', 'opt s', 'MB moved', 'GB/s', 'io s',
  'step / max(compute, io)'))
for _, mode in ipairs({ 'none', 'cpu', 'nvme_opt', 'nvme_both' }) do
  local step, opt_step, bytes = run(mode)
  if mode == 'none' then step = base end
  if bytes > 0 then
    -- Half read, half written (every swapped byte goes both ways once a step).
    local io = bytes / 2 / rbw + bytes / 2 / wbw
    print(fmt('%-10s %9.3f %9.3f %12.1f %10.2f %9.3f %22.2f', mode, step, opt_step, bytes / 1e6,
      bytes / opt_step / 1e9, io, step / math.max(base, io)))
  else
    print(fmt('%-10s %9.3f %9.3f %12s %10s %9s %22s', mode, step, opt_step, '-', '-', '-', '-'))
  end
end
