--[=[ ZeRO-Infinity on this machine: a character GPT whose f32 model states
  (16 bytes per parameter: bf16 weights and gradients, f32 masters and Adam's
  two moments) are several times the memory the process may use, trained at
  stage 3 with both the optimizer state and the parameters offloaded to NVMe
  through libaio. The process puts itself into a memory cgroup limited to
  --ram (v1 or v2; needs root), builds the model already partitioned
  (zlua.zero.Init), and prints each step's loss and time, then the peak
  resident memory and the cgroup's peak usage. Run by hand:
    zlua examples/gpt/infinity.lua --nvme_path /nvme/dir [--ram 1G] [--n_layer 12]
        [--n_embd 1024] [--steps 8] [--batch 4] [--block_size 64] [--lr 3e-4] ]=]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local zero = require 'zlua.zero'
local fmt = string.format

local USAGE = [=[
usage: zlua examples/gpt/infinity.lua --nvme_path DIR [--ram 1G] [--n_layer 12] [--n_embd 1024] [--steps 8]
         [--batch 4] [--block_size 64] [--lr 3e-4] [--data FILE]]=]
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local o, die = require('zlua.args').script('infinity', USAGE, arg, { nvme_path = '', ram = '1G', n_layer = 12,
  n_embd = 1024, steps = 8, batch = 4, block_size = 64, lr = 3e-4, data = here .. '/data/zlua.txt' })
if o.nvme_path == '' then die('--nvme_path is required\n' .. USAGE) end
io.stdout:setvbuf('line')

local cgroup = dofile(here .. '/../common/cgroup.lua')
local ram = cgroup.bytes(o.ram)
if not ram then die(fmt("--ram: '%s' is not a size (1G, 768M)", o.ram)) end

local pid = zl.core.getpid()
local cg, err = cgroup.new('zlua-infinity', ram)
if not cg then die(err) end
local joined, jerr = cg:join(pid)
if not joined then
  cg:remove()
  die(jerr)
end

-- Freed activations and gradients leave the process, so what it holds is what it uses.
zl.set_memory_release(1 << 20)

local text = zl.read_text(o.data)
local vocab = zl.text_vocab(text)
local ids = zl.text_encode(text, vocab)
local T = o.block_size
local cfg = {
  train_batch_size = o.batch, gradient_clipping = 1.0,
  optimizer = { type = 'AdamW', params = { lr = o.lr, betas = { 0.9, 0.95 }, weight_decay = 0.1 } },
  scheduler = { type = 'WarmupLR', params = { warmup_min_lr = 0, warmup_max_lr = o.lr, warmup_num_steps = 4,
    warmup_type = 'linear' } },
  bf16 = { enabled = true },
  zero_optimization = {
    stage = 3, sub_group_size = 1e7, stage3_param_persistence_threshold = 1e4,
    stage3_prefetch_bucket_size = 5e6, stage3_max_live_parameters = 3e7, stage3_max_reuse_distance = 0,
    reduce_bucket_size = 5e6,
    offload_optimizer = { device = 'nvme', nvme_path = o.nvme_path, buffer_count = 6, pipeline_read = true,
      pipeline_write = true },
    offload_param = { device = 'nvme', nvme_path = o.nvme_path, buffer_count = 6, buffer_size = 1e8, max_in_cpu = 0 },
  },
  aio = { block_size = 1048576, queue_depth = 32, intra_op_parallelism = 1, single_submit = false,
    overlap_events = true },
  steps_per_print = 1e9,
}

zl.manual_seed(1)
local t0 = zl.core.now()
local model = zero.Init(cfg, function()
  return nn.GPT { vocab_size = #vocab, block_size = T, n_layer = o.n_layer, n_head = 16, n_embd = o.n_embd }
end)
local engine = zl.initialize { model = model, config = cfg, args = { nvme_path = o.nvme_path } }
engine:set_progress(true, o.steps)   -- on a terminal, with the time left; each step's line goes above it
local psi = 0
for _, e in ipairs(engine.zero.entries) do psi = psi + e.n end
print(fmt('infinity: GPT %d layers x %d wide, %.1fM parameters; f32 model states %.2f GiB = %.1fx the %.2f GiB '
  .. 'memory limit (%s); set up in %.1f s', o.n_layer, o.n_embd, psi / 1e6, 16 * psi / 2 ^ 30, 16 * psi / ram,
  ram / 2 ^ 30, cg.path, zl.core.now() - t0))

local g = zl.Generator(1)
local n = ids:size(1)
for step = 1, o.steps do
  local xi, yi = {}, {}
  for b = 0, o.batch - 1 do
    local s = g:randint(n - T - 1) - 1
    for t = 1, T do
      xi[b * T + t] = s + t - 1
      yi[b * T + t] = s + t
    end
  end
  local x = ids:index_select(1, zl.tensor(xi, 'i64')):view(o.batch, T)
  local y = ids:index_select(1, zl.tensor(yi, 'i64')):view(o.batch, T)
  local s0 = zl.core.now()
  local _, loss = engine(x, y)
  engine:backward(loss)
  engine:step()
  engine:print(fmt('step %d loss %.4f  %.1f s', step, loss:float():item(), zl.core.now() - s0))
end

local cg_peak = cg:peak()
print(fmt('infinity: peak resident memory %.2f GiB (VmHWM), cgroup peak %s, limit %.2f GiB; NVMe: %.2f GiB',
  cgroup.resident_peak() / 2 ^ 30, cg_peak and fmt('%.2f GiB', cg_peak / 2 ^ 30) or '?', ram / 2 ^ 30,
  ((engine:memory_report().nvme) or 0) / 2 ^ 30))

cg:remove(pid)
