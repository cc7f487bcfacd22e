--[[ Supervised fine-tuning as the seeds walk through DeepSpeed-Chat's step 1
  (training/step1_supervised_finetuning/main.py), in zlua: a prompt/response
  dataset (data/prompts.jsonl, " Human: ... Assistant:" prompts) tokenised
  with a GPT-2 style byte-level BPE tokenizer (tokenizer/, made by
  make_data.lua with zlua.tokenizer.train), the loss on response tokens only,
  a train/eval split with eval perplexity, LoRA on or off, weight decay
  groups (none for biases and LayerNorm), the model built under zero.Init at
  stage 3, and DeepSpeed-Chat's arguments:
    zlua --num_gpus 2 examples/sft/train.lua --zero_stage 3 --lora_dim 8 \
        --lora_module_name blocks. --only_optimize_lora --gradient_checkpointing
  Without --model_name_or_path the model is made anew: a small GPT, or with
  --model_type llama a small LLaMA (--n_layer, --n_embd, --n_head,
  --n_kv_head); with it, a Hugging Face folder of a GPT-2, LLaMA, Qwen2 or
  Mistral model (config.json, model.safetensors or its sharded index), as
  DeepSpeed-Chat starts from a pretrained model. The Hugging Face trainer's
  options (--learning_rate, --max_grad_norm, --bf16, ...) fill a
  --deepspeed_config's "auto" values.
  --output_dir saves the trained model in that layout (LoRA fused into the
  weights first, as DeepSpeed-Chat's convert_lora_to_linear_layer) with the
  tokenizer, so a later run takes it as --model_name_or_path. --out DIR
  saves checkpoints (every --save_every steps, and at the end) from which
  --resume continues bit for bit.
  Output (rank 0): `eval perplexity <p>` before training and after each
  epoch, `step <n> loss <loss>` (the mean over ranks) every --print_loss
  steps, then one greedy answer per prompt of --generate. ]]

local zl = require 'zlua'
local nn = require 'zlua.nn'
local dist = require 'zlua.dist'
local data = require 'zlua.data'
local json = require 'zlua.json'
local zero = require 'zlua.zero'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('sft', arg, options.with_engine {
  { 'data_path', here .. '/data/prompts.jsonl', 'JSON Lines of {"prompt": ..., "response": ...}' },
  { 'data_split', '10,0,0', 'DeepSpeed-Chat\'s phase split: step 1 trains on the first share of the data' },
  { 'eval_fraction', 0.1, 'share of the data held out for eval perplexity (the file\'s last lines)' },
  { 'tokenizer', here .. '/tokenizer', 'a tokenizer folder (tokenizer.json, or vocab.json and merges.txt); '
    .. 'by default --model_name_or_path\'s when it holds one, as DeepSpeed-Chat loads it' },
  { 'model_name_or_path', '', 'a Hugging Face GPT-2, LLaMA, Qwen2 or Mistral folder to start from (empty: a new '
    .. 'model)' },
  { 'model_type', 'gpt2', 'a new model\'s kind: gpt2 or llama' },
  { 'n_layer', 4, 'transformer blocks of a new model', min = 1 },
  { 'n_embd', 128, 'embedding width of a new model', min = 1 },
  { 'n_head', 4, 'attention heads of a new model', min = 1 },
  { 'n_kv_head', 2, 'key/value heads of a new llama model', min = 1 },
  { 'max_seq_len', 48, 'tokens of prompt and response, padded or cut', min = 2 },
  { 'per_device_train_batch_size', 16, 'micro batch of each rank', min = 1 },
  { 'per_device_eval_batch_size', 32, 'eval batch of each rank', min = 1 },
  { 'gradient_accumulation_steps', 1, 'micro batches per optimizer step', min = 1 },
  { 'learning_rate', 3e-3, 'peak learning rate' },
  { 'weight_decay', 0.1, 'AdamW weight decay (not on biases and LayerNorm)' },
  { 'num_train_epochs', 3, 'passes over the training split', min = 1 },
  { 'lr_scheduler_type', 'cosine', 'cosine, linear or constant (after the warmup)' },
  { 'num_warmup_steps', 20, 'warmup steps', min = 0 },
  { 'seed', 1234, 'seed of the model, the sampler and dropout' },
  { 'zero_stage', 0, 'ZeRO stage 0-3', min = 0 },
  { 'offload', false, 'optimizer states (and at stage 3 the parameters) in host memory' },
  { 'dtype', 'fp32', 'fp32, bf16 or fp16' },
  { 'lora_dim', 0, 'LoRA rank (0: no LoRA)', min = 0 },
  { 'lora_module_name', 'blocks.', 'LoRA replaces the Linear layers whose name contains this' },
  { 'only_optimize_lora', false, 'train the LoRA matrices only, the rest frozen' },
  { 'gradient_checkpointing', false, 'recompute each block\'s activations in backward' },
  { 'output_dir', '', 'save the model (Hugging Face layout) and tokenizer here' },
  { 'print_loss', 20, 'print the loss every N steps (0: never)', min = 0 },
  { 'generate', 'What is 12 plus 7?|Reverse the word \'garden\'.|What is the capital of Japan?',
    'questions to answer after training, separated by |' },
  { 'max_new_tokens', 16, 'tokens generated per answer', min = 0 },
  { 'threads', 0, 'threads (0: the engine default, OMP_NUM_THREADS)', min = 0 },
})
io.stdout:setvbuf('line')
if opt.threads > 0 then zl.set_num_threads(opt.threads) end
local rank, world = dist.rank(), dist.world_size()
-- Rank 0's lines; through the engine, once it exists, above its progress line.
local engine
local function say(...)
  if engine then engine:print(...) elseif rank == 0 then print(...) end
end
local function die(msg)
  io.stderr:write('sft: ', msg, '\n')
  os.exit(1)
end
local function try(f, ...)
  local res = table.pack(pcall(f, ...))
  if not res[1] then die(tostring(res[2])) end
  return table.unpack(res, 2, res.n)
end
-- The Hugging Face trainer's name for the warmup, and its precision flags.
local hf_names = { warmup_steps = 'num_warmup_steps' }
options.use_hf(opt, hf_names)
if opt.bf16 then opt.dtype = 'bf16' elseif opt.fp16 then opt.dtype = 'fp16' end
if opt.dtype ~= 'fp32' and opt.dtype ~= 'bf16' and opt.dtype ~= 'fp16' then
  die(('--dtype must be fp32, bf16 or fp16, got %q'):format(opt.dtype))
end
local schedulers = { cosine = 'WarmupCosineLR', linear = 'WarmupDecayLR', constant = 'WarmupLR' }
if not schedulers[opt.lr_scheduler_type] then
  die(('--lr_scheduler_type must be cosine, linear or constant, got %q'):format(opt.lr_scheduler_type))
end

-- DeepSpeed-Chat takes the tokenizer from the model's folder.
if not opt._given.tokenizer and opt.model_name_or_path ~= '' then
  for _, name in ipairs({ '/tokenizer.json', '/vocab.json' }) do
    local f = io.open(opt.model_name_or_path .. name)
    if f then
      f:close()
      opt.tokenizer = opt.model_name_or_path
      break
    end
  end
end
local tokenizer = try(require('zlua.tokenizer').from_pretrained, opt.tokenizer)
local eos = tokenizer:token_to_id('<|endoftext|>')
if not eos then die(opt.tokenizer .. ': the vocabulary has no <|endoftext|> token') end

-- The dataset: every line a prompt and its response.
local function read_pairs(path)
  local f, err = io.open(path)
  if not f then die(err) end
  local pairs_, n = {}, 0
  for line in f:lines() do
    n = n + 1
    if line:find('%S') then
      local ok, row = pcall(json.decode, line)
      if not ok or type(row) ~= 'table' or type(row.prompt) ~= 'string' or type(row.response) ~= 'string' then
        die(('%s:%d: expected {"prompt": "...", "response": "..."}%s'):format(path, n,
          ok and '' or ': ' .. tostring(row)))
      end
      pairs_[#pairs_ + 1] = row
    end
  end
  f:close()
  return pairs_
end

-- DeepSpeed-Chat's data_split "a,b,c": step 1's share is a / (a + b + c).
local function phase_one_share(text)
  local parts = {}
  for v in text:gmatch('[^,]+') do parts[#parts + 1] = tonumber(v) end
  local sum = 0
  for _, v in ipairs(parts) do
    if not v or v < 0 then die(('--data_split expects three non-negative numbers "a,b,c", got %q'):format(text)) end
    sum = sum + v
  end
  if #parts ~= 3 or sum <= 0 or parts[1] <= 0 then
    die(('--data_split expects "a,b,c" with a > 0 (step 1 trains on the first share), got %q'):format(text))
  end
  return parts[1] / sum
end

-- One sample: input ids and labels of max_seq_len tokens; the labels are
-- the next token where it belongs to the response (or ends it), -100 on the
-- prompt and the padding, so the loss covers the response alone.
local T = opt.max_seq_len
local function encode(row)
  local p, r = tokenizer:encode(row.prompt), tokenizer:encode(row.response)
  r[#r + 1] = eos
  local ids, labels = {}, {}
  for _, t in ipairs(p) do ids[#ids + 1] = t end
  for _, t in ipairs(r) do ids[#ids + 1] = t end
  for i = 1, T do
    local next_id = ids[i + 1]
    labels[i] = (next_id and i >= #p) and next_id or -100
  end
  for i = #ids + 1, T do ids[i] = eos end
  for i = #ids, T + 1, -1 do ids[i] = nil end
  return ids, labels
end

-- The encoded pairs as a dataset of { ids [T], labels [T] } samples.
local function prompt_dataset(rows)
  local ids, labels = {}, {}
  for k, row in ipairs(rows) do
    local x, y = encode(row)
    table.move(x, 1, T, (k - 1) * T + 1, ids)
    table.move(y, 1, T, (k - 1) * T + 1, labels)
  end
  return data.TensorDataset(zl.tensor(ids, 'i64'):view(#rows, T), zl.tensor(labels, 'i64'):view(#rows, T))
end

local rows = read_pairs(opt.data_path)
local neval = math.floor(#rows * opt.eval_fraction)
local ntrain = math.floor((#rows - neval) * phase_one_share(opt.data_split))
if ntrain < 1 or neval < 1 then
  die(('%s: %d prompts give %d for training and %d for eval; both need at least one'):format(
    opt.data_path, #rows, ntrain, neval))
end
local train_ds = prompt_dataset(table.move(rows, 1, ntrain, 1, {}))
local eval_ds = prompt_dataset(table.move(rows, #rows - neval + 1, #rows, 1, {}))

local train_batch = opt.per_device_train_batch_size * opt.gradient_accumulation_steps * world
local steps_per_epoch = ntrain // train_batch
local total_steps = opt.max_steps or math.ceil(steps_per_epoch * opt.num_train_epochs)
local offload = opt.offload and { device = 'cpu' } or nil
-- The params each of DeepSpeed's schedulers takes: the cosine one decays
-- from the optimizer's lr, the others warm up to --learning_rate.
local function scheduler_params(steps)
  local p = { warmup_num_steps = 'auto' }
  if opt.lr_scheduler_type == 'cosine' then p.warmup_type = 'linear' else p.warmup_max_lr = opt.learning_rate end
  if opt.lr_scheduler_type ~= 'constant' then p.total_num_steps = math.max(steps, opt.num_warmup_steps + 1) end
  return p
end
-- The Hugging Face trainer's options given, else these, fill the "auto"
-- values of a config file and of the config made here.
local args = options.hf_args(opt, hf_names, { adam_beta1 = 0.9, adam_beta2 = 0.95, adam_epsilon = 1e-8,
  max_grad_norm = 1.0, steps_per_epoch = steps_per_epoch, bf16 = opt.dtype == 'bf16', fp16 = opt.dtype == 'fp16' })
local config = opt.deepspeed_config ~= '' and opt.deepspeed_config or opt.config ~= '' and opt.config or {
  train_batch_size = train_batch,
  train_micro_batch_size_per_gpu = opt.per_device_train_batch_size,
  gradient_accumulation_steps = opt.gradient_accumulation_steps,
  steps_per_print = 1e9,
  zero_optimization = { stage = opt.zero_stage, offload_optimizer = offload,
                        offload_param = opt.zero_stage == 3 and offload or nil,
                        stage3_param_persistence_threshold = 1e4 },
  bf16 = { enabled = opt.dtype == 'bf16' },
  fp16 = { enabled = opt.dtype == 'fp16', initial_scale_power = 12 },
  gradient_clipping = 'auto',
  optimizer = { type = 'AdamW', params = { lr = opt.learning_rate, betas = 'auto', eps = 'auto',
                                           weight_decay = opt.weight_decay } },
  scheduler = { type = schedulers[opt.lr_scheduler_type], params = scheduler_params(total_steps) },
}

zl.manual_seed(opt.seed)
-- At stage 3 the model is partitioned as it is built (deepspeed.zero.Init).
-- The model's width fills the config's "auto" bucket sizes, read before
-- the model is built (at stage 3 zero.Init reads them).
if opt.model_name_or_path ~= '' then
  local f = io.open(opt.model_name_or_path .. '/config.json')
  local ok, c = pcall(json.decode, f and f:read('a') or '')
  if f then f:close() end
  args.hidden_size = ok and type(c) == 'table' and math.tointeger(c.hidden_size or c.n_embd) or nil
else
  args.hidden_size = opt.n_embd
end
local model = try(zero.Init, config, function()
  if opt.model_name_or_path ~= '' then return nn.AutoModelForCausalLM.from_pretrained(opt.model_name_or_path) end
  if opt.model_type == 'llama' then
    return nn.Llama{ vocab_size = tokenizer:vocab_size(), max_position_embeddings = T, hidden_size = opt.n_embd,
                     intermediate_size = 3 * opt.n_embd, num_hidden_layers = opt.n_layer,
                     num_attention_heads = opt.n_head, num_key_value_heads = opt.n_kv_head }
  end
  if opt.model_type ~= 'gpt2' then die(('--model_type must be gpt2 or llama, got %q'):format(opt.model_type)) end
  return nn.GPT{ vocab_size = tokenizer:vocab_size(), block_size = T, n_layer = opt.n_layer,
                 n_head = opt.n_head, n_embd = opt.n_embd }
end, { args = args })
if model.config.vocab_size < tokenizer:vocab_size() then
  die(('the model has %d token embeddings, the tokenizer %d tokens'):format(model.config.vocab_size,
    tokenizer:vocab_size()))
end
if opt.lora_dim > 0 then
  local lora = require 'zlua.lora'
  model = try(lora.convert_linear_layer_to_lora, model, opt.lora_module_name, opt.lora_dim)
  if opt.only_optimize_lora then model = lora.only_optimize_lora_parameters(model) end
elseif opt.only_optimize_lora then
  die('--only_optimize_lora needs --lora_dim above 0')
end
if opt.gradient_checkpointing then model:gradient_checkpointing_enable() end

local _, trainloader
engine, _, trainloader = try(zl.initialize, { model = model, config = config, training_data = train_ds,
  model_parameters = nn.get_optimizer_grouped_parameters(model, opt.weight_decay),
  args = args })
-- On a terminal rank 0 shows the progress line; --print_loss lines go above it.
engine:set_progress(true, total_steps)
local mismatch = options.check_hf(opt, engine.config, config)
if mismatch then
  io.stderr:write('sft: ', mismatch, '\n')
  os.exit(2)
end
local evalloader = data.DataLoader(eval_ds, { batch_size = opt.per_device_eval_batch_size,
  sampler = data.DistributedSampler(eval_ds, { shuffle = false }) })

local trainable, total = 0, 0
for _, p in ipairs(model:parameters()) do
  local n = zero.numel(p)
  total = total + n
  if p:requires_grad() then trainable = trainable + n end
end
say(('sft: %d prompts for training, %d for eval; %d ranks x %d a micro batch; %d of %d parameters trained%s'):format(
  ntrain, neval, world, opt.per_device_train_batch_size, trainable, total,
  opt.lora_dim > 0 and (' (LoRA rank %d on %s)'):format(opt.lora_dim, opt.lora_module_name) or ''))

-- The mean loss per response token over the eval split, all ranks together.
local function perplexity()
  engine:eval()
  local sums = zl.no_grad(function()
    local loss_sum, tokens = 0, 0
    for ids, labels in evalloader() do
      local _, loss = engine(ids, labels)
      local n = labels:numel() - labels:eq(-100):sum():item()
      loss_sum, tokens = loss_sum + loss:float():item() * n, tokens + n
    end
    return dist.all_reduce(zl.tensor({ loss_sum, tokens }, 'f32'), 'sum')
  end)
  engine:train()
  local s = sums:totable()
  return math.exp(s[1] / s[2])
end

say(('eval perplexity %.4f'):format(perplexity()))
-- Checkpoints (--out, --save_every, --resume) carry the step and the epoch;
-- the engine keeps the loader's place in its epoch.
local step, first_epoch = 0, 1
if opt.resume then
  if opt.out == '' then die('--resume needs --out DIR (the folder of the checkpoints)') end
  local path, state = engine:load_checkpoint(opt.out)
  if path then step, first_epoch = state.step, state.epoch end
end
local function save(epoch)
  if opt.out ~= '' then engine:save_checkpoint(opt.out, nil, { step = step, epoch = epoch }) end
end
for epoch = first_epoch, opt.num_train_epochs do
  trainloader:set_epoch(epoch)
  local sum, count = 0, 0
  for ids, labels in trainloader() do
    local _, loss = engine(ids, labels)
    engine:backward(loss)
    engine:step()
    local boundary = engine:is_gradient_accumulation_boundary()
    if boundary then step = step + 1 end
    sum, count = sum + loss:float():item(), count + 1
    if boundary and opt.print_loss > 0 and step % opt.print_loss == 0 then
      local mean = dist.all_reduce(zl.tensor({ sum / count }, 'f32'), 'avg'):item()
      say(('step %d loss %.6f'):format(step, mean))
      sum, count = 0, 0
    end
    if boundary and opt.save_every > 0 and step % opt.save_every == 0 then save(epoch) end
    if opt.max_steps and step >= opt.max_steps then break end
  end
  say(('epoch %d eval perplexity %.4f'):format(epoch, perplexity()))
  if opt.max_steps and step >= opt.max_steps then
    save(epoch)
    break
  end
  if epoch == opt.num_train_epochs then save(epoch + 1) end
end

-- Greedy answers: every rank runs the model (at stage 3 each forward
-- gathers the parameters from all of them); rank 0 prints.
local questions = {}
for q in opt.generate:gmatch('[^|]+') do questions[#questions + 1] = q end
if opt.max_new_tokens > 0 then
  engine:eval()
  for _, q in ipairs(questions) do
    local prompt = tokenizer:encode(' Human: ' .. q .. ' Assistant:')
    local out = model:generate(prompt, { max_new_tokens = opt.max_new_tokens, eos_token_id = eos })
    local new = {}
    for i = #prompt + 1, #out do
      if out[i] == eos then break end
      new[#new + 1] = out[i]
    end
    say(('Q: %s\nA:%s'):format(q, tokenizer:decode(new)))
  end
end

if opt.output_dir ~= '' then
  if opt.lora_dim > 0 then require('zlua.lora').fuse(model) end
  zero.GatheredParameters(model:parameters(), function()
    if rank == 0 then
      try(model.save_pretrained, model, opt.output_dir)
      try(tokenizer.save_pretrained, tokenizer, opt.output_dir)
      print('saved the model and tokenizer in ' .. opt.output_dir)
    end
  end)
end
