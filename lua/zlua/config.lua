--[[ zlua.config: reads a DeepSpeed config (a JSON file or a Lua table), checks every key
  DeepSpeed knows, fills "auto" from the script's arguments the way the Hugging Face
  integration does, derives the batch sizes, and returns one normalised table with every
  default filled in. The engine reads only that table. Parity target: DeepSpeed 0.16.5 as
  described in ../shared/reference/deepspeed.md.

  local config = require 'zlua.config'
  local cfg = config.load('ds_config.json', { args = args, world_size = 2 })
  cfg.zero_optimization.stage, cfg.fp16.enabled, cfg.train_batch_size ...

  config.read(path) -> json_text                   (the file as config.load reads it)
  config.load(path_or_table [, opts]) -> cfg
  config.parse(json_text [, opts]) -> cfg          (opts.name names the text in messages)
    opts.args        the script's arguments (zlua.args, or any table): fills "auto" and a
                     missing batch size; values may be numbers or numeric strings.
    opts.world_size  data-parallel ranks (default 1), for the batch triple.
    opts.warn        function(msg) receiving each warning; default: a line on stderr.
  Errors are raised at the caller's line and name the file and line of the key when the
  config came from a file: "ds.json:14: zero_optimization.stage must be in 0..3, got 4".

  Checking. Types, ranges and enums of every key below. A float where an integer is meant
  counts when integral (2e8, 0.94e6) and is an error otherwise (15099494.4). An unknown key
  is an error inside the sections DeepSpeed checks strictly (zero_optimization and its
  offload blocks, aio, the monitors, comms_logger, timers, optimizer and scheduler params)
  and a warning elsewhere (DeepSpeed silently ignores those); both name the full path and
  the nearest known key. A key in UNIMPLEMENTED below set to anything but its default is an
  error that says the feature is not implemented; a key in NOTICED (no meaning in zlua: a
  layout it always uses, a switch for hardware it does not drive) given with a value whose
  behaviour zlua does not have adds a line to cfg.notices naming the key and why, which
  zlua.initialize prints once: nothing is silently ignored (docs/config_keys.md lists
  every DeepSpeed key and which of the three it is). `bfloat16`
  is an alias of `bf16` (both given: error), `thread_count` of aio's `intra_op_parallelism`,
  and the stage3_ keys have DeepSpeed's short aliases (prefetch_bucket_size ...).

  "auto" (HF's HfTrainerDeepSpeedConfig), from opts.args:
    train_micro_batch_size_per_gpu   per_device_train_batch_size
    gradient_accumulation_steps      gradient_accumulation_steps
    train_batch_size                 world_size * micro batch * accumulation steps
    gradient_clipping                max_grad_norm
    optimizer.params lr, betas, eps, weight_decay
                                     learning_rate, {adam_beta1, adam_beta2}, adam_epsilon,
                                     weight_decay
    scheduler.params warmup_min_lr   0
    scheduler.params warmup_max_lr   learning_rate
    scheduler.params total_num_steps max_steps (> 0), else ceil(num_train_epochs *
                                     steps_per_epoch), steps_per_epoch counting optimizer steps
    scheduler.params warmup_num_steps warmup_steps when > 0, else ceil(total * warmup_ratio)
                                     when warmup_ratio is given, else warmup_steps (0)
    fp16.enabled, bf16.enabled       the flags fp16, bf16 (absent: false)
    zero_optimization reduce_bucket_size hidden_size^2; at stage 3 also
                     stage3_prefetch_bucket_size floor(0.9 hidden_size^2) and
                     stage3_param_persistence_threshold 10 hidden_size
  An "auto" whose argument is missing is an error naming the key and the argument. As in
  DeepSpeed, any other "auto" inside zero_optimization (and its offload blocks) means the
  default; anywhere else it is an error.

  Batch sizes (DeepSpeed's _set_batch_related_parameters, integer division):
    all three given: checked; TBS+MBS: GAS = TBS // MBS // N; TBS+GAS: MBS = TBS // N // GAS;
    MBS+GAS: TBS = MBS * GAS * N; TBS only: GAS = 1, MBS = TBS // N; MBS only: GAS = 1,
    TBS = MBS * N; neither TBS nor MBS: DeepSpeed's error, except that (zlua's addition, so
    a config fragment without batch keys loads) args.per_device_train_batch_size then gives
    MBS and args.gradient_accumulation_steps a missing GAS. Every size must be > 0 and
    TBS == MBS * GAS * N, with DeepSpeed's message showing the numbers.

  The result, cfg: train_batch_size, train_micro_batch_size_per_gpu,
  gradient_accumulation_steps, world_size; the top-level scalars (steps_per_print is nil
  when not given: no step log, as DeepSpeed 0.16.5); fp16, bf16, amp, zero_optimization
  (with offload_optimizer and offload_param always present, device 'none' when off, and
  overlap_comm resolved: true at stage 3, else false), aio, data_types, checkpoint
  (tag_validation upper-cased), timers, tensorboard, csv_monitor, wandb, comet,
  comms_logger, flops_profiler, activation_checkpointing: each a table with every key;
  optimizer = { type =, params =, legacy_fusion = } or nil (type one of 'Adam', 'AdamW',
  'Lamb', 'SGD'; params complete, betas a two-element list; AdamW has adam_w_mode true);
  scheduler = { type =, params = } or nil (params complete; optional ones nil); notices, a
  list of lines ("zero_optimization.contiguous_gradients = false: ignored: ..."). A config
  read from a file also has cfg.source (its path).

  Divergences from DeepSpeed, each a mistake it lets through: "aio" is also accepted inside
  zero_optimization (the HF docs put it there; DeepSpeed rejects it), trailing commas are
  accepted as hjson does, an offload block DeepSpeed would ignore (offload_param below
  stage 3, any offload at stage 0) gives a warning, `AdamW` with adam_w_mode false is an
  error. A bare "fp16": {"enabled": true} keeps the documented defaults
  (initial_scale_power 16, hysteresis 2) where DeepSpeed's ZeRO path quietly uses 2^32 and 1.
]]

local zl = require 'zlua'
local json = require 'zlua.json'
local nearest = require 'zlua.util.nearest'

local fmt, concat, sort = string.format, table.concat, table.sort
local mtype, tointeger, huge = math.type, math.tointeger, math.huge
local raise = zl.raise

local config = {}

-- Recognised keys whose feature zlua does not have yet, by canonical path: set to anything
-- but the default, each is an error naming the feature. An engine issue that implements
-- one removes its line here. "X.enabled" entries gate a whole section on its enabled flag;
-- the last six are whole sections, errors whenever present with content.
local UNIMPLEMENTED = {
  communication_data_type = 'gradient collectives in fp16 or bf16 (zlua sums gradients in f32)',
  sparse_gradients = 'sparse (CSR) gradient all-reduce',
  disable_allgather = 'disable_allgather',
  dump_state = 'dump_state',
  graph_harvesting = 'CUDA graph harvesting',
  sequence_parallel_size = 'sequence parallelism',
  ['fp16.auto_cast'] = 'casting forward inputs to fp16 (auto_cast)',
  ['fp16.fp16_master_weights_and_grads'] = 'fp16 master weights and gradients',
  ['amp.enabled'] = 'Apex AMP',
  ['zero_optimization.offload_optimizer.ratio'] = "partial optimizer offload (DeepSpeed's ZeRO-Offload++ at "
    .. 'stage 3)',
  ['zero_optimization.zero_hpz_partition_size'] = 'ZeRO++ hierarchical partitioning',
  ['zero_optimization.zero_quantized_weights'] = 'ZeRO++ quantized weights',
  ['zero_optimization.zero_quantized_nontrainable_weights'] = 'ZeRO++ quantized weights',
  ['zero_optimization.zero_quantized_gradients'] = 'ZeRO++ quantized gradients',
  ['zero_optimization.zeropp_loco_param'] = 'LoCo-ZeRO++',
  ['zero_optimization.mics_shard_size'] = 'MiCS sharding',
  ['zero_optimization.mics_hierarchical_params_gather'] = 'MiCS hierarchical gathers',
  ['aio.use_gds'] = 'GPUDirect Storage',
  ['optimizer.params.amsgrad'] = 'the AMSGrad variant',
  ['optimizer.params.eps_inside_sqrt'] = 'Lamb with eps inside the square root',
  ['optimizer.params.maximize'] = 'maximising SGD',
  ['checkpoint.use_node_local_storage'] = 'node-local checkpoint storage',
  ['checkpoint.parallel_write.pipeline_stage'] = 'parallel checkpoint writes per pipeline stage',
  ['wandb.enabled'] = 'the Weights & Biases monitor',
  ['comet.enabled'] = 'the Comet monitor',
  ['comms_logger.enabled'] = 'the communication logger',
  ['data_efficiency.enabled'] = 'data efficiency (curriculum learning, random-LTD)',
  ['curriculum_learning.enabled'] = 'curriculum learning',
  ['elasticity.enabled'] = 'elastic training',
  ['autotuning.enabled'] = 'autotuning',
  ['quantize_training.enabled'] = 'quantization-aware training',
  ['eigenvalue.enabled'] = 'eigenvalue computation',
  ['progressive_layer_drop.enabled'] = 'progressive layer drop',
  ['hybrid_engine.enabled'] = 'the hybrid (RLHF) engine',
  ['nebula.enabled'] = 'Nebula checkpointing',
  pipeline = 'pipeline parallelism',
  tensor_parallel = 'tensor parallelism',
  sparse_attention = 'sparse attention',
  compression_training = 'compression training',
  weight_quantization = 'weight quantization',
  moe = 'mixture of experts',
}
config.UNIMPLEMENTED = UNIMPLEMENTED

-- Recognised keys that have no meaning in zlua (a layout or a path it always takes, a
-- switch for hardware or code it does not have), by canonical path. Given with any value
-- but `zlua` (the one whose behaviour zlua has; nil: any value), each goes into
-- cfg.notices as one line naming the key and why, which zlua.initialize prints once.
local IGNORED = 'ignored: '
local PIN = IGNORED .. "with the model in host memory zlua's ZeRO state never crosses to a device, so there "
  .. "is nothing to pin (DeepSpeed's CPU accelerator ignores it too); with the model on a GPU it pins the "
  .. "offload buffers and this line is not printed"
local NOTICED = {
  zero_allow_untested_optimizer = { why = IGNORED .. 'zlua runs only the optimizers it has a fused ZeRO step '
    .. 'for (Adam, AdamW, SGD; Lamb at stage 0) and refuses any other by name, so there is no untested '
    .. 'optimizer to allow' },
  zero_force_ds_cpu_optimizer = { zlua = true, why = IGNORED .. "an offloaded step always runs zlua's fused "
    .. 'CPU kernel (DeepSpeedCPUAdam\'s counterpart), whatever optimizer object the script passes' },
  ['bf16.immediate_grad_update'] = { zlua = true, why = IGNORED .. 'zlua always adds each gradient into its '
    .. 'accumulation buffer during backward (the behaviour of true)' },
  ['optimizer.legacy_fusion'] = { zlua = false, why = IGNORED .. "it chooses between two of DeepSpeed's "
    .. 'fp16 optimizer implementations; zlua has one' },
  ['optimizer.params.torch_adam'] = { zlua = false, why = IGNORED .. "zlua's Adam is always its fused kernel, "
    .. "which computes PyTorch's Adam and AdamW update" },
  ['checkpoint.load_universal'] = { why = IGNORED .. "zlua's checkpoints load at any world size and stage as "
    .. 'they are: there is no universal form to convert to and no latest_universal file' },
  ['timers.throughput.synchronized'] = { zlua = true, why = IGNORED .. "zlua's ZeRO step runs on the host and "
    .. 'returns when its work is done, so the samples/s timing is always synchronised' },
  ['zero_optimization.contiguous_gradients'] = { zlua = true, why = IGNORED .. 'zlua always copies each '
    .. 'gradient into a contiguous bucket as it is produced (the behaviour of true)' },
  ['zero_optimization.use_multi_rank_bucket_allreduce'] = { zlua = true, why = IGNORED .. 'zlua reduces each '
    .. 'bucket with one collective (all-reduce at stages 0-1, reduce-scatter at 2-3), never a reduce per owner' },
  ['zero_optimization.allgather_partitions'] = { zlua = true, why = IGNORED .. 'as in DeepSpeed 0.16.5: '
    .. 'stages 1-2 always all-gather the updated partitions' },
  ['zero_optimization.elastic_checkpoint'] = { zlua = true, why = IGNORED .. "zlua's checkpoints always load "
    .. 'at another world size (the behaviour of true)' },
  ['zero_optimization.round_robin_gradients'] = { zlua = false, why = IGNORED .. 'zlua cuts every parameter '
    .. 'over all ranks, so each rank already copies an equal share of every bucket' },
  ['zero_optimization.stage3_module_granularity_threshold'] = { zlua = 0, why = IGNORED .. 'zlua gathers '
    .. 'each parameter where an op reads it, not per module, so there are no module hooks to group' },
  ['zero_optimization.memory_efficient_linear'] = { zlua = true, why = IGNORED .. 'at stage 3 backward '
    .. 'gathers a weight again where it reads it, so no layer keeps a gathered weight alive (the behaviour '
    .. 'of true)' },
  ['zero_optimization.pipeline_loading_checkpoint'] = { zlua = false, why = IGNORED .. "load_checkpoint "
    .. "reads each rank's part of every parameter straight from the files: there is no whole-model load "
    .. 'to pipeline' },
  ['zero_optimization.override_module_apply'] = { zlua = false, why = IGNORED .. 'zlua does not wrap '
    .. 'module:apply; change stage-3 parameters inside zlua.zero.GatheredParameters' },
  ['zero_optimization.cpu_offload_use_pin_memory'] = { zlua = false, why = PIN },
  ['zero_optimization.offload_optimizer.pin_memory'] = { zlua = false, why = PIN },
  ['zero_optimization.offload_param.pin_memory'] = { zlua = false, why = PIN },
  ['zero_optimization.offload_optimizer.fast_init'] = { zlua = false, why = IGNORED .. "a shortcut in how "
    .. "DeepSpeed's NVMe swapper writes the first optimizer state; zlua writes each sub-group's first "
    .. 'state once at start-up either way' },
  ['activation_checkpointing.partition_activations'] = { zlua = false, why = IGNORED .. 'DeepSpeed splits '
    .. "each checkpoint over the model-parallel ranks; zlua has no model parallelism, so a rank's checkpoints "
    .. 'are its own already (and there is nothing to split at 1 rank)' },
  ['activation_checkpointing.contiguous_memory_optimization'] = { zlua = false, why = IGNORED .. "zlua's "
    .. "allocator keeps freed blocks by size class, so each step's checkpoints reuse the last step's memory "
    .. 'without fragmenting it: there is no contiguous buffer to copy them into' },
  ['activation_checkpointing.number_checkpoints'] = { why = IGNORED .. 'it sizes the contiguous buffer of '
    .. 'contiguous_memory_optimization, which zlua does not need' },
}
config.NOTICED = NOTICED

-- Optimizer types. DeepSpeed matches its own names case-insensitively and anything else
-- as a torch.optim class name, case-sensitively.
local OPTIMIZERS = { adam = 'Adam', adamw = 'AdamW', lamb = 'Lamb' }
local TORCH_OPTIMIZERS = { SGD = 'SGD' }
local UNIMPLEMENTED_OPTIMIZERS = {
  'OneBitAdam', 'ZeroOneAdam', 'OneBitLamb', 'Adagrad', 'Lion', 'MuAdam', 'MuAdamW', 'MuSGD',
  'Adadelta', 'Adamax', 'ASGD', 'LBFGS', 'NAdam', 'RAdam', 'RMSprop', 'Rprop', 'SparseAdam',
}
local SCHEDULERS = { 'WarmupLR', 'WarmupDecayLR', 'WarmupCosineLR', 'OneCycle', 'LRRangeTest' }
local UNIMPLEMENTED_SCHEDULERS = {
  'LambdaLR', 'MultiplicativeLR', 'StepLR', 'MultiStepLR', 'ConstantLR', 'LinearLR',
  'ExponentialLR', 'PolynomialLR', 'CosineAnnealingLR', 'ChainedScheduler', 'SequentialLR',
  'ReduceLROnPlateau', 'CyclicLR', 'OneCycleLR', 'CosineAnnealingWarmRestarts',
}

-- Values in messages ---------------------------------------------------------------------

local function show_number(x)
  if mtype(x) == 'integer' then return tostring(x) end
  if x ~= x or x == huge or x == -huge then return tostring(x) end
  local s
  for digits = 15, 17 do
    s = fmt('%.' .. digits .. 'g', x)
    if tonumber(s) == x then break end
  end
  if not s:find('[%.e]') then s = s .. '.0' end -- 2.0, not 2: the float the user wrote
  return s
end

local function is_list(t)
  if type(t) ~= 'table' then return false end
  local mt = getmetatable(t)
  if mt == json.array then return true end
  if mt ~= nil then return false end
  local n = 0
  for k in pairs(t) do
    if mtype(k) ~= 'integer' then return false end
    n = n + 1
  end
  return n == #t
end

local function is_object(t)
  return type(t) == 'table' and getmetatable(t) == nil and (next(t) == nil or not is_list(t))
end

local function show(v)
  if type(v) == 'string' then return fmt('%q', v) end
  if type(v) == 'number' then return show_number(v) end
  if v == json.null then return 'null' end
  if is_list(v) then
    local parts = {}
    for i = 1, math.min(#v, 8) do parts[i] = show(v[i]) end
    if #v > 8 then parts[#parts + 1] = '...' end
    return '[' .. concat(parts, ', ') .. ']'
  end
  if type(v) == 'table' then return 'an object' end
  return tostring(v)
end

local function join(path, key)
  if path == '' then return key end
  return path .. '.' .. key
end

local function finite(v)
  return mtype(v) ~= nil and v == v and v ~= huge and v ~= -huge
end

-- The load context: where messages point, the arguments and the warnings ----------------

local Ctx = {}
Ctx.__index = Ctx

-- "ds.json:14" for a key of a file config, "ds.json" when the key has no line, "config"
-- for a Lua table.
function Ctx:where(raw, key)
  if not self.source then return 'config' end
  local info = raw and self.meta[raw]
  local line = info and info.lines and key and info.lines[key]
  if line then return self.source .. ':' .. line end
  return self.source
end

function Ctx:fail(raw, key, msg, ...)
  raise(self:where(raw, key) .. ': ' .. fmt(msg, ...) .. (self.note or ''))
end

function Ctx:warning(raw, key, msg, ...)
  self.warn(self:where(raw, key) .. ': ' .. fmt(msg, ...))
end

-- A key given as x (written at path) that NOTICED lists under canonical: its line, unless
-- x is the value whose behaviour zlua has.
function Ctx:notice(path, canonical, x)
  local note = NOTICED[canonical]
  if note and (note.zlua == nil or x ~= note.zlua) then
    self.notices[#self.notices + 1] = fmt('%s = %s: %s', path, show(x), note.why)
  end
end

-- The raw value of args[name] as a number, or fails naming key (the config key it fills).
function Ctx:arg_number(name, path, integer)
  local a = self.args and self.args[name]
  if a == nil then
    raise(fmt('%s: %s is "auto" and args.%s, which fills it, was not given',
      self.source or 'config', path, name))
  end
  local v = a
  if type(v) == 'string' then v = tonumber(v) end
  if not finite(v) or (integer and not tointeger(v)) then
    raise(fmt('%s: args.%s must be %s, got %s (it fills %s)', self.source or 'config', name,
      integer and 'an integer' or 'a number', show(a), path))
  end
  return integer and tointeger(v) or v
end

function Ctx:arg_given(name)
  return self.args ~= nil and self.args[name] ~= nil
end

-- A flag of the command line: absent is false.
function Ctx:arg_flag(name, path)
  local a = self.args and self.args[name]
  if a == nil or a == false or a == 'false' then return false end
  if a == true or a == 'true' then return true end
  raise(fmt('%s: args.%s must be true or false, got %s (it fills %s)', self.source or 'config',
    name, show(a), path))
end

-- The run's optimizer steps, as HF's max_steps or num_train_epochs * steps per epoch.
function Ctx:total_steps(path)
  local a = self.args or {}
  local max_steps = a.max_steps ~= nil and self:arg_number('max_steps', path, true)
  if max_steps and max_steps > 0 then return max_steps end
  if a.num_train_epochs ~= nil and a.steps_per_epoch ~= nil then
    local epochs = self:arg_number('num_train_epochs', path)
    local per = self:arg_number('steps_per_epoch', path, true)
    return tointeger(math.ceil(epochs * per))
  end
  raise(fmt('%s: %s is "auto" and args.max_steps, which fills it, was not given (or '
    .. 'args.num_train_epochs with args.steps_per_epoch)', self.source or 'config', path))
end

-- HF's get_warmup_steps: warmup_steps when positive, else a ratio of the total steps.
function Ctx:warmup_steps(path)
  local a = self.args or {}
  local steps = a.warmup_steps ~= nil and self:arg_number('warmup_steps', path, true)
  if steps and steps > 0 then return steps end
  if a.warmup_ratio ~= nil then
    local ratio = self:arg_number('warmup_ratio', path)
    return tointeger(math.ceil(self:total_steps(path) * ratio))
  end
  if steps then return steps end
  raise(fmt('%s: %s is "auto" and args.warmup_steps, which fills it, was not given (or '
    .. 'args.warmup_ratio with the run\'s total steps)', self.source or 'config', path))
end

-- Field checkers ---------------------------------------------------------------------------
-- A schema entry is { name, kind, default, ... options }; options: min, max, gt (exclusive
-- minimum), values (enum), aliases, auto (a filler), keep_auto, required, spec (sections),
-- zlua (for an UNIMPLEMENTED key: the one value besides the default that zlua has).
-- CHECK[kind](ctx, e, v, raw, key, path) -> the normalised value; v is never nil there.

local CHECK = {}
local check_section

local function range_error(ctx, e, v, raw, key, path)
  if e.min and e.max then
    ctx:fail(raw, key, '%s must be in %s..%s, got %s', path, show(e.min), show(e.max), show(v))
  elseif e.max then
    ctx:fail(raw, key, '%s must be at most %s, got %s', path, show(e.max), show(v))
  elseif e.gt then
    ctx:fail(raw, key, '%s must be greater than %s, got %s', path, show(e.gt), show(v))
  end
  ctx:fail(raw, key, '%s must be at least %s, got %s', path, show(e.min), show(v))
end

local function check_range(ctx, e, v, raw, key, path)
  if (e.min and v < e.min) or (e.max and v > e.max) or (e.gt and v <= e.gt) then
    range_error(ctx, e, v, raw, key, path)
  end
  return v
end

function CHECK.bool(ctx, _, v, raw, key, path)
  if type(v) ~= 'boolean' then
    ctx:fail(raw, key, '%s must be true or false, got %s', path, show(v))
  end
  return v
end

function CHECK.int(ctx, e, v, raw, key, path)
  local i = mtype(v) and tointeger(v)
  if not i then
    if finite(v) and v % 1 ~= 0 then
      ctx:fail(raw, key, '%s must be an integer, got %s, which has a fractional part', path,
        show(v))
    end
    ctx:fail(raw, key, '%s must be an integer, got %s', path, show(v))
  end
  return check_range(ctx, e, i, raw, key, path)
end

function CHECK.num(ctx, e, v, raw, key, path)
  if not finite(v) then
    ctx:fail(raw, key, '%s must be a finite number, got %s', path, show(v))
  end
  return check_range(ctx, e, v, raw, key, path)
end

function CHECK.str(ctx, _, v, raw, key, path)
  if type(v) ~= 'string' then
    ctx:fail(raw, key, '%s must be a string, got %s', path, show(v))
  end
  -- A path with a NUL (JSON's \u0000) would be cut there by C and name another folder.
  local nul = v:find('\0', 1, true)
  if nul then
    ctx:fail(raw, key, '%s holds a NUL byte (byte %d of "%s"), which no path or name may hold', path, nul,
      (v:gsub('%c', function(c) return string.format('\\x%02X', c:byte()) end)))
  end
  return v
end

-- Matched case-insensitively; the result is the spelling in e.values.
function CHECK.enum(ctx, e, v, raw, key, path)
  if type(v) == 'string' then
    for _, known in ipairs(e.values) do
      if v:lower() == known:lower() then return known end
    end
  end
  local quoted = {}
  for i, known in ipairs(e.values) do quoted[i] = fmt('%q', known) end
  ctx:fail(raw, key, '%s must be one of %s, got %s', path, concat(quoted, ', '), show(v))
end

function CHECK.betas(ctx, _, v, raw, key, path)
  if not is_list(v) or #v ~= 2 then
    ctx:fail(raw, key, '%s must be a list of two numbers [beta1, beta2], got %s', path, show(v))
  end
  for i = 1, 2 do
    if not finite(v[i]) or v[i] < 0 or v[i] >= 1 then
      ctx:fail(raw, key, '%s[%d] must be a number in [0, 1), got %s', path, i, show(v[i]))
    end
  end
  return { v[1] + 0.0, v[2] + 0.0 }
end

-- A learning rate for every param group, or a list of one per group.
function CHECK.lrs(ctx, _, v, raw, key, path)
  if type(v) == 'table' then
    if not is_list(v) or #v == 0 then
      ctx:fail(raw, key, '%s must be a number or a non-empty list of numbers, got %s', path,
        show(v))
    end
    local out = {}
    for i = 1, #v do
      if not finite(v[i]) or v[i] < 0 then
        ctx:fail(raw, key, '%s[%d] must be a number >= 0, got %s', path, i, show(v[i]))
      end
      out[i] = v[i]
    end
    return out
  end
  if not finite(v) or v < 0 then
    ctx:fail(raw, key, '%s must be a number >= 0 (or a list of them), got %s', path, show(v))
  end
  return v
end

function CHECK.strlist(ctx, _, v, raw, key, path)
  if not is_list(v) then
    ctx:fail(raw, key, '%s must be a list of strings, got %s', path, show(v))
  end
  local out = {}
  for i = 1, #v do
    if type(v[i]) ~= 'string' then
      ctx:fail(raw, key, '%s[%d] must be a string, got %s', path, i, show(v[i]))
    end
    out[i] = v[i]
  end
  return out
end

function CHECK.any(_, _, v)
  return v
end

function CHECK.section(ctx, e, v, raw, key, path)
  return check_section(ctx, e.spec, v, path, raw, key)
end

-- A whole section whose feature is missing, gated by its enabled flag; its other keys are
-- not looked at while it is off.
function CHECK.gate(ctx, _, v, raw, key, path)
  if v == nil or v == json.null then v = {} end
  if not is_object(v) then
    ctx:fail(raw, key, '%s must be an object, got %s', path, show(v))
  end
  local enabled = v.enabled
  if enabled ~= nil and enabled ~= json.null and type(enabled) ~= 'boolean' then
    ctx:fail(v, 'enabled', '%s.enabled must be true or false, got %s', path, show(enabled))
  end
  local what = UNIMPLEMENTED[path .. '.enabled']
  if enabled == true and what then
    ctx:fail(v, 'enabled', '%s.enabled = true: %s is not implemented in zlua yet (remove the '
      .. 'section or set enabled to false)', path, what)
  end
  return { enabled = enabled == true }
end

-- A section for a feature zlua does not have: an error whenever it holds anything.
function CHECK.block(ctx, _, v, raw, key, path)
  local what = UNIMPLEMENTED[path]
  local empty = v == false or (type(v) == 'table' and next(v) == nil)
  if what and not empty then
    ctx:fail(raw, key, '%s: %s is not implemented in zlua yet (remove the section)', path, what)
  end
  return nil
end

-- The batch keys stay raw ("auto", a number or nil) until resolve_batch sees all three.
function CHECK.batch(ctx, _, v, raw, key, path)
  if v == 'auto' then return v end
  local i = mtype(v) and tointeger(v)
  if not i then
    if finite(v) and v % 1 ~= 0 then
      ctx:fail(raw, key, '%s must be an integer, got %s, which has a fractional part', path,
        show(v))
    end
    ctx:fail(raw, key, '%s must be an integer or "auto", got %s', path, show(v))
  end
  if i <= 0 then
    ctx:fail(raw, key, '%s must be greater than 0, got %s', path, show(v))
  end
  return i
end

-- Sections --------------------------------------------------------------------------------

-- Every schema key name, with the first path it appears at, for suggesting "fp16.enabled"
-- when "enabled" is written at the top level.
local KEY_INDEX = {}

-- Unknown keys: an error in a strict section, a warning elsewhere; suggestions from the
-- section's own keys, or the path where the key does belong.
local function unknown_keys(ctx, spec, v, path, known, names)
  local unknown = {}
  for k in pairs(v) do
    if type(k) ~= 'string' then
      ctx:fail(nil, nil, '%s: keys must be strings, got %s', path == '' and 'config' or path,
        show(k))
    end
    if not known[k] then unknown[#unknown + 1] = k end
  end
  if #unknown == 0 or spec.open then return end
  local info = ctx.meta[v]
  local function line_of(k) return info and info.lines and info.lines[k] or 0 end
  sort(unknown, function(a, b)
    local la, lb = line_of(a), line_of(b)
    if la ~= lb then return la < lb end
    return a < b
  end)
  for _, k in ipairs(unknown) do
    local hint = nearest.find(k, names)
    local elsewhere = KEY_INDEX[k]
    if elsewhere and elsewhere ~= join(path, k) then
      hint = elsewhere
    elseif hint then
      hint = join(path, hint)
    end
    hint = hint and fmt(' (did you mean %s?)', hint) or ''
    if spec.strict then
      ctx:fail(v, k, 'unknown key %s%s', join(path, k), hint)
    end
    ctx:warning(v, k, 'unknown key %s ignored%s', join(path, k), hint)
  end
end

-- The value of entry e in v, looked up by its name and aliases; two spellings of the same
-- key are an error. Returns value, the key as written.
local function lookup(ctx, e, v, path)
  local value, written = v[e[1]], e[1]
  for _, alias in ipairs(e.aliases or {}) do
    if v[alias] ~= nil then
      if value ~= nil then
        ctx:fail(v, alias, '%s and %s are the same key (%s is an alias): give one of them',
          join(path, written), join(path, alias), alias)
      end
      value, written = v[alias], alias
      if e.deprecated and e.deprecated[alias] then
        ctx:warning(v, alias, '%s is deprecated: write %s', join(path, alias), join(path, e[1]))
      end
    end
  end
  return value, written
end

local function copy_default(d)
  if type(d) ~= 'table' then return d end
  local out = {}
  for i, x in ipairs(d) do out[i] = x end
  return out
end

-- The kinds whose checker runs on a missing value too, to fill a whole section's defaults.
local ALWAYS = { section = true, zero = true, aio = true, gate = true }

-- Checks the object v against spec and returns the normalised table (every default filled).
-- v may be nil or null (all defaults).
function check_section(ctx, spec, v, path, raw, key)
  if v == nil or v == json.null then v = {} end
  if not is_object(v) then
    ctx:fail(raw, key, '%s must be an object, got %s', path, show(v))
  end
  local known, names = {}, {}
  for _, e in ipairs(spec) do
    known[e[1]] = true
    names[#names + 1] = e[1]
    for _, alias in ipairs(e.aliases or {}) do known[alias] = true end
  end
  unknown_keys(ctx, spec, v, path, known, names)
  local out = {}
  for _, e in ipairs(spec) do
    local name, kind = e[1], e[2]
    local value, written = lookup(ctx, e, v, path)
    local full = join(path, written)
    if value == 'auto' and not e.keep_auto then
      if e.auto then
        value = e.auto(ctx, full, out)
        if value ~= nil then ctx.note = ' (the value that filled "auto")' end
      elseif spec.drops_auto then
        value = nil
      else
        ctx:fail(v, written, '%s is "auto", which nothing fills for this key (only the keys '
          .. 'the Hugging Face integration fills accept "auto")', full)
      end
    end
    if value == json.null then
      if e[3] ~= nil or e.required then
        ctx:fail(v, written, '%s must not be null', full)
      end
      value = nil
    end
    if value ~= nil or ALWAYS[kind] then
      out[name] = CHECK[kind](ctx, e, value, v, written, full)
    elseif e.required then
      ctx:fail(v, nil, '%s is required%s', full, spec.required_by or '')
    else
      out[name] = copy_default(e[3])
    end
    ctx.note = nil
    local canonical = join(spec.canonical or path, name)
    local what = UNIMPLEMENTED[canonical]
    local x = out[name]
    local keep = e.zlua ~= nil and e.zlua or e[3]
    if what and kind ~= 'gate' and kind ~= 'block' and x ~= nil and x ~= e[3] and x ~= e.zlua then
      ctx:fail(v, written, '%s = %s: %s is not implemented in zlua yet (remove the key%s)',
        full, show(x), what, keep ~= nil and ' or set it to ' .. show(keep) or '')
    end
    if value ~= nil then ctx:notice(full, canonical, x) end
  end
  return out
end

-- The schema -------------------------------------------------------------------------------

local function hidden(ctx, path)
  local h = ctx:arg_number('hidden_size', path, true)
  if h <= 0 then
    raise(fmt('%s: args.hidden_size must be greater than 0, got %d (it fills %s)',
      ctx.source or 'config', h, path))
  end
  return h
end

local function fill(arg, integer)
  return function(ctx, path) return ctx:arg_number(arg, path, integer) end
end

local FP16 = {
  { 'enabled', 'bool', false, auto = function(ctx, path) return ctx:arg_flag('fp16', path) end },
  { 'auto_cast', 'bool', false },
  { 'loss_scale', 'num', 0, min = 0 },
  { 'initial_scale_power', 'int', 16, min = 0 },
  { 'loss_scale_window', 'int', 1000, min = 1 },
  { 'hysteresis', 'int', 2, min = 1 },
  { 'consecutive_hysteresis', 'bool', false },
  { 'min_loss_scale', 'num', 1, gt = 0 },
  { 'fp16_master_weights_and_grads', 'bool', false },
}

local BF16 = {
  canonical = 'bf16',
  { 'enabled', 'bool', false, auto = function(ctx, path) return ctx:arg_flag('bf16', path) end },
  { 'immediate_grad_update', 'bool', false },
}

-- Apex's own options pass through to amp.initialize, so amp takes any key.
local AMP = {
  open = true,
  { 'enabled', 'bool', false, auto = function() return false end },
}

local OFFLOAD_DEVICES = { 'none', 'cpu', 'nvme' }

local OFFLOAD_OPTIMIZER = {
  strict = true, drops_auto = true,
  { 'device', 'enum', 'none', values = OFFLOAD_DEVICES },
  { 'nvme_path', 'str', nil },
  { 'buffer_count', 'int', 4, min = 0 },
  { 'pin_memory', 'bool', false },
  { 'pipeline_read', 'bool', false },
  { 'pipeline_write', 'bool', false },
  { 'fast_init', 'bool', false },
  { 'ratio', 'num', 1.0, min = 0, max = 1 },
}

local OFFLOAD_PARAM = {
  strict = true, drops_auto = true,
  { 'device', 'enum', 'none', values = OFFLOAD_DEVICES },
  { 'nvme_path', 'str', nil },
  { 'buffer_count', 'int', 5, min = 0 },
  { 'buffer_size', 'int', 100000000, min = 0 },
  { 'max_in_cpu', 'int', 1000000000, min = 0 },
  { 'pin_memory', 'bool', false },
}

-- HF's three sizes from the model's hidden size; the stage-3 ones only at stage 3 (below,
-- DeepSpeed drops an "auto" and the default stands).
local function stage3_fill(scale)
  return function(ctx, path, out)
    local h = hidden(ctx, path)
    if out.stage ~= 3 then return nil end
    return scale(h)
  end
end

local ZERO = {
  strict = true, drops_auto = true,
  { 'stage', 'int', 0, min = 0, max = 3 },
  { 'contiguous_gradients', 'bool', true },
  { 'reduce_scatter', 'bool', true },
  { 'reduce_bucket_size', 'int', 500000000, min = 0,
    auto = function(ctx, path) local h = hidden(ctx, path) return h * h end },
  { 'use_multi_rank_bucket_allreduce', 'bool', true },
  { 'allgather_partitions', 'bool', true },
  { 'allgather_bucket_size', 'int', 500000000, min = 0 },
  { 'overlap_comm', 'bool', nil },
  { 'load_from_fp32_weights', 'bool', true },
  { 'elastic_checkpoint', 'bool', false },
  { 'offload_param', 'section', nil, spec = OFFLOAD_PARAM },
  { 'offload_optimizer', 'section', nil, spec = OFFLOAD_OPTIMIZER },
  { 'sub_group_size', 'int', 1000000000, min = 0 },
  { 'stage3_prefetch_bucket_size', 'int', 50000000, min = 0, aliases = { 'prefetch_bucket_size' },
    auto = stage3_fill(function(h) return tointeger(math.floor(0.9 * h * h)) end) },
  { 'stage3_param_persistence_threshold', 'int', 100000, min = 0,
    aliases = { 'param_persistence_threshold' },
    auto = stage3_fill(function(h) return 10 * h end) },
  { 'stage3_model_persistence_threshold', 'int', math.maxinteger, min = 0,
    aliases = { 'model_persistence_threshold' } },
  { 'stage3_max_live_parameters', 'int', 1000000000, min = 0,
    aliases = { 'max_live_parameters' } },
  { 'stage3_max_reuse_distance', 'int', 1000000000, min = 0, aliases = { 'max_reuse_distance' } },
  { 'stage3_gather_16bit_weights_on_model_save', 'bool', false,
    aliases = { 'gather_16bit_weights_on_model_save', 'stage3_gather_fp16_weights_on_model_save' },
    deprecated = { stage3_gather_fp16_weights_on_model_save = true } },
  { 'stage3_module_granularity_threshold', 'int', 0, min = 0,
    aliases = { 'module_granularity_threshold' } },
  { 'stage3_use_all_reduce_for_fetch_params', 'bool', false,
    aliases = { 'use_all_reduce_for_fetch_params' } },
  { 'ignore_unused_parameters', 'bool', true },
  { 'legacy_stage1', 'bool', false },
  { 'round_robin_gradients', 'bool', false },
  { 'zero_hpz_partition_size', 'int', 1, min = 1 },
  { 'zero_quantized_weights', 'bool', false },
  { 'zero_quantized_nontrainable_weights', 'bool', false },
  { 'zero_quantized_gradients', 'bool', false },
  { 'zeropp_loco_param', 'any', nil },
  { 'mics_shard_size', 'int', -1 },
  { 'mics_hierarchical_params_gather', 'bool', false },
  { 'memory_efficient_linear', 'bool', true },
  { 'pipeline_loading_checkpoint', 'bool', false },
  { 'override_module_apply', 'bool', true },
  { 'log_trace_cache_warnings', 'bool', false },
  -- DeepSpeed's deprecated spellings of the offload blocks, rewritten by CHECK.zero.
  { 'cpu_offload', 'custom', nil },
  { 'cpu_offload_param', 'custom', nil },
  { 'cpu_offload_use_pin_memory', 'custom', nil },
  { 'aio', 'custom', nil },
}

local AIO = {
  strict = true, canonical = 'aio',
  { 'block_size', 'int', 1048576, min = 1 },
  { 'queue_depth', 'int', 8, min = 1 },
  { 'intra_op_parallelism', 'int', 1, min = 1, aliases = { 'thread_count' } },
  { 'single_submit', 'bool', false },
  { 'overlap_events', 'bool', true },
  { 'use_gds', 'bool', false },
}

local MONITOR = {
  strict = true,
  { 'enabled', 'bool', false },
  { 'output_path', 'str', '' },
  { 'job_name', 'str', 'DeepSpeedJobName' },
}

local WANDB = {
  strict = true,
  { 'enabled', 'bool', false },
  { 'group', 'str', nil },
  { 'team', 'str', nil },
  { 'project', 'str', 'deepspeed' },
}

local COMET = {
  strict = true,
  { 'enabled', 'bool', false },
  { 'samples_log_interval', 'int', 100, min = 1 },
  { 'project', 'str', nil },
  { 'workspace', 'str', nil },
  { 'api_key', 'str', nil },
  { 'experiment_name', 'str', nil },
  { 'experiment_key', 'str', nil },
  { 'online', 'bool', nil },
  { 'mode', 'str', nil },
}

local COMMS_LOGGER = {
  strict = true,
  { 'enabled', 'bool', false },
  { 'verbose', 'bool', false },
  { 'prof_all', 'bool', true },
  { 'debug', 'bool', false },
  { 'prof_ops', 'strlist', {} },
}

-- zlua.profiling.engine carries it out. Strict, where DeepSpeed ignores unknown keys: a
-- profile silently taken with a misspelt key's default would mislead.
local FLOPS_PROFILER = {
  strict = true,
  { 'enabled', 'bool', false },
  { 'recompute_fwd_factor', 'num', 0.0, min = 0 },
  { 'profile_step', 'int', 1, min = 0 },
  { 'module_depth', 'int', -1, min = -1 },
  { 'top_modules', 'int', 1, min = 1 },
  { 'detailed', 'bool', true },
  { 'output_file', 'str', nil },
}

local ACTIVATION_CHECKPOINTING = {
  { 'partition_activations', 'bool', false },
  { 'cpu_checkpointing', 'bool', false },
  { 'contiguous_memory_optimization', 'bool', false },
  { 'number_checkpoints', 'int', nil, min = 1 },
  { 'synchronize_checkpoint_boundary', 'bool', false },
  { 'profile', 'bool', false },
}

local CHECKPOINT = {
  { 'tag_validation', 'enum', 'WARN', values = { 'WARN', 'IGNORE', 'FAIL' } },
  { 'load_universal', 'bool', false },
  { 'use_node_local_storage', 'bool', false },
  { 'parallel_write', 'section', nil, spec = { { 'pipeline_stage', 'bool', false } } },
}

local TIMERS = {
  strict = true,
  { 'throughput', 'section', nil, spec = {
    strict = true,
    { 'enabled', 'bool', true },
    { 'synchronized', 'bool', true },
  } },
}

local DATA_TYPES = {
  { 'grad_accum_dtype', 'enum', nil, values = { 'fp32', 'fp16', 'bf16' } },
}

-- Optimizer params: DeepSpeed passes them to the optimizer's constructor as keyword
-- arguments, so an unknown one is an error there too.
local function betas_fill(ctx, path)
  return { ctx:arg_number('adam_beta1', path), ctx:arg_number('adam_beta2', path) }
end

local P_LR = { 'lr', 'num', 1e-3, min = 0, auto = fill('learning_rate') }
local P_BETAS = { 'betas', 'betas', { 0.9, 0.999 }, auto = betas_fill }
local P_EPS = { 'eps', 'num', 1e-8, min = 0, auto = fill('adam_epsilon') }
local P_WD = { 'weight_decay', 'num', 0.0, min = 0, auto = fill('weight_decay') }

local OPTIMIZER_PARAMS = {
  Adam = {
    strict = true, canonical = 'optimizer.params',
    P_LR, P_BETAS, P_EPS, P_WD,
    { 'bias_correction', 'bool', true },
    { 'amsgrad', 'bool', false },
    { 'adam_w_mode', 'bool', true },
    { 'torch_adam', 'bool', false },
  },
  Lamb = {
    strict = true, canonical = 'optimizer.params',
    P_LR, P_BETAS, P_EPS, P_WD,
    { 'bias_correction', 'bool', true },
    { 'max_coeff', 'num', 10.0, min = 0 },
    { 'min_coeff', 'num', 0.01, min = 0 },
    { 'amsgrad', 'bool', false },
    { 'eps_inside_sqrt', 'bool', false },
  },
  SGD = {
    strict = true, canonical = 'optimizer.params',
    P_LR,
    { 'momentum', 'num', 0.0, min = 0 },
    { 'dampening', 'num', 0.0, min = 0 },
    P_WD,
    { 'nesterov', 'bool', false },
    { 'maximize', 'bool', false },
  },
}
OPTIMIZER_PARAMS.AdamW = OPTIMIZER_PARAMS.Adam

-- Scheduler params, as zlua.lr (and DeepSpeed's lr_schedules) take them.
local function const(v) return function() return v end end
local S_MIN_LR = { 'warmup_min_lr', 'lrs', 0.0, auto = const(0.0) }
local S_MAX_LR = { 'warmup_max_lr', 'lrs', 0.001, auto = fill('learning_rate') }
local S_WARMUP = { 'warmup_num_steps', 'int', 1000, min = 0,
  auto = function(ctx, path) return ctx:warmup_steps(path) end }
local S_TOTAL = { 'total_num_steps', 'int', nil, min = 0, required = true,
  auto = function(ctx, path) return ctx:total_steps(path) end }
local S_TYPE = { 'warmup_type', 'enum', 'log', values = { 'log', 'linear' } }
local S_LAST = { 'last_batch_iteration', 'int', -1, min = -1 }

local SCHEDULER_PARAMS = {
  WarmupLR = { strict = true, S_MIN_LR, S_MAX_LR, S_WARMUP, S_TYPE, S_LAST },
  WarmupDecayLR = { strict = true, S_TOTAL, S_MIN_LR, S_MAX_LR, S_WARMUP, S_TYPE, S_LAST },
  WarmupCosineLR = {
    strict = true, S_TOTAL,
    { 'warmup_min_ratio', 'num', 0.0, min = 0, max = 1 },
    S_WARMUP,
    { 'cos_min_ratio', 'num', 0.0001, min = 0, max = 1 },
    S_TYPE, S_LAST,
  },
  OneCycle = {
    strict = true,
    { 'cycle_min_lr', 'lrs', nil, required = true },
    { 'cycle_max_lr', 'lrs', nil, required = true },
    { 'decay_lr_rate', 'num', 0.0, min = 0 },
    { 'cycle_first_step_size', 'num', 2000, gt = 0 },
    { 'cycle_second_step_size', 'num', nil, min = 0 },
    { 'cycle_first_stair_count', 'int', 0, min = 0 },
    { 'cycle_second_stair_count', 'int', nil, min = 0 },
    { 'decay_step_size', 'num', 0, min = 0 },
    { 'cycle_momentum', 'bool', true },
    { 'cycle_min_mom', 'lrs', 0.8 },
    { 'cycle_max_mom', 'lrs', 0.9 },
    { 'decay_mom_rate', 'num', 0.0, min = 0 },
    S_LAST,
  },
  LRRangeTest = {
    strict = true,
    { 'lr_range_test_min_lr', 'lrs', 0.001 },
    { 'lr_range_test_step_size', 'int', 2000, min = 1 },
    { 'lr_range_test_step_rate', 'num', 1.0 },
    { 'lr_range_test_staircase', 'bool', false },
    S_LAST,
  },
}
for name, spec in pairs(SCHEDULER_PARAMS) do spec.required_by = ' by ' .. name end

local function names_of(list, extra)
  local out = {}
  for _, n in ipairs(list) do out[#out + 1] = n end
  for _, n in ipairs(extra or {}) do out[#out + 1] = n end
  return out
end

local function contains(list, v)
  for _, x in ipairs(list) do
    if x == v then return true end
  end
  return false
end

function CHECK.optimizer(ctx, _, v, raw, key, path)
  if not is_object(v) then
    ctx:fail(raw, key, '%s must be an object {"type": ..., "params": {...}}, got %s', path, show(v))
  end
  unknown_keys(ctx, {}, v, path, { type = true, params = true, legacy_fusion = true },
    { 'type', 'params', 'legacy_fusion' })
  local t = v.type
  local implemented = { 'Adam', 'AdamW', 'Lamb', 'SGD' }
  if t == nil or t == json.null then
    ctx:fail(v, nil, '%s.type is required (one of %s)', path, concat(implemented, ', '))
  end
  if type(t) ~= 'string' then
    ctx:fail(v, 'type', '%s.type must be a string, got %s', path, show(t))
  end
  local name = OPTIMIZERS[t:lower()] or TORCH_OPTIMIZERS[t]
  if not name then
    for _, other in ipairs(UNIMPLEMENTED_OPTIMIZERS) do
      if other:lower() == t:lower() then
        ctx:fail(v, 'type', '%s.type = %s: the %s optimizer is not implemented in zlua yet '
          .. '(implemented: %s)', path, show(t), other, concat(implemented, ', '))
      end
    end
    ctx:fail(v, 'type', '%s.type: unknown optimizer %s (did you mean %s?)', path, show(t),
      nearest.find(t, names_of(implemented, UNIMPLEMENTED_OPTIMIZERS)))
  end
  local params = v.params
  if is_object(params) and params.max_grad_norm ~= nil then
    ctx:fail(params, 'max_grad_norm', '%s.params.max_grad_norm = %s is not supported: use the '
      .. 'top-level gradient_clipping instead (DeepSpeed rejects it too)', path, show(params.max_grad_norm))
  end
  local out = {
    type = name,
    params = check_section(ctx, OPTIMIZER_PARAMS[name], params, path .. '.params', v, 'params'),
    legacy_fusion = false,
  }
  if v.legacy_fusion ~= nil then
    out.legacy_fusion = CHECK.bool(ctx, nil, v.legacy_fusion, v, 'legacy_fusion',
      path .. '.legacy_fusion')
    ctx:notice(path .. '.legacy_fusion', 'optimizer.legacy_fusion', out.legacy_fusion)
  end
  local p = out.params
  if name == 'AdamW' and p.adam_w_mode == false then
    ctx:fail(params, 'adam_w_mode', '%s.params.adam_w_mode = false contradicts type "AdamW", '
      .. 'whose weight decay is always decoupled: use type "Adam" for L2 decay', path)
  end
  if name == 'SGD' and p.nesterov and (p.momentum <= 0 or p.dampening ~= 0) then
    ctx:fail(params, 'nesterov', '%s.params.nesterov needs momentum > 0 and dampening 0, got '
      .. 'momentum %s and dampening %s', path, show(p.momentum), show(p.dampening))
  end
  return out
end

function CHECK.scheduler(ctx, _, v, raw, key, path)
  if not is_object(v) then
    ctx:fail(raw, key, '%s must be an object {"type": ..., "params": {...}}, got %s', path, show(v))
  end
  unknown_keys(ctx, {}, v, path, { type = true, params = true }, { 'type', 'params' })
  local t = v.type
  if t == nil or t == json.null then
    ctx:fail(v, nil, '%s.type is required (one of %s)', path, concat(SCHEDULERS, ', '))
  end
  if type(t) ~= 'string' then
    ctx:fail(v, 'type', '%s.type must be a string, got %s', path, show(t))
  end
  if not contains(SCHEDULERS, t) then
    if contains(UNIMPLEMENTED_SCHEDULERS, t) then
      ctx:fail(v, 'type', '%s.type = %s: the torch scheduler %s is not implemented in zlua yet '
        .. '(implemented: %s)', path, show(t), t, concat(SCHEDULERS, ', '))
    end
    ctx:fail(v, 'type', '%s.type: unknown scheduler %s (did you mean %s?)', path, show(t),
      nearest.find(t, names_of(SCHEDULERS, UNIMPLEMENTED_SCHEDULERS)))
  end
  local params = check_section(ctx, SCHEDULER_PARAMS[t], v.params, path .. '.params', v, 'params')
  return { type = t, params = params }
end

-- zero_optimization: DeepSpeed's legacy forms are rewritten first (true/false for stage 1/0,
-- cpu_offload*), and an "aio" block inside is handed to the top-level aio.
function CHECK.zero(ctx, _, v, raw, key, path)
  if type(v) == 'boolean' then
    ctx:warning(raw, key, '%s = %s is deprecated: write {"stage": %d}', path, tostring(v),
      v and 1 or 0)
    v = { stage = v and 1 or 0 }
  end
  if v == json.null then v = nil end
  if v ~= nil and not is_object(v) then
    ctx:fail(raw, key, '%s must be an object, got %s', path, show(v))
  end
  local z = {}
  for k, x in pairs(v or {}) do z[k] = x end
  ctx.meta[z] = ctx.meta[v]
  local legacy = {
    { 'cpu_offload', 'offload_optimizer' },
    { 'cpu_offload_param', 'offload_param' },
  }
  for _, pair in ipairs(legacy) do
    local old, new = pair[1], pair[2]
    if z[old] ~= nil then
      CHECK.bool(ctx, nil, z[old], v, old, join(path, old))
      if z[new] ~= nil then
        ctx:fail(v, old, '%s and %s both given: %s is the deprecated form of %s, give one',
          join(path, old), join(path, new), old, new)
      end
      ctx:warning(v, old, '%s is deprecated: write %s = {"device": "cpu"}', join(path, old),
        join(path, new))
      if z[old] then z[new] = { device = 'cpu' } end
      z[old] = nil
    end
  end
  local pin = z.cpu_offload_use_pin_memory
  if pin ~= nil then
    CHECK.bool(ctx, nil, pin, v, 'cpu_offload_use_pin_memory',
      join(path, 'cpu_offload_use_pin_memory'))
    ctx:warning(v, 'cpu_offload_use_pin_memory', '%s is deprecated: write pin_memory in the '
      .. 'offload blocks', join(path, 'cpu_offload_use_pin_memory'))
    ctx:notice(join(path, 'cpu_offload_use_pin_memory'), 'zero_optimization.cpu_offload_use_pin_memory',
      pin)
    z.cpu_offload_use_pin_memory = nil
  end
  if z.aio ~= nil then
    ctx.nested_aio = { value = z.aio, raw = v }
    z.aio = nil
  end
  local out = check_section(ctx, ZERO, z, path, raw, key)
  if out.offload_optimizer.device ~= 'none' or out.offload_param.device ~= 'none' then
    for _, which in ipairs({ 'offload_optimizer', 'offload_param' }) do
      local o = out[which]
      if pin ~= nil and not (is_object(z[which]) and z[which].pin_memory ~= nil) then
        o.pin_memory = pin
      end
      if o.device == 'nvme' and o.nvme_path == nil then
        ctx:fail(z[which], 'device', '%s.%s.device is "nvme" but %s.%s.nvme_path is not given',
          path, which, path, which)
      end
    end
  end
  if out.overlap_comm == nil then out.overlap_comm = out.stage == 3 end
  if out.legacy_stage1 then
    ctx:fail(z, 'legacy_stage1', '%s.legacy_stage1 = true is not supported: the legacy stage 1 '
      .. 'was removed in DeepSpeed 0.5.9; remove the key', path)
  end
  return out
end

function CHECK.aio(ctx, e, v, raw, key, path)
  local nested = ctx.nested_aio
  if nested and v ~= nil and v ~= json.null then
    ctx:fail(nested.raw, 'aio', 'aio given twice, at the top level and in zero_optimization: '
      .. 'give one')
  end
  if nested then
    return check_section(ctx, e.spec, nested.value, 'zero_optimization.aio', nested.raw, 'aio')
  end
  return check_section(ctx, e.spec, v, path, raw, key)
end

local TOP = {
  canonical = '',
  { 'train_batch_size', 'batch', nil, keep_auto = true },
  { 'train_micro_batch_size_per_gpu', 'batch', nil, keep_auto = true },
  { 'gradient_accumulation_steps', 'batch', nil, keep_auto = true },
  { 'steps_per_print', 'int', nil, min = 1 },
  { 'wall_clock_breakdown', 'bool', false },
  { 'memory_breakdown', 'bool', false },
  { 'gradient_clipping', 'num', 0.0, min = 0, auto = fill('max_grad_norm') },
  { 'prescale_gradients', 'bool', false },
  { 'gradient_predivide_factor', 'num', 1.0, gt = 0 },
  { 'communication_data_type', 'enum', nil, values = { 'fp16', 'bf16', 'fp32' }, zlua = 'fp32' },
  { 'sparse_gradients', 'bool', false },
  { 'zero_allow_untested_optimizer', 'bool', false },
  { 'zero_force_ds_cpu_optimizer', 'bool', true },
  { 'dataloader_drop_last', 'bool', false },
  { 'disable_allgather', 'bool', false },
  { 'dump_state', 'bool', false },
  { 'vocabulary_size', 'int', nil, min = 1 },
  { 'graph_harvesting', 'bool', false },
  { 'sequence_parallel_size', 'int', 1, min = 1 },
  { 'fp16', 'section', nil, spec = FP16 },
  { 'bf16', 'section', nil, spec = BF16, aliases = { 'bfloat16' } },
  { 'amp', 'section', nil, spec = AMP },
  { 'optimizer', 'optimizer', nil },
  { 'scheduler', 'scheduler', nil },
  { 'zero_optimization', 'zero', nil },
  { 'aio', 'aio', nil, spec = AIO },
  { 'data_types', 'section', nil, spec = DATA_TYPES },
  { 'checkpoint', 'section', nil, spec = CHECKPOINT },
  { 'timers', 'section', nil, spec = TIMERS },
  { 'tensorboard', 'section', nil, spec = MONITOR },
  { 'csv_monitor', 'section', nil, spec = MONITOR },
  { 'wandb', 'section', nil, spec = WANDB },
  { 'comet', 'section', nil, spec = COMET },
  { 'comms_logger', 'section', nil, spec = COMMS_LOGGER },
  { 'flops_profiler', 'section', nil, spec = FLOPS_PROFILER },
  { 'activation_checkpointing', 'section', nil, spec = ACTIVATION_CHECKPOINTING },
}
for _, gate in ipairs({ 'data_efficiency', 'curriculum_learning', 'elasticity', 'autotuning',
    'quantize_training', 'eigenvalue', 'progressive_layer_drop', 'hybrid_engine', 'nebula' }) do
  TOP[#TOP + 1] = { gate, 'gate', nil }
end
for _, block in ipairs({ 'pipeline', 'tensor_parallel', 'sparse_attention',
    'compression_training', 'weight_quantization', 'moe' }) do
  TOP[#TOP + 1] = { block, 'block', nil }
end

-- Every key name of the schema goes into KEY_INDEX with the first path it has.
local function index(spec, path)
  for _, e in ipairs(spec) do
    local full = join(path, e[1])
    if KEY_INDEX[e[1]] == nil then KEY_INDEX[e[1]] = full end
    if e.spec then index(e.spec, full) end
  end
end
for _, e in ipairs(TOP) do KEY_INDEX[e[1]] = e[1] end
index(TOP, '')
index(ZERO, 'zero_optimization')
index(OPTIMIZER_PARAMS.Adam, 'optimizer.params')
index(OPTIMIZER_PARAMS.Lamb, 'optimizer.params')
index(OPTIMIZER_PARAMS.SGD, 'optimizer.params')
for _, t in ipairs(SCHEDULERS) do index(SCHEDULER_PARAMS[t], 'scheduler.params') end
KEY_INDEX.type = nil
KEY_INDEX.enabled = nil

-- The batch triple ---------------------------------------------------------------------------

local BATCH_KEYS = { 'train_batch_size', 'train_micro_batch_size_per_gpu',
  'gradient_accumulation_steps' }

local function resolve_batch(ctx, raw, cfg)
  local n = ctx.world_size
  local tbs, mbs, gas = cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu,
    cfg.gradient_accumulation_steps
  local where_key
  for _, k in ipairs(BATCH_KEYS) do
    if raw[k] ~= nil and where_key == nil then where_key = k end
  end
  local function fail(msg, ...) ctx:fail(raw, where_key, msg, ...) end
  local function arg(name, key)
    local v = ctx:arg_number(name, key, true)
    if v <= 0 then
      raise(fmt('%s: args.%s must be greater than 0, got %d (it fills %s)',
        ctx.source or 'config', name, v, key))
    end
    return v
  end
  local MBS_ARG, GAS_ARG = 'per_device_train_batch_size', 'gradient_accumulation_steps'
  -- micro batch x accumulation x world size, refused where it passes 2^63 (Lua's
  -- integers wrap, and a wrapped product could even pass the check below).
  local function product(m, g)
    if m > math.maxinteger // g or m * g > math.maxinteger // n then
      fail('train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size = %d * %d * %d does not fit '
        .. 'a 64-bit integer', m, g, n)
    end
    return m * g * n
  end

  if mbs == 'auto' then mbs = arg(MBS_ARG, 'train_micro_batch_size_per_gpu') end
  if gas == 'auto' then gas = arg(GAS_ARG, 'gradient_accumulation_steps') end
  if tbs == 'auto' then
    local m = mbs or arg(MBS_ARG, 'train_batch_size')
    local g = gas or (ctx:arg_given(GAS_ARG) and arg(GAS_ARG, 'train_batch_size')) or 1
    tbs = product(m, g)
  end
  if tbs == nil and mbs == nil and ctx:arg_given(MBS_ARG) then
    mbs = arg(MBS_ARG, 'train_micro_batch_size_per_gpu')
    if gas == nil and ctx:arg_given(GAS_ARG) then
      gas = arg(GAS_ARG, 'gradient_accumulation_steps')
    end
  end

  local derived
  if tbs and mbs and gas then
    derived = nil
  elseif tbs and mbs then
    gas = tbs // mbs // n
    derived = fmt('gradient_accumulation_steps = train_batch_size // '
      .. 'train_micro_batch_size_per_gpu // world_size = %d // %d // %d = %d', tbs, mbs, n, gas)
  elseif tbs and gas then
    mbs = tbs // n // gas
    derived = fmt('train_micro_batch_size_per_gpu = train_batch_size // world_size // '
      .. 'gradient_accumulation_steps = %d // %d // %d = %d', tbs, n, gas, mbs)
  elseif mbs and gas then
    tbs = product(mbs, gas)
  elseif tbs then
    gas = 1
    mbs = tbs // n
    derived = fmt('train_micro_batch_size_per_gpu = train_batch_size // world_size = %d // %d '
      .. '= %d', tbs, n, mbs)
  elseif mbs then
    gas = 1
    tbs = product(mbs, 1)
  else
    fail('Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided '
      .. '(or args.per_device_train_batch_size)')
  end
  if derived and (gas <= 0 or mbs <= 0) then
    fail('%s, which must be greater than 0', derived)
  end
  if tbs ~= product(mbs, gas) then
    fail('Check batch related parameters. train_batch_size is not equal to '
      .. 'micro_batch_per_gpu * gradient_acc_step * world_size %d != %d * %d * %d%s',
      tbs, mbs, gas, n, derived and ' (' .. derived .. ')' or '')
  end
  cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu = tbs, mbs
  cfg.gradient_accumulation_steps, cfg.world_size = gas, n
end

-- Checks across sections, as DeepSpeed's asserts make them ---------------------------------

local function cross_check(ctx, raw, cfg)
  local z = cfg.zero_optimization
  local rz = is_object(raw.zero_optimization) and raw.zero_optimization or nil
  if cfg.fp16.enabled and cfg.bf16.enabled then
    ctx:fail(raw, 'fp16', 'fp16.enabled and bf16.enabled are both true: choose one precision')
  end
  if (z.stage == 1 or z.stage == 2) and z.reduce_scatter then
    if cfg.gradient_predivide_factor ~= 1 then
      ctx:fail(raw, 'gradient_predivide_factor', 'gradient_predivide_factor = %s is not '
        .. 'supported with zero_optimization.reduce_scatter at stage %d: set it to 1.0 or '
        .. 'reduce_scatter to false', show(cfg.gradient_predivide_factor), z.stage)
    end
    if cfg.prescale_gradients then
      ctx:fail(raw, 'prescale_gradients', 'prescale_gradients = true is not supported with '
        .. 'zero_optimization.reduce_scatter at stage %d: set reduce_scatter to false', z.stage)
    end
  end
  if z.allgather_bucket_size % 2 ~= 0 then
    ctx:fail(rz, 'allgather_bucket_size', 'zero_optimization.allgather_bucket_size must be a '
      .. 'multiple of 2, got %d', z.allgather_bucket_size)
  end
  if cfg.vocabulary_size and cfg.vocabulary_size % 8 ~= 0 then
    ctx:warning(raw, 'vocabulary_size', 'vocabulary_size = %d is not a multiple of 8: matrix '
      .. 'multiplies over the vocabulary may run slower on a GPU (DeepSpeed warns the same)',
      cfg.vocabulary_size)
  end
  local offloading = z.offload_optimizer.device ~= 'none' or z.offload_param.device ~= 'none'
  if z.stage == 0 and offloading then
    ctx:warning(rz, 'stage', 'zero_optimization offload blocks need stage 1 or more '
      .. '(stage 3 for offload_param): ignored at stage 0')
  elseif z.stage < 3 and z.offload_param.device ~= 'none' then
    ctx:warning(rz, 'offload_param', 'zero_optimization.offload_param needs stage 3: ignored '
      .. 'at stage %d', z.stage)
  end
  local opt = cfg.optimizer
  if opt and opt.type == 'Lamb' and cfg.fp16.enabled and cfg.fp16.loss_scale > 0 then
    ctx:fail(raw, 'optimizer', 'optimizer Lamb needs dynamic loss scaling: fp16.loss_scale must '
      .. 'be 0, got %s', show(cfg.fp16.loss_scale))
  end
end

-- Loading ----------------------------------------------------------------------------------

local function default_warn(msg)
  io.stderr:write('zlua.config: warning: ', msg, '\n')
end

local function build(raw, meta, source, opts)
  if opts ~= nil and type(opts) ~= 'table' then
    raise('config.load: options must be a table, got ' .. type(opts))
  end
  opts = opts or {}
  local world_size = opts.world_size or 1
  if not (mtype(world_size) and tointeger(world_size)) or world_size < 1 then
    raise('config.load: world_size must be a positive integer, got ' .. show(world_size))
  end
  if opts.args ~= nil and type(opts.args) ~= 'table' then
    raise('config.load: args must be a table, got ' .. type(opts.args))
  end
  if opts.warn ~= nil and type(opts.warn) ~= 'function' then
    raise('config.load: warn must be a function, got ' .. type(opts.warn))
  end
  local ctx = setmetatable({
    source = source, meta = meta or {}, args = opts.args, world_size = tointeger(world_size),
    warn = opts.warn or default_warn, notices = {},
  }, Ctx)
  if not is_object(raw) then
    raise(fmt('%s: a DeepSpeed config must be an object, got %s', source or 'config', show(raw)))
  end
  local cfg = check_section(ctx, TOP, raw, '')
  -- --nvme_path on the command line moves every NVMe offload to that folder.
  local nvme = opts.args and opts.args.nvme_path
  if nvme ~= nil and nvme ~= '' then
    if type(nvme) ~= 'string' or nvme:find('\0', 1, true) then
      raise('config.load: args.nvme_path must be a folder path, got ' .. show(nvme))
    end
    for _, which in ipairs({ 'offload_optimizer', 'offload_param' }) do
      local o = cfg.zero_optimization[which]
      if o.device == 'nvme' then o.nvme_path = nvme end
    end
  end
  resolve_batch(ctx, raw, cfg)
  cross_check(ctx, raw, cfg)
  cfg.source = source
  cfg.notices = ctx.notices
  return cfg
end

--- config.parse(text [, opts]) -> cfg: a config from JSON text; opts.name names it in
--- messages (default "config").
function config.parse(text, opts)
  if type(text) ~= 'string' then
    raise('config.parse: expected JSON text, got ' .. type(text))
  end
  local name = opts and opts.name or 'config'
  local ok, raw, meta = pcall(json.decode, text, name)
  if not ok then raise(raw) end
  return build(raw, meta, name, opts)
end

-- The largest config file read: DeepSpeed's are a few KB.
local CONFIG_MAX = 16 << 20

--- config.read(path) -> text: the bytes config.load reads from path, refused as it refuses
--- them (no such file, not a regular file, over 16 MiB); C hosts (zlua/ds_config.h) tell a file
--- that cannot be read from a config that is wrong by where the error comes from.
function config.read(path)
  if type(path) ~= 'string' then
    raise('config.read: expected a file name, got ' .. type(path))
  end
  if path:find('\0', 1, true) then raise('config: the file name holds a NUL byte: ' .. show(path)) end
  if zl.core.path_kind(path) == nil then raise('config: cannot read ' .. path .. ': No such file or directory') end
  -- A regular file of bounded size only: a folder, a FIFO or a device is named, never read.
  local ok, text = pcall(zl.core.read_file, path, CONFIG_MAX)
  if not ok then raise('config: ' .. tostring(text):gsub('^[^\n]-:%d+: ', '', 1)) end
  return text
end

--- config.load(path_or_table [, opts]) -> cfg. See the top of this file.
function config.load(source, opts)
  if type(source) == 'table' then
    return build(source, nil, nil, opts)
  end
  if type(source) ~= 'string' then
    raise('config.load: expected a file name or a table, got ' .. type(source))
  end
  local text = config.read(source)
  local ok, raw, meta = pcall(json.decode, text, source)
  if not ok then raise(raw) end
  return build(raw, meta, source, opts)
end

return config
