--[[ The seeds' CIFAR-10 example (DeepSpeedExamples' cifar10_deepspeed.py) in
  zlua: the same network (conv-pool-conv-pool-fc-fc-fc), transform, loop and
  test, with the seeds' DeepSpeed config (train_batch_size 4, Adam lr 0.001,
  betas 0.8/0.999, weight_decay 3e-7, WarmupLR to 0.001 over 1000 steps)
  given to zlua.initialize (or --deepspeed_config ds_config.json, the seeds'
  file beside this script; --out, --save_every and --resume for checkpoints).
  As in the seed, the training set goes to zlua.initialize as training_data:
  the engine's loader gives each rank its own share (a DistributedSampler)
  in micro batches of the config's size. Reads the binary CIFAR-10 batches
  (cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html):
    zlua examples/cifar10/train.lua --data path/to/cifar-10-batches-bin [--epochs 2]
    zlua --num_gpus 2 examples/cifar10/train.lua --deepspeed --deepspeed_config ds_config.json
  Output: on a terminal, the engine's progress line; otherwise `step <n>
  loss <loss>` per optimizer step (at several ranks each rank's own, as
  `rank <r> step <n> loss <loss>`). Then from rank 0 the seeds' running loss
  every --log_interval steps, and `accuracy <fraction>` on test_batch.bin. ]]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local data = require 'zlua.data'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local args = options.parse('cifar10', arg, options.with_engine {
  { 'data', 'cifar-10-batches-bin', 'the folder of data_batch_1.bin .. data_batch_5.bin and test_batch.bin' },
  { 'epochs', 2, 'passes over the training set', min = 1 },
  { 'steps', 0, 'stop after this many optimizer steps (0: run every epoch)', min = 0 },
  { 'seed', 1, 'seed of the initialisation and the shuffling' },
  { 'batch', 4, 'images per optimizer step over all ranks (the config\'s train_batch_size)', min = 1 },
  { 'lr', 0.001, 'the warmup\'s final learning rate (warmup_max_lr)' },
  { 'warmup', 1000, 'warmup_num_steps of WarmupLR', min = 1 },
  { 'log_interval', 2000, 'steps between running-loss reports', min = 1 },
  { 'threads', 0, 'threads (0: the engine default, OMP_NUM_THREADS)', min = 0 },
})
-- The Hugging Face trainer's names for the options above.
local hf_names = { learning_rate = 'lr', warmup_steps = 'warmup', num_train_epochs = 'epochs', max_steps = 'steps' }
options.use_hf(args, hf_names)
io.stdout:setvbuf('line')
if args.threads > 0 then zl.set_num_threads(args.threads) end
zl.manual_seed(args.seed)

-- transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
local function transform(images)
  return (images:float() / 255 - 0.5) / 0.5
end

-- A CIFAR-10 split kept as the file's bytes (u8, a quarter of the f32 size)
-- and transformed batch by batch as the DataLoader gathers it.
local CIFAR10 = data.TensorDataset:extend('CIFAR10')
function CIFAR10:get(i)
  local image, label = table.unpack(data.TensorDataset.get(self, i))
  return { transform(image), label }
end
function CIFAR10:get_batch(indices)
  local images, labels = table.unpack(data.TensorDataset.get_batch(self, indices))
  return { transform(images), labels }
end

local function load(names)
  local images, labels = {}, {}
  for k, name in ipairs(names) do
    local ok, x, y = pcall(zl.read_cifar10, args.data .. '/' .. name)
    if not ok then
      io.stderr:write('cifar10: ', tostring(x), '\n',
                      'cifar10: --data names the folder cifar-10-binary.tar.gz unpacks to\n')
      os.exit(1)
    end
    images[k], labels[k] = x, y
  end
  return CIFAR10(zl.cat(images), zl.cat(labels))
end

local trainset = load{ 'data_batch_1.bin', 'data_batch_2.bin', 'data_batch_3.bin', 'data_batch_4.bin',
                       'data_batch_5.bin' }
local testset = load{ 'test_batch.bin' }
local testloader = data.DataLoader(testset, { batch_size = 4, shuffle = false })

local Net = nn.Module:extend('Net')
function Net:__init()
  self.conv1 = nn.Conv2d(3, 6, 5)
  self.pool = nn.MaxPool2d(2, 2)
  self.conv2 = nn.Conv2d(6, 16, 5)
  self.fc1 = nn.Linear(16 * 5 * 5, 120)
  self.fc2 = nn.Linear(120, 84)
  self.fc3 = nn.Linear(84, 10)
end
function Net:forward(x)
  x = self.pool(self.conv1(x):relu())
  x = self.pool(self.conv2(x):relu())
  x = x:view(-1, 16 * 5 * 5)
  x = self.fc1(x):relu()
  x = self.fc2(x):relu()
  x = self.fc3(x)
  return x
end

local net = Net()
local criterion = nn.CrossEntropyLoss()
-- The seeds' ds_config.json, with the options' batch, lr and warmup.
-- The Hugging Face trainer's options given, else these, fill the "auto"
-- values of a config file and of the config made here.
local hf_args = options.hf_args(args, hf_names, {
  per_device_train_batch_size = args.batch, gradient_accumulation_steps = 1, adam_beta1 = 0.8, adam_beta2 = 0.999,
  adam_epsilon = 1e-8, weight_decay = 3e-7, max_grad_norm = 0.0, steps_per_epoch = 50000 // args.batch,
  bf16 = false, fp16 = false,
  -- No transformer width here: the widest layer's (fc1's 400 inputs) sizes the buckets.
  hidden_size = 16 * 5 * 5 })
local ds_config = args.config ~= '' and args.config or args.deepspeed_config ~= '' and args.deepspeed_config or {
  train_batch_size = args.batch, steps_per_print = 2000, gradient_clipping = 'auto',
  optimizer = { type = 'Adam', params = { lr = 'auto', betas = 'auto', eps = 'auto', weight_decay = 'auto' } },
  scheduler = { type = 'WarmupLR', params = { warmup_min_lr = 0, warmup_max_lr = 'auto', warmup_num_steps = 'auto' } },
  bf16 = { enabled = 'auto' }, fp16 = { enabled = 'auto' },
  wall_clock_breakdown = false,
}
local model_engine, _, trainloader = zl.initialize { model = net, model_parameters = net:parameters(),
  config = ds_config, training_data = trainset,
  args = hf_args }
-- A person at a terminal watches the progress line; a log gets a line a step.
model_engine:set_progress(true, args.steps > 0 and args.steps or args.epochs * #trainloader)
local step_lines = not model_engine:shows_progress()
local mismatch = options.check_hf(args, model_engine.config, ds_config)
if mismatch then
  io.stderr:write('cifar10: ', mismatch, '\n')
  os.exit(2)
end
local rank, world = model_engine.rank, model_engine.world_size
local function say(...) model_engine:print(...) end
-- At several ranks each prints the loss of its own micro batch.
local step_line = world > 1 and ('rank ' .. rank .. ' step %d loss %.9g') or 'step %d loss %.9g'

say(('cifar10: %d training images, %d test images; %d parameters; %d rank%s x %d images a micro batch'):format(
  #trainset, #testset, net:num_parameters(), world, world > 1 and 's' or '', model_engine.micro_batch_size))
local step, first_epoch = 0, 1
if args.resume then
  -- The engine keeps the loader's place in the checkpoint and restores it.
  local path, state = model_engine:load_checkpoint(args.out)
  if path then step, first_epoch = state.step, state.epoch end
end
local epoch = first_epoch
while epoch <= args.epochs do
  trainloader:set_epoch(epoch)   -- a new order each pass, the same on every rank
  local running_loss = 0.0
  local i = 0
  for inputs, labels in trainloader() do
    local outputs = model_engine(inputs)
    local loss = criterion(outputs, labels)
    model_engine:backward(loss)
    model_engine:step()

    -- print statistics
    step, i = step + 1, i + 1
    if step_lines then print(step_line:format(step, loss:item())) end
    running_loss = running_loss + loss:item()
    if i % args.log_interval == 0 then
      say(('[%d, %5d] loss: %.3f'):format(epoch, i, running_loss / args.log_interval))
      running_loss = 0.0
    end
    if args.out ~= '' and args.save_every > 0 and step % args.save_every == 0 then
      model_engine:save_checkpoint(args.out, nil, { step = step, epoch = epoch })
    end
    if step == args.steps then break end
  end
  if step == args.steps then break end
  epoch = epoch + 1
end
if args.out ~= '' then
  model_engine:save_checkpoint(args.out, nil, { step = step, epoch = epoch })
end

local correct, total = 0, 0
zl.no_grad(function()
  for images, labels in testloader() do
    local outputs = net(images)
    local predicted = outputs:argmax(2)
    total = total + labels:size(1)
    correct = correct + predicted:eq(labels):sum():item()
  end
end)
say(('accuracy %.9g'):format(correct / total))
