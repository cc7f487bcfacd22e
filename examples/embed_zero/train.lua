--[[ The Lua twin of embed_zero (main.c): the same digits MLP, seed, data
  order and DeepSpeed config, trained through zlua.initialize; it prints the
  same `step N loss X` lines, bit for bit (on a terminal, the engine's
  progress line instead), and each resumes the other's
  checkpoints (--load DIR, --save DIR).
    zlua --nprocs 2 examples/embed_zero/train.lua --deepspeed_config ds.json --steps N ]]

local zl = require 'zlua'
local nn = require 'zlua.nn'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('embed_zero', arg, {
  { 'deepspeed_config', '', 'the DeepSpeed config (JSON)' },
  { 'steps', 20, 'optimizer steps', min = 1 },
  { 'data', here .. '/../digits/digits.csv.gz', 'the digits CSV, plain or gzip' },
  { 'seed', 1, 'seed of the initialisation' },
  { 'load', '', 'resume from the checkpoint in this folder' },
  { 'save', '', 'save a checkpoint into this folder at the end' },
})
if opt.deepspeed_config == '' then
  io.stderr:write('embed_zero: --deepspeed_config FILE is needed\n')
  os.exit(2)
end
io.stdout:setvbuf('line')

local csv = zl.read_csv(opt.data)
local n = csv:size(1)
local x_all = csv:narrow(2, 1, 64) / 16
local y_all = csv:select(2, 65):long()

zl.manual_seed(opt.seed)
local net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
local engine = zl.initialize { model = net, config = opt.deepspeed_config }
-- On a terminal, the progress line; otherwise a line a step, as the C program prints.
engine:set_progress(true, opt.steps)
local step_lines = not engine:shows_progress()
local dist = require 'zlua.dist'
local rank, world = dist.rank(), dist.world_size()
local micro, gas = engine.micro_batch_size, engine.gas

-- The rows of micro-batch `index` (a global count over ranks and micro-steps), wrapping around.
local function rows(index)
  local r = {}
  for i = 0, micro - 1 do r[i + 1] = (index * micro + i) % n end
  return zl.tensor(r, 'i64')
end

local first = 1
if opt.load ~= '' and engine:load_checkpoint(opt.load) then first = engine.global_steps + 1 end
for step = first, opt.steps do
  local sum = 0.0
  for m = 0, gas - 1 do
    local idx = rows(((step - 1) * gas + m) * world + rank)
    local loss = engine:backward(zl.cross_entropy(engine(x_all:index_select(1, idx)), y_all:index_select(1, idx)))
    sum = sum + loss:item()
    engine:step()
  end
  local t = zl.full({ 1 }, sum)
  dist.all_reduce(t, 'avg')
  if step_lines then engine:print(string.format('step %d loss %.6g', step, t:item())) end
end
if opt.save ~= '' then engine:save_checkpoint(opt.save) end
local rep = engine:memory_report()
if rank == 0 and rep.swap_read_bytes + rep.swap_write_bytes > 0 then
  print(string.format('rank 0 swapped %d bytes in, %d out', rep.swap_read_bytes, rep.swap_write_bytes))
end
