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
    zlua examples/gpt/train.lua [--data book.txt] [--steps 400] [--n_layer 2] ...
  Output: `step <n> loss <loss>` per step, each sample between
  `--- sample after step <n> ---` and `---`, then `val loss <loss>`; the
  wall time goes to stderr, so that stdout is the same run to run. ]]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local optim = require 'zlua.optim'
local lr = require 'zlua.lr'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('gpt', arg, {
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
  { 'sample_every', 200, 'print a sample every N steps (0: only at the end)', min = 0 },
  { 'sample_len', 200, 'characters per sample', min = 0 },
})
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
if ntrain <= T or n - ntrain <= T then
  io.stderr:write(('gpt: %s: %d characters are too few for --block_size %d (need more than %d)\n'):format(
    opt.data, n, T, 10 * (T + 1)))
  os.exit(1)
end
local train_ids, val_ids = ids:narrow(1, 1, ntrain), ids:narrow(1, ntrain + 1, n - ntrain)

zl.manual_seed(opt.seed)
local model = nn.GPT{ vocab_size = #vocab, block_size = T, n_layer = opt.n_layer,
                      n_head = opt.n_head, n_embd = opt.n_embd }
local groups = nn.get_optimizer_grouped_parameters(model, 0.1)
local optimizer = optim.AdamW(groups, { lr = opt.lr, betas = { 0.9, 0.95 }, eps = 1e-8 })
local scheduler = lr.WarmupCosineLR(optimizer, { total_num_steps = opt.steps, warmup_num_steps = opt.warmup,
                                                 warmup_type = 'linear', cos_min_ratio = 0.1 })

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
  return windows(train_ids, starts)
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
      local _, loss = model(windows(val_ids, chunk))
      total = total + loss:item() * #chunk
    end
    model:train()
    return total / #starts
  end)
end

local params = model:parameters()
-- The factor that brings the global L2 norm of the gradients down to
-- opt.clip, handed to the optimizer as its grad_scale (no pass of its own).
local function clip_scale()
  if opt.clip == 0 then return 1.0 end
  local sq = 0.0
  for _, p in ipairs(params) do
    local g = p.grad
    if g then sq = sq + (g * g):sum():item() end
  end
  local norm = math.sqrt(sq)
  return norm > opt.clip and opt.clip / (norm + 1e-6) or 1.0
end

local start_id = (vocab:find('\n', 1, true) or 1) - 1
local function sample(step)
  local out = model:generate(zl.tensor({ { start_id } }, 'i64'), opt.sample_len,
                             { temperature = 0.8, seed = opt.seed + step })
  print(('--- sample after step %d ---'):format(step))
  print(zl.text_decode(out:narrow(2, 2, opt.sample_len), vocab))
  print('---')
end

print(('gpt: %s, %d characters (%d for training), vocabulary of %d; %d layers, %d heads, %d wide, '
       .. 'context %d; %d parameters'):format(opt.data, n, ntrain, #vocab, opt.n_layer, opt.n_head,
                                             opt.n_embd, T, model:num_parameters()))
local clock = os.time()
for step = 1, opt.steps do
  local x, y = random_batch()
  local _, loss = model(x, y)
  loss:backward()
  optimizer:step{ grad_scale = clip_scale() }
  scheduler:step()
  optimizer:zero_grad()
  print(('step %d loss %.9g'):format(step, loss:item()))
  local due = (opt.sample_every > 0 and step % opt.sample_every == 0) or step == opt.steps
  if due and opt.sample_len > 0 then sample(step) end
end
print(('val loss %.9g'):format(val_loss()))
io.stderr:write(('gpt: %d steps in %d s\n'):format(opt.steps, os.time() - clock))
