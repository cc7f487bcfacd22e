--[[ The LLaMA benchmark: training steps of zlua.nn.Llama against the same
  model in PyTorch (llama_torch.py beside this: same shapes, rotary
  positions, grouped-query attention, initialisation and AdamW), the two
  alternating in the same run: ms/step (median over the timed steps, then
  over --repeat launches), tokens/s and the ratio PyTorch ms / zlua ms
  (above 1: zlua is faster). Each run is its own process. Run by hand
  (CTest runs one step only to see that it works):
    zlua scripts/bench/llama.lua [--precision f32,bf16] [--threads 2] [--steps 10]
        [--warmup 3] [--repeat 3] [--torch=false]
  The model: 4 layers, hidden 512, intermediate 1536, 8 query heads and 2
  key/value heads of 64, vocabulary 32000, batch 4 x 256 random tokens.
  zlua's bf16 goes through the engine (bf16 weights, f32 masters, as
  DeepSpeed's bf16); PyTorch runs bf16 as its users do, autocast over f32
  weights. ]]

local zl = require 'zlua'
local fmt = string.format

local M = { n_layer = 4, hidden = 512, intermediate = 1536, heads = 8, kv_heads = 2, vocab = 32000, seq = 256,
            batch = 4 }

local args = zl.args(nil, { precision = 'f32,bf16', threads = '', steps = 10, warmup = 3, ['repeat'] = 3,
  torch = true, worker = '', seed = 1 })

-- One zlua run (a separate process): prints a RESULT line as llama_torch.py does.
if args.worker ~= '' then
  local nn = require 'zlua.nn'
  zl.set_num_threads(math.tointeger(tonumber(args.threads)) or 1)
  zl.manual_seed(args.seed)
  local model = nn.Llama { vocab_size = M.vocab, hidden_size = M.hidden, intermediate_size = M.intermediate,
    num_hidden_layers = M.n_layer, num_attention_heads = M.heads, num_key_value_heads = M.kv_heads,
    max_position_embeddings = M.seq }
  local ids, tgt = {}, {}
  math.randomseed(args.seed)
  for i = 1, M.batch * M.seq do ids[i], tgt[i] = math.random(0, M.vocab - 1), math.random(0, M.vocab - 1) end
  local idx = zl.tensor(ids, 'i64'):view(M.batch, M.seq)
  local targets = zl.tensor(tgt, 'i64'):view(M.batch, M.seq)
  local engine = zl.initialize { model = model, config = {
    train_micro_batch_size_per_gpu = M.batch, steps_per_print = 1000000,
    optimizer = { type = 'AdamW', params = { lr = 1e-3, weight_decay = 0.01 } },
    bf16 = { enabled = args.precision == 'bf16' }, zero_optimization = { stage = 0 } } }
  engine:set_progress(false)
  local times, losses = {}, {}
  for _ = 1, args.warmup + args.steps do
    local t0 = zl.core.now()
    local _, loss = engine(idx, targets)
    engine:backward(loss)
    engine:step()
    times[#times + 1] = (zl.core.now() - t0) * 1e3
    losses[#losses + 1] = loss:float():item()
  end
  local timed = table.move(times, args.warmup + 1, #times, 1, {})
  print(fmt('RESULT ms %.3f loss0 %.6f loss %.6f', require('zlua.util.stats').median(timed), losses[1],
    losses[#losses]))
  os.exit(0)
end

local exe = require('zlua.args').executable()
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local median = require('zlua.util.stats').median
local machine = dofile(here .. '/machine.lua')

local function list(s)
  local out = {}
  for w in tostring(s):gmatch('[^,%s]+') do out[#out + 1] = w end
  return out
end

-- Runs a command, returns its RESULT figures, or nil, why and whether it skipped.
local function run(cmd)
  return machine.run(cmd, function(out)
    local ms, loss0, loss = out:match('RESULT ms (%S+).- loss0 (%S+) loss (%S+)')
    return ms and { ms = tonumber(ms), loss0 = tonumber(loss0), loss = tonumber(loss) }
  end)
end

local cores = tonumber(io.popen('nproc'):read('l')) or 2
local threads_list = args.threads ~= '' and list(args.threads) or { tostring(cores) }
print(fmt('LLaMA training step (4 x 512, 8/2 heads, batch 4 x 256), %s (%s), %d cores, zlua with %s; %d timed '
  .. 'steps after %d warm-up, median of %d launches', machine.cpu_model(), machine.cpu_flags(), cores,
  machine.blas(exe), args.steps, args.warmup, args['repeat']))
print(fmt('%-5s %3s %10s %10s %7s %10s %9s %9s', 'prec', 'thr', 'zlua ms', 'torch ms', 'ratio', 'tokens/s',
  'loss', 'torch'))
local failed, note = false, nil
for _, th in ipairs(threads_list) do
  local threads = math.tointeger(tonumber(th))
  for _, precision in ipairs(list(args.precision)) do
    local ours, theirs, last, tlast, why = {}, {}, nil, nil, nil
    for _ = 1, args['repeat'] do
      local r, w = run(fmt('%s ZLUA_ACCELERATOR=cpu %s %s --worker 1 --precision %s --threads %d --steps %d '
        .. '--warmup %d --seed %d', machine.ENV, exe, arg[0], precision, threads, args.steps, args.warmup, args.seed))
      if r then ours[#ours + 1], last = r.ms, r else why, failed = w, true end
      if args.torch and not note then
        local t, tw, skipped = run(fmt('%s python3 %s/llama_torch.py --precision %s --threads %d --steps %d '
          .. '--warmup %d --seed %d', machine.ENV, here, precision, threads, args.steps, args.warmup, args.seed))
        if t then theirs[#theirs + 1], tlast = t.ms, t elseif skipped then note = tw else why, failed = tw, true end
      end
    end
    if #ours == 0 then
      print(fmt('%-5s %3d failed: %s', precision, threads, why or '?'))
    else
      local ms, tms = median(ours), #theirs > 0 and median(theirs) or nil
      print(fmt('%-5s %3d %10.1f %10s %7s %10.0f %9.4f %9s', precision, threads, ms, tms and fmt('%.1f', tms) or '-',
        tms and fmt('%.2fx', tms / ms) or '-', M.batch * M.seq / (ms / 1e3), last.loss,
        tlast and fmt('%.4f', tlast.loss) or '-'))
    end
  end
end
if note then print('torch: ' .. note) end
os.exit(failed and 1 or 0)
