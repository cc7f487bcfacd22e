--[[ scripts/estimate_memory.lua: DeepSpeed's estimates of the memory that
  parameters, gradients and optimizer states need under ZeRO-2 and ZeRO-3,
  per offload choice, for a parameter count or a GPT or LLaMA built from its
  config (zlua.zero.estimate holds the formulas); for those also the
  activations of a step of --batch sequences (of block_size tokens, or
  --seq for a LLaMA), with and without activation checkpointing
  (zlua.nn.gpt_activations, zlua.nn.llama_activations), per rank.

    zlua scripts/estimate_memory.lua --params 1.3e9 --largest_layer 6.4e7 --gpus_per_node 8
    zlua scripts/estimate_memory.lua --gpt n_layer=12,n_embd=768,n_head=12,vocab_size=50257,block_size=1024 \
        --batch 4 [--precision bf16]
    zlua scripts/estimate_memory.lua --llama vocab_size=32000,hidden_size=4096,intermediate_size=11008,\
num_hidden_layers=32,num_attention_heads=32,num_key_value_heads=8 --batch 1 --seq 4096 --precision bf16 ]]

local args = require 'zlua.args'
local estimate = require 'zlua.zero.estimate'

local fmt = string.format

local USAGE = [[
usage: zlua scripts/estimate_memory.lua (--params N [--largest_layer N] | --gpt KEY=VALUE,... | --llama KEY=VALUE,...)
                                        [--gpus_per_node 1] [--nodes 1] [--buffer_factor 1.5]
  --params N          total parameters (1.3e9 is read as 1300000000)
  --largest_layer N   the most parameters one module owns itself (ZeRO-3 needs it)
  --gpt K=V,...       build zlua.nn.GPT with this config (vocab_size, block_size, n_layer,
                      n_head, n_embd, bias) and count it; it takes 4 bytes per parameter
  --llama K=V,...     build zlua.nn.Llama with this config (its Hugging Face names) and count it
  --gpus_per_node N   ranks per node (default 1), --nodes N (default 1)
  --buffer_factor F   DeepSpeed's additional_buffer_factor on host memory (default 1.5)
  --batch N           with --gpt or --llama: sequences per micro batch of one rank, for the
                      activations (default 1)
  --seq N             with --llama: tokens per sequence (default max_position_embeddings)
  --precision P       with --gpt or --llama: f32, bf16 or fp16, the activations' dtype (default f32)]]

local message = args.message
local o, die = args.script('estimate_memory', USAGE, arg, { params = '', largest_layer = '', gpt = '', llama = '',
                                       gpus_per_node = 1, nodes = 1, buffer_factor = 1.5, batch = 1, seq = 0,
                                       precision = 'f32' })

local function count_option(name, text)
  local v = tonumber(text)
  local n = v and math.tointeger(v)
  if not n or n <= 0 then
    die(fmt("--%s expects a positive whole number of parameters, got '%s'", name, text))
  end
  return n
end

local function positive(name, v)
  if not (v > 0 and v < math.huge) then die(fmt('--%s must be positive, got %s', name, tostring(v))) end
  return v
end

local hw = { num_gpus_per_node = positive('gpus_per_node', o.gpus_per_node),
             num_nodes = positive('nodes', o.nodes),
             additional_buffer_factor = positive('buffer_factor', o.buffer_factor) }

-- "n_layer=12,n_embd=768,bias=false" -> a config table; flag names the option.
local function model_config(flag, text)
  local cfg = {}
  for item in (text .. ','):gmatch('([^,]*),') do
    local k, v = item:match('^%s*([%w_]+)%s*=%s*(%S+)%s*$')
    if not k then die(fmt("--%s expects KEY=VALUE pairs separated by commas, got '%s'", flag, item)) end
    if v == 'true' or v == 'false' then cfg[k] = v == 'true' else cfg[k] = tonumber(v) end
    if cfg[k] == nil then die(fmt("--%s: %s expects a number, got '%s'", flag, k, v)) end
  end
  return cfg
end

local total, largest, gpt_cfg, llama_cfg
if o.gpt ~= '' and o.llama ~= '' then die('give --gpt or --llama, not both') end
if o.gpt ~= '' or o.llama ~= '' then
  local flag = o.gpt ~= '' and 'gpt' or 'llama'
  if o.params ~= '' or o.largest_layer ~= '' then
    die(fmt('--%s counts the model: give it without --params and --largest_layer', flag))
  end
  local cfg = model_config(flag, o[flag])
  if flag == 'gpt' then gpt_cfg = cfg else llama_cfg = cfg end
  local nn = require 'zlua.nn'
  local built, model = pcall(flag == 'gpt' and nn.GPT or nn.Llama, cfg)
  if not built then die(fmt('--%s: %s', flag, message(model))) end
  local name
  total, largest, name = estimate.count(model)
  print(fmt('%s{%s}: %d parameters (a tied head counted once), largest layer %s with %d',
            flag == 'gpt' and 'GPT' or 'Llama', o[flag], total, name == '' and 'the model itself' or name, largest))
elseif o.params ~= '' then
  total = count_option('params', o.params)
  if o.largest_layer ~= '' then largest = count_option('largest_layer', o.largest_layer) end
else
  die('give --params N, --gpt KEY=VALUE,... or --llama KEY=VALUE,...\n' .. USAGE)
end

local function rows(f, ...)
  local okr, r = pcall(f, ...)
  if not okr then die(message(r)) end
  return r
end
local zero2 = rows(estimate.zero2, total, hw)
local zero3 = largest and rows(estimate.zero3, total, largest, hw)

-- The lines below follow DeepSpeed's tables, with GiB for its GB (both are 2^30 bytes).
local function table_line(r, stage3)
  local cpu = 'cpu ' -- DeepSpeed pads the device to four characters so the columns line up
  local opts = fmt('offload_optimizer=%s', r.offload_optimizer == 'cpu' and cpu or 'none')
  if stage3 then
    opts = fmt('offload_param=%s, %s, zero_init=%d', r.offload_param == 'cpu' and cpu or 'none', opts,
               r.zero_init)
  end
  return (fmt(' %8.2fGiB | %7.2fGiB | %s', r.per_cpu / 2 ^ 30, r.per_gpu / 2 ^ 30, opts):gsub('%s+$', ''))
end

local gpn, nodes = hw.num_gpus_per_node, hw.num_nodes
print('Estimated memory needed for params, optim states and gradients for a:')
print(fmt('HW: Setup with %d %s, %d %s per node.', nodes, nodes > 1 and 'nodes' or 'node', gpn,
          gpn > 1 and 'GPUs' or 'GPU'))
if largest then
  print(fmt('SW: Model with %dM total params, %dM largest layer params.', total // 1000000, largest // 1000000))
else
  print(fmt('SW: Model with %dM total params.', total // 1000000))
end
print(fmt('additional_buffer_factor %g on host memory; activations not included.', hw.additional_buffer_factor))
print()
print('ZeRO-2')
print('   per CPU   |  per GPU   |   Options')
for _, r in ipairs(zero2) do print(table_line(r, false)) end
print()
print('ZeRO-3')
if zero3 then
  print('   per CPU   |  per GPU   |   Options')
  for _, r in ipairs(zero3) do print(table_line(r, true)) end
  print('zero_init=1: the model is built already partitioned (deepspeed.zero.Init); 0: each rank builds it whole.')
else
  print('  needs --largest_layer N: the most parameters one module owns itself (for a GPT, vocab_size*n_embd).')
end
print()
print('On a CPU-only zlua build "GPU" is the memory of each training process and "CPU" the rest of the')
print("node's memory: both come out of the same RAM, so a node needs up to per CPU + gpus_per_node x per GPU.")

if gpt_cfg or llama_cfg then
  local name = gpt_cfg and 'zlua.nn.gpt_activations' or 'zlua.nn.llama_activations'
  local act = require(name)
  local seq = gpt_cfg and gpt_cfg.block_size or (o.seq > 0 and o.seq or llama_cfg.max_position_embeddings or 2048)
  local function at(ckpt)
    local ok, e = pcall(act.estimate, gpt_cfg or llama_cfg, { batch = o.batch, block_size = seq, seq = seq,
                                                              precision = o.precision, checkpointing = ckpt })
    if not ok then die(message(e)) end
    return e
  end
  local plain, ckpt = at(false), at(true)
  print()
  print(fmt('Activations of one step, %d x %d tokens a rank, %s (%s):', o.batch, seq, o.precision, name))
  print('  checkpointing |  after forward |  peak in backward')
  print(fmt('  off           | %10.2fMiB  | %10.2fMiB', plain.after_forward / 2 ^ 20, plain.peak / 2 ^ 20))
  print(fmt('  on            | %10.2fMiB  | %10.2fMiB', ckpt.after_forward / 2 ^ 20, ckpt.peak / 2 ^ 20))
end
