--[[ A character-level GPT (zlua.nn.GPT) trained on any text file, where a
  character is a byte. Each step draws --batch windows of --block_size + 1
  characters at random from the first 90% of the text, predicts every next
  character, and takes one AdamW step (weights decayed, biases and LayerNorm
  not; the global gradient norm clipped) under a linear warmup and a cosine
  decay to a tenth of --lr. Every --sample_every steps and at the end it
  prints a sample, then the loss on the held-out last 10%. The default text
  is the project's own prose (data/zlua.txt, from scripts/gpt_corpus.lua);
  there the defaults bring the training loss below 2.0 nats per character
  at about step 340 of 400.
  Training goes through zlua.initialize: --config ds_config.json (or
  --deepspeed_config) gives a DeepSpeed config, otherwise one is built from
  the options (--precision bf16 or fp16 turns mixed precision on); --out DIR
  saves checkpoints (every --save_every steps and at the end) and --resume
  continues from the latest one, bit for bit as if never stopped.
  On several ranks (zlua --nprocs N) every rank draws the same --batch
  windows and trains on its 1/N of them, in --gas micro-steps (gradient
  accumulation); --zero_stage picks the ZeRO stage and --grad_accum_dtype
  the gradients' dtype when no config is given. Only rank 0 prints; the loss printed is the mean
  over all ranks, so the output is the same at any world size and stage.
    zlua examples/gpt/train.lua [--data book.txt] [--steps 400] [--n_layer 2] ...
    zlua --nprocs 2 examples/gpt/train.lua --zero_stage 3 ...
  Output: on a terminal the engine's progress line, otherwise `step <n>
  loss <loss>` per step; each sample between
  `--- sample after step <n> ---` and `---`, then `val loss <loss>`; the
  wall time goes to stderr, so that stdout is the same run to run. ]]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('gpt', arg, options.with_engine {
  { 'data', here .. '/data/zlua.txt', 'a text file, plain or gzip' },
  { 'steps', 400, 'optimizer steps', min = 1 },
  { 'seed', 1, 'seed of the initialisation, the batches and the samples' },
  { 'batch', 32, 'windows per step', min = 1 },
  { 'lr', 6e-3, 'peak learning rate' },
  { 'threads', 0, 'threads (0: the engine default, OMP_NUM_THREADS)', min = 0 },
  { 'block_size', 64, 'context length in characters', min = 1 },
  { 'n_layer', 2, 'transformer blocks', min = 1 },
  { 'n_head', 4, 'attention heads per block', min = 1 },
  { 'n_embd', 128, 'embedding width', min = 1 },
  { 'warmup', 50, 'warmup steps of the schedule', min = 0 },
  { 'clip', 1.0, 'largest global gradient norm (0: no clipping)', min = 0 },
  { 'grad_norms', 0, 'every N steps print each layer\'s gradient norm before the step (0: never)', min = 0 },
  { 'sample_every', 200, 'print a sample every N steps (0: only at the end)', min = 0 },
  { 'sample_len', 200, 'characters per sample', min = 0 },
  { 'precision', 'f32', 'f32, bf16 or fp16 (when no --config)' },
  { 'zero_stage', 0, 'ZeRO stage 0-3 (when no --config)', min = 0 },
  { 'gas', 1, 'gradient accumulation steps: micro-batches per optimizer step', min = 1 },
  { 'grad_accum_dtype', '', 'fp32, bf16 or fp16: the dtype gradients are kept in (default: the model\'s)' },
  { 'gradient_checkpointing', false, 'compute each block again in backward instead of keeping its activations' },
  { 'cpu_checkpointing', false, 'with --gradient_checkpointing: the saved block inputs in host memory charged '
    .. 'to other, off the activations (activation_checkpointing.cpu_checkpointing, when no --config)' },
})
local world, rank = dist.world_size(), dist.rank()
-- Rank 0's lines; through the engine, once it exists, above its progress line.
local engine
local function say(...)
  if engine then engine:print(...) elseif rank == 0 then print(...) end
end
-- The Hugging Face trainer's names for the options above; its per-rank
-- batch and precision flags set --batch and --precision.
local hf_names = { learning_rate = 'lr', max_grad_norm = 'clip', max_steps = 'steps', warmup_steps = 'warmup',
                   gradient_accumulation_steps = 'gas' }
options.use_hf(opt, hf_names)
if opt.per_device_train_batch_size then opt.batch = opt.per_device_train_batch_size * world * opt.gas end
if opt.bf16 then opt.precision = 'bf16' elseif opt.fp16 then opt.precision = 'fp16' end
io.stdout:setvbuf('line')
if opt.threads > 0 then zl.set_num_threads(opt.threads) end
if opt.n_embd % opt.n_head ~= 0 then
  io.stderr:write(('gpt: --n_embd (%d) must be a multiple of --n_head (%d)\n'):format(opt.n_embd, opt.n_head))
  os.exit(2)
end

local ok, text = pcall(zl.read_text, opt.data)
if not ok then
  io.stderr:write('gpt: ', tostring(text), '\n')
  os.exit(1)
end
local vocab = zl.text_vocab(text)
local ids = zl.text_encode(text, vocab)        -- i64 [n], ids 0..#vocab-1
local n = ids:size(1)
local ntrain = n - n // 10
local T = opt.block_size
if opt.batch % (world * opt.gas) ~= 0 then
  io.stderr:write(('gpt: --batch %d does not split over %d ranks x %d micro-steps\n'):format(opt.batch, world, opt.gas))
  os.exit(2)
end
local micro = opt.batch // (world * opt.gas)
if ntrain <= T or n - ntrain <= T then
  io.stderr:write(('gpt: %s: %d characters are too few for --block_size %d (need more than %d)\n'):format(
    opt.data, n, T, 10 * (T + 1)))
  os.exit(1)
end
local train_ids, val_ids = ids:narrow(1, 1, ntrain), ids:narrow(1, ntrain + 1, n - ntrain)

zl.manual_seed(opt.seed)
local model = nn.GPT{ vocab_size = #vocab, block_size = T, n_layer = opt.n_layer,
                      n_head = opt.n_head, n_embd = opt.n_embd }
if opt.gradient_checkpointing then model:gradient_checkpointing_enable() end
-- The Hugging Face trainer's options given, else these, fill the "auto"
-- values of a config file and of the config made here.
local args = options.hf_args(opt, hf_names, {
  adam_beta1 = 0.9, adam_beta2 = 0.95, adam_epsilon = 1e-8, weight_decay = 0.1, per_device_train_batch_size = micro,
  hidden_size = opt.n_embd, bf16 = opt.precision == 'bf16', fp16 = opt.precision == 'fp16' })
local config = opt.config ~= '' and opt.config or opt.deepspeed_config ~= '' and opt.deepspeed_config or {
  train_micro_batch_size_per_gpu = micro,
  gradient_accumulation_steps = opt.gas,
  zero_optimization = { stage = opt.zero_stage },
  data_types = opt.grad_accum_dtype ~= '' and { grad_accum_dtype = opt.grad_accum_dtype } or nil,
  gradient_clipping = opt.clip,
  optimizer = { type = 'AdamW', params = { lr = opt.lr, betas = 'auto', eps = 'auto', weight_decay = 'auto' } },
  scheduler = { type = 'WarmupCosineLR', params = { total_num_steps = opt.steps, warmup_num_steps = 'auto',
                                                     warmup_type = 'linear', cos_min_ratio = 0.1 } },
  bf16 = { enabled = opt.precision == 'bf16' },
  fp16 = { enabled = opt.precision == 'fp16', initial_scale_power = 12 },
  activation_checkpointing = { cpu_checkpointing = opt.cpu_checkpointing },
}
if opt.precision ~= 'f32' and opt.precision ~= 'bf16' and opt.precision ~= 'fp16' then
  io.stderr:write(('gpt: --precision must be f32, bf16 or fp16, got %q\n'):format(opt.precision))
  os.exit(2)
end
engine = zl.initialize { model = model, config = config, args = args,
                         model_parameters = nn.get_optimizer_grouped_parameters(model, 0.1) }
-- A person at a terminal watches the progress line; a log gets a line a step.
engine:set_progress(true, opt.steps)
local step_lines = not engine:shows_progress()
local mismatch = options.check_hf(opt, engine.config, config)
if mismatch then
  io.stderr:write('gpt: ', mismatch, '\n')
  os.exit(2)
end

-- Windows starting at the given 0-based offsets of src: inputs and the
-- next-character targets, both [#starts, T].
local function windows(src, starts)
  local xi, yi = {}, {}
  for b, s in ipairs(starts) do
    for t = 1, T do
      xi[(b - 1) * T + t] = s + t - 1
      yi[(b - 1) * T + t] = s + t
    end
  end
  local x = src:index_select(1, zl.tensor(xi, 'i64')):view(#starts, T)
  local y = src:index_select(1, zl.tensor(yi, 'i64')):view(#starts, T)
  return x, y
end

local batches = zl.Generator(opt.seed)
local function random_batch()
  local starts = {}
  for b = 1, opt.batch do starts[b] = batches:randint(ntrain - T) - 1 end
  return starts
end

-- Micro-step m's windows of this rank: the global batch is split rank by rank
-- within each micro-step, so every world size and --gas sees the same batch.
local function micro_batch(starts, m)
  local first = (m * world + rank) * micro
  return windows(train_ids, table.move(starts, first + 1, first + micro, 1, {}))
end

-- The mean loss over the held-out text cut into consecutive windows (at most
-- 64 of them, so that a large file does not make the end slow).
local function val_loss()
  local nval = val_ids:size(1)
  local starts = {}
  for s = 0, nval - T - 1, T do
    if #starts == 64 then break end
    starts[#starts + 1] = s
  end
  return zl.no_grad(function()
    model:eval()
    local total = 0
    for i = 1, #starts, opt.batch do
      local chunk = table.move(starts, i, math.min(i + opt.batch - 1, #starts), 1, {})
      local _, loss = engine(windows(val_ids, chunk))
      total = total + loss:float():item() * #chunk
    end
    model:train()
    return total / #starts
  end)
end

local start_id = (vocab:find('\n', 1, true) or 1) - 1
local function sample(step)
  local out = model:generate(zl.tensor({ { start_id } }, 'i64'), opt.sample_len,
                             { temperature = 0.8, seed = opt.seed + step, slide = true })
  say(('--- sample after step %d ---'):format(step))
  say(zl.text_decode(out:narrow(2, 2, opt.sample_len), vocab))
  say('---')
end

say(('gpt: %s, %d characters (%d for training), vocabulary of %d; %d layers, %d heads, %d wide, '
       .. 'context %d; %d parameters'):format(opt.data, n, ntrain, #vocab, opt.n_layer, opt.n_head,
                                             opt.n_embd, T, model:num_parameters()))
-- Checkpoints carry the step and the batch generator's position with them,
-- so a resumed run draws the same windows it would have drawn.
local first = 1
if opt.resume then
  if opt.out == '' then
    io.stderr:write('gpt: --resume needs --out DIR (the folder of the checkpoints)\n')
    os.exit(2)
  end
  local path, state = engine:load_checkpoint(opt.out)
  if path then
    first = state.step + 1
    zl.core.generator_set_offset(batches, state.batch_offset)
    io.stderr:write(('gpt: resumed from %s at step %d\n'):format(path, state.step))
  end
end
local function save(step)
  local _, offset = zl.core.generator_state(batches)
  engine:save_checkpoint(opt.out, nil, { step = step, batch_offset = offset })
end

-- The most memory activations took in a forward and backward, and what the
-- saved block inputs took in host memory with --cpu_checkpointing (charged to
-- other); garbage from the step before is collected first, so the figure is
-- the step's own.
local peak_activations, peak_other = 0, 0

-- Each layer's gradient norm (its parameters' together; a block is one layer),
-- read from wherever ZeRO keeps the gradient through DeepSpeed's accessor,
-- which every rank calls.
local utils = require 'zlua.utils'
local function grad_norms(step)
  local order, sq = {}, {}
  for name, p in model:named_parameters() do
    if p:requires_grad() then
      local layer = name:match('^(%a[%w_]*%.%d+)%.') or name:match('^([^.]+)')
      local g = utils.safe_get_full_grad(p)
      if not sq[layer] then order[#order + 1], sq[layer] = layer, 0 end
      sq[layer] = sq[layer] + (g * g):sum():item()
    end
  end
  local parts = {}
  for i, layer in ipairs(order) do parts[i] = ('%s %.6g'):format(layer, math.sqrt(sq[layer])) end
  say(('grad norms before step %d: %s'):format(step, table.concat(parts, ', ')))
end
local clock = os.time()
for step = first, opt.steps do
  local starts = random_batch()
  local total = 0.0
  for m = 0, opt.gas - 1 do
    collectgarbage()
    zl.reset_peak_memory()
    local _, loss = engine(micro_batch(starts, m))
    engine:backward(loss)
    if opt.grad_norms > 0 and step % opt.grad_norms == 0 and m == opt.gas - 1 then grad_norms(step) end
    local mem = zl.memory()
    peak_activations = math.max(peak_activations, mem.activations.peak)
    peak_other = math.max(peak_other, mem.other.peak)
    engine:step()
    total = total + loss:float():item()
  end
  local l = dist.all_reduce(zl.full({ 1 }, total / opt.gas), 'avg')
  if step_lines then say(('step %d loss %.9g'):format(step, l:item())) end
  local due = (opt.sample_every > 0 and step % opt.sample_every == 0) or step == opt.steps
  if due and opt.sample_len > 0 then sample(step) end
  if opt.out ~= '' and ((opt.save_every > 0 and step % opt.save_every == 0) or step == opt.steps) then save(step) end
end
say(('val loss %.9g'):format(val_loss()))
if rank == 0 then
  io.stderr:write(('gpt: %d steps in %d s\n'):format(opt.steps, os.time() - clock))
  -- The estimate a user gets before a run (scripts/estimate_memory.lua), beside the measure.
  local est = require('zlua.nn.gpt_activations').estimate(model.config, { batch = micro, block_size = T,
    precision = opt.precision, checkpointing = opt.gradient_checkpointing })
  io.stderr:write(('gpt: peak activation memory %.2f MiB (other: %.2f MiB)%s; estimated %.2f MiB\n'):format(
    peak_activations / 2 ^ 20, peak_other / 2 ^ 20, opt.gradient_checkpointing and ', gradient checkpointing' or '',
    est.peak / 2 ^ 20))
  require('zlua.engine.memory_table').print(engine, io.stderr, { activations = est.peak })
end
