--[[ A two-layer MLP (64 -> 256 -> 10) trained on the 1,797 handwritten digits
  of digits.csv.gz (8x8 images, pixels 0..16, then the label; see
  digits.rst) with zlua.nn, AdamW over a decayed and a no-decay group, and
  DeepSpeed's WarmupLR, in the seeds' loop: forward, loss, backward, step,
  through zlua.initialize (--config FILE for a DeepSpeed config; otherwise
  one is built from the options; --out, --save_every and --resume for
  checkpoints that resume bit for bit). The training set goes to the engine
  as training_data: at several ranks (zlua --nprocs N) each trains on its
  own share of every batch, and rank 0 alone prints.
    zlua examples/digits/train.lua [--epochs 20] [--steps N] [--seed 1] [--data digits.csv.gz]
  Output: on a terminal, the engine's progress line; otherwise `step <n>
  loss <loss>` per optimizer step (rank 0's micro batch). Then a summary per
  epoch, and `accuracy <fraction>` on the held-out fifth at the end. ]]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local data = require 'zlua.data'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('digits', arg, options.with_engine {
  { 'data', here .. '/digits.csv.gz', 'the digits CSV, plain or gzip' },
  { 'epochs', 20, 'passes over the training set', min = 1 },
  { 'steps', 0, 'stop after this many optimizer steps (0: run every epoch)', min = 0 },
  { 'seed', 1, 'seed of the split and the initialisation (the engine\'s loader shuffles by epoch)' },
  { 'batch', 32, 'images per optimizer step and rank', min = 1 },
  { 'lr', 3e-3, 'peak learning rate, reached after the warmup' },
  { 'threads', 0, 'threads (0: the engine default, OMP_NUM_THREADS)', min = 0 },
  { 'hidden', 256, 'width of the hidden layer', min = 1 },
  { 'weight_decay', 0.1, 'AdamW weight decay of the weights (biases have none)', min = 0 },
})
-- The Hugging Face trainer's names for the options above.
local hf_names = { learning_rate = 'lr', per_device_train_batch_size = 'batch', num_train_epochs = 'epochs',
                   max_steps = 'steps' }
options.use_hf(opt, hf_names)
io.stdout:setvbuf('line')
if opt.threads > 0 then zl.set_num_threads(opt.threads) end

-- A data file that is missing or corrupt stops the script with one line.
local ok, csv = pcall(zl.read_csv, opt.data)
if not ok then
  io.stderr:write('digits: ', tostring(csv), '\n')
  os.exit(1)
end
local n, cols = csv:size(1), csv:size(2)
if cols ~= 65 then
  io.stderr:write(('digits: %s: expected 65 columns (64 pixels and a label), got %d\n'):format(opt.data, cols))
  os.exit(1)
end
local x_all = csv:narrow(2, 1, 64) / 16     -- [n, 64], scaled to [0, 1]
local y_all = csv:select(2, 65):long()      -- [n], class ids 0..9

-- A fixed split: a seeded permutation of the rows, the last fifth held out.
local perm = zl.randperm(n, zl.Generator(opt.seed))
local ntest = n // 5
local ntrain = n - ntest
local train_rows, test_rows = perm:narrow(1, 1, ntrain), perm:narrow(1, ntrain + 1, ntest)
local trainset = data.TensorDataset(x_all:index_select(1, train_rows), y_all:index_select(1, train_rows))
local testset = data.TensorDataset(x_all:index_select(1, test_rows), y_all:index_select(1, test_rows))
local world = require('zlua.dist').world_size()
-- An epoch in optimizer steps, as the engine's loader will give it: each rank
-- takes ceil(ntrain / world) images (the sampler pads the last share).
local per_rank = -(-ntrain // world)
local steps_per_epoch = -(-per_rank // opt.batch)
local evalloader = data.DataLoader(trainset, { batch_size = 256 })
local testloader = data.DataLoader(testset, { batch_size = 256 })

zl.manual_seed(opt.seed)
local net = nn.Sequential(nn.Linear(64, opt.hidden), nn.ReLU(), nn.Linear(opt.hidden, 10))
local criterion = nn.CrossEntropyLoss()
-- The Hugging Face trainer's options given, else these, fill the "auto"
-- values of a config file and of the config made here.
local args = options.hf_args(opt, hf_names, {
  adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8, gradient_accumulation_steps = 1, max_grad_norm = 0.0,
  warmup_steps = 100, steps_per_epoch = steps_per_epoch, hidden_size = opt.hidden, bf16 = false, fp16 = false })
local config = opt.config ~= '' and opt.config or opt.deepspeed_config ~= '' and opt.deepspeed_config or {
  train_micro_batch_size_per_gpu = opt.batch, gradient_accumulation_steps = 'auto', gradient_clipping = 'auto',
  optimizer = { type = 'AdamW', params = { lr = 'auto', betas = 'auto', eps = 'auto', weight_decay = 'auto' } },
  scheduler = { type = 'WarmupLR', params = { warmup_min_lr = 0, warmup_max_lr = 'auto', warmup_num_steps = 'auto' } },
  bf16 = { enabled = 'auto' }, fp16 = { enabled = 'auto' },
}
local engine, _, trainloader = zl.initialize { model = net, config = config, args = args, training_data = trainset,
  model_parameters = nn.get_optimizer_grouped_parameters(net, opt.weight_decay) }
-- A person at a terminal watches the progress line; a log gets a line a step.
engine:set_progress(true, opt.steps > 0 and opt.steps or opt.epochs * #trainloader)
local step_lines = not engine:shows_progress()
local mismatch = options.check_hf(opt, engine.config, config)
if mismatch then
  io.stderr:write('digits: ', mismatch, '\n')
  os.exit(2)
end

local function accuracy(loader)
  local correct, total = 0, 0
  zl.no_grad(function()
    for images, labels in loader() do
      local predicted = net(images):argmax(-1)
      total = total + labels:size(1)
      correct = correct + predicted:eq(labels):sum():item()
    end
  end)
  return correct / total
end

-- The optimizer as the config (the file's, or the one made here) set it.
local oc = engine.config.optimizer or { type = '?', params = {} }
engine:print(('digits: %d images, %d for training, %d held out; MLP 64 -> %d -> 10, %s lr %g; %d rank%s'):format(
  n, ntrain, ntest, opt.hidden, oc.type, oc.params.lr or 0, world, world > 1 and 's' or ''))
-- A checkpoint carries the epoch and the step; the engine keeps the loader's place.
local step, first_epoch = 0, 1
if opt.resume then
  if opt.out == '' then
    io.stderr:write('digits: --resume needs --out DIR (the folder of the checkpoints)\n')
    os.exit(2)
  end
  local path, state = engine:load_checkpoint(opt.out)
  if path then step, first_epoch = state.step, state.epoch end
end

local epoch = first_epoch
while epoch <= opt.epochs do
  local running_loss, batches = 0.0, 0
  trainloader:set_epoch(epoch)   -- a new order each pass, the same on every rank
  for inputs, labels in trainloader() do
    local outputs = engine(inputs)
    local loss = criterion(outputs, labels)
    engine:backward(loss)
    engine:step()

    step = step + 1
    running_loss, batches = running_loss + loss:item(), batches + 1
    if step_lines then engine:print(('step %d loss %.9g'):format(step, loss:item())) end
    if opt.out ~= '' and opt.save_every > 0 and step % opt.save_every == 0 then
      engine:save_checkpoint(opt.out, nil, { step = step, epoch = epoch })
    end
    if step == opt.steps then break end
  end
  engine:print(('epoch %d loss %.4f train accuracy %.4f'):format(epoch, running_loss / math.max(batches, 1),
                                                          accuracy(evalloader)))
  if step == opt.steps then break end
  epoch = epoch + 1
end
if opt.out ~= '' then
  -- Stopped by --steps inside an epoch, the engine's loader state says where in it.
  engine:save_checkpoint(opt.out, nil, { step = step, epoch = epoch })
end
engine:print(('accuracy %.9g'):format(accuracy(testloader)))
