-- Tests zlua.config: every seed config (configs/seed_*.json, copied verbatim from the seeds)
-- loads; defaults; integer coercion and fractional errors; unknown keys (errors in strict
-- sections, warnings elsewhere, both with the nearest key); keys recognised but not
-- implemented; "auto" filled from args and its errors; the batch triple in every
-- combination with DeepSpeed's messages; bf16/bfloat16; cross-key checks; file positions;
-- and a corpus of bad configs, each with the key and value in its message.

local config = require 'zlua.config'

local H = require 'harness'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

-- A full set of Hugging Face TrainingArguments-style values.
local ARGS = {
  per_device_train_batch_size = 4, gradient_accumulation_steps = 2, learning_rate = 3e-5,
  adam_beta1 = 0.9, adam_beta2 = 0.95, adam_epsilon = 1e-6, weight_decay = 0.01,
  max_grad_norm = 1.0, warmup_steps = 10, max_steps = 100, hidden_size = 64,
}

local function with(base, extra)
  local out = {}
  for k, v in pairs(base) do out[k] = v end
  for k, v in pairs(extra or {}) do out[k] = v end
  return out
end

-- Loads t (a table, or a path) collecting warnings: returns cfg, warnings.
local function load(t, opts)
  local warnings = {}
  opts = with({ warn = function(m) warnings[#warnings + 1] = m end }, opts)
  return config.load(t, opts), warnings
end

-- A table config with a batch size, plus extra keys.
local function cfg_of(extra)
  return with({ train_batch_size = 8 }, extra)
end

local tmpfiles = {}
local function write(text)
  local path = os.tmpname()
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
  tmpfiles[#tmpfiles + 1] = path
  return path
end

local function has_warning(warnings, needle)
  for _, w in ipairs(warnings) do
    if w:find(needle, 1, true) then return true end
  end
  return false
end

local SEEDS = {
  'seed_000_zero2_auto_bfloat16', 'seed_001_zero1_bf16_offload', 'seed_001_cifar_adam',
  'seed_003_nvme_offload', 'seed_003_zero2_auto', 'seed_003_zero2_manual', 'seed_003_zero3_auto',
  'seed_003_zero3_manual', 'seed_003_optimizer_auto', 'seed_003_optimizer_explicit',
  'seed_003_allow_untested_optimizer', 'seed_003_force_ds_cpu_optimizer',
}

local function seed(name) return 'configs/' .. name .. '.json' end

test('seeds_load', function()
  for _, name in ipairs(SEEDS) do
    for _, ws in ipairs({ 1, 2 }) do
      local ok, cfg, warnings = pcall(load, seed(name), { args = ARGS, world_size = ws })
      check(ok, name .. ' loads: ' .. tostring(cfg))
      if ok then
        check_eq(#warnings, 0, name .. ' gives no warning')
        check_eq(cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu
          * cfg.gradient_accumulation_steps * ws, name .. ' batch triple')
        check_eq(cfg.world_size, ws)
        check_eq(cfg.source, seed(name))
      end
    end
  end
end)

test('seed_values', function()
  local c = load(seed('seed_000_zero2_auto_bfloat16'), { args = with(ARGS, { bf16 = true }) })
  check_eq(c.bf16.enabled, true, 'bfloat16 auto from args.bf16')
  check_eq(c.fp16.enabled, false, 'fp16 auto without args.fp16')
  check_eq(c.steps_per_print, 100000)
  check_eq(math.type(c.steps_per_print), 'integer', '1e5 is an integer')
  check_eq(c.zero_optimization.stage, 2)
  check_eq(c.zero_optimization.allgather_bucket_size, 200000000)
  check_eq(math.type(c.zero_optimization.reduce_bucket_size), 'integer')
  check_eq(c.zero_optimization.offload_optimizer.device, 'cpu')
  check_eq(c.zero_optimization.offload_optimizer.pin_memory, true)
  check_eq(c.zero_optimization.offload_param.device, 'none')
  check_eq(c.optimizer.type, 'AdamW')
  check_eq(c.optimizer.params.lr, 3e-5)
  check_eq(c.optimizer.params.betas[1], 0.9)
  check_eq(c.optimizer.params.betas[2], 0.95)
  check_eq(c.optimizer.params.eps, 1e-6)
  check_eq(c.optimizer.params.weight_decay, 0.01)
  check_eq(c.optimizer.params.adam_w_mode, true)
  check_eq(c.scheduler.type, 'WarmupLR')
  check_eq(c.scheduler.params.warmup_min_lr, 0.0)
  check_eq(c.scheduler.params.warmup_max_lr, 3e-5)
  check_eq(c.scheduler.params.warmup_num_steps, 10)
  check_eq(c.gradient_clipping, 1.0)
  check_eq(c.train_micro_batch_size_per_gpu, 4)
  check_eq(c.gradient_accumulation_steps, 2)
  check_eq(c.train_batch_size, 8)

  c = load(seed('seed_001_zero1_bf16_offload'), { world_size = 2 })
  check_eq(c.train_batch_size, 32)
  check_eq(c.train_micro_batch_size_per_gpu, 8)
  check_eq(c.gradient_accumulation_steps, 2, '32 // 8 // 2')
  check_eq(c.bf16.enabled, true)
  check_eq(c.fp16.enabled, false)
  check_eq(c.fp16.hysteresis, 2)
  check_eq(c.optimizer.params.weight_decay, 3e-7)
  check_eq(c.zero_optimization.stage, 1)
  check_eq(c.zero_optimization.overlap_comm, true)
  check_eq(c.wall_clock_breakdown, false)
  check_eq(c.steps_per_print, 100)

  c = load(seed('seed_001_cifar_adam'))
  check_eq(c.train_micro_batch_size_per_gpu, 4)
  check_eq(c.gradient_accumulation_steps, 1)
  check_eq(c.optimizer.type, 'Adam')
  check_eq(c.optimizer.params.adam_w_mode, true, 'Adam decouples weight decay by default')
  check_eq(c.scheduler.params.warmup_max_lr, 0.001)
  check_eq(c.zero_optimization.stage, 0)
  check_eq(c.zero_optimization.overlap_comm, false)

  c = load(seed('seed_003_nvme_offload'), { args = ARGS })
  local z = c.zero_optimization
  check_eq(z.stage, 3)
  check_eq(z.overlap_comm, true)
  check_eq(z.offload_optimizer.device, 'nvme')
  check_eq(z.offload_optimizer.nvme_path, '/local_nvme')
  check_eq(z.offload_optimizer.buffer_count, 4)
  check_eq(z.offload_optimizer.fast_init, false)
  check_eq(z.offload_param.device, 'nvme')
  check_eq(z.offload_param.buffer_count, 5)
  check_eq(z.offload_param.buffer_size, 100000000)
  check_eq(z.offload_param.max_in_cpu, 1000000000)
  check_eq(c.aio.block_size, 262144, 'aio nested in zero_optimization')
  check_eq(c.aio.queue_depth, 32)
  check_eq(c.aio.intra_op_parallelism, 1, 'thread_count is the old name')
  check_eq(c.aio.overlap_events, true)
  check_eq(z.sub_group_size, 1000000000)
  check_eq(z.reduce_bucket_size, 64 * 64, 'auto: hidden_size^2')
  check_eq(z.stage3_prefetch_bucket_size, 3686, 'auto: floor(0.9 hidden_size^2)')
  check_eq(math.type(z.stage3_prefetch_bucket_size), 'integer')
  check_eq(z.stage3_param_persistence_threshold, 640, 'auto: 10 hidden_size')
  check_eq(z.stage3_gather_16bit_weights_on_model_save, true)
  check_eq(c.train_micro_batch_size_per_gpu, 4, 'batch from args when the config has none')
  check_eq(c.gradient_accumulation_steps, 2)

  c = load(seed('seed_003_zero3_manual'), { args = { per_device_train_batch_size = 2 } })
  z = c.zero_optimization
  check_eq(z.stage3_prefetch_bucket_size, 940000, '0.94e6')
  check_eq(math.type(z.stage3_prefetch_bucket_size), 'integer')
  check_eq(z.reduce_bucket_size, 1000000)
  check_eq(z.stage3_param_persistence_threshold, 10000)
  check_eq(z.offload_param.device, 'cpu')
  check_eq(c.fp16.enabled, true)
  check_eq(c.fp16.loss_scale, 0)
  check_eq(c.fp16.initial_scale_power, 16)
  check_eq(c.fp16.min_loss_scale, 1)

  c = load(seed('seed_003_zero2_auto'), { args = with(ARGS, { fp16 = true }) })
  check_eq(c.fp16.enabled, true, 'fp16 auto from args.fp16')
  check_eq(c.zero_optimization.reduce_bucket_size, 200000000)

  c = load(seed('seed_003_allow_untested_optimizer'), { args = ARGS })
  check_eq(c.zero_allow_untested_optimizer, true)
  check_eq(c.optimizer, nil)
  check_eq(c.scheduler, nil)
  c = load(seed('seed_003_force_ds_cpu_optimizer'), { args = ARGS })
  check_eq(c.zero_force_ds_cpu_optimizer, false)
end)

-- Without args, each seed with an "auto" names the key and the argument that would fill it.
test('seeds_without_args', function()
  local want = {
    seed_000_zero2_auto_bfloat16 = 'gradient_clipping is "auto" and args.max_grad_norm, '
      .. 'which fills it, was not given',
    seed_003_zero2_auto = 'gradient_clipping is "auto" and args.max_grad_norm',
    seed_003_zero3_auto = 'gradient_clipping is "auto" and args.max_grad_norm',
    seed_003_optimizer_auto = 'optimizer.params.lr is "auto" and args.learning_rate',
    seed_003_nvme_offload = 'zero_optimization.reduce_bucket_size is "auto" and '
      .. 'args.hidden_size, which fills it, was not given',
    seed_003_allow_untested_optimizer = 'Either train_batch_size or '
      .. 'train_micro_batch_size_per_gpu needs to be provided',
    seed_003_zero2_manual = 'Either train_batch_size or train_micro_batch_size_per_gpu',
    seed_003_zero3_manual = 'Either train_batch_size or train_micro_batch_size_per_gpu',
  }
  for name, needle in pairs(want) do
    check_error(function() config.load(seed(name)) end, needle, name)
  end
  for _, name in ipairs({ 'seed_001_zero1_bf16_offload', 'seed_001_cifar_adam' }) do
    check(pcall(config.load, seed(name)), name .. ' needs no args')
  end
end)

test('defaults', function()
  local src = { train_micro_batch_size_per_gpu = 2 }
  local c, warnings = load(src)
  check_eq(#warnings, 0)
  check_eq(src.train_batch_size, nil, 'the input table is not modified')
  check_eq(c.train_batch_size, 2)
  check_eq(c.gradient_accumulation_steps, 1)
  check_eq(c.steps_per_print, nil)
  check_eq(c.gradient_clipping, 0.0)
  check_eq(c.gradient_predivide_factor, 1.0)
  check_eq(c.zero_force_ds_cpu_optimizer, true)
  check_eq(c.fp16.enabled, false)
  check_eq(c.fp16.loss_scale, 0)
  check_eq(c.fp16.initial_scale_power, 16)
  check_eq(c.fp16.loss_scale_window, 1000)
  check_eq(c.fp16.hysteresis, 2)
  check_eq(c.fp16.consecutive_hysteresis, false)
  check_eq(c.fp16.min_loss_scale, 1)
  check_eq(c.bf16.enabled, false)
  check_eq(c.amp.enabled, false)
  local z = c.zero_optimization
  check_eq(z.stage, 0)
  check_eq(z.contiguous_gradients, true)
  check_eq(z.reduce_scatter, true)
  check_eq(z.reduce_bucket_size, 500000000)
  check_eq(z.allgather_bucket_size, 500000000)
  check_eq(z.overlap_comm, false)
  check_eq(z.sub_group_size, 1000000000)
  check_eq(z.stage3_prefetch_bucket_size, 50000000)
  check_eq(z.stage3_param_persistence_threshold, 100000)
  check_eq(z.stage3_model_persistence_threshold, math.maxinteger)
  check_eq(z.stage3_max_live_parameters, 1000000000)
  check_eq(z.stage3_max_reuse_distance, 1000000000)
  check_eq(z.offload_optimizer.device, 'none')
  check_eq(z.offload_optimizer.ratio, 1.0)
  check_eq(z.offload_param.buffer_count, 5)
  check_eq(c.aio.block_size, 1048576)
  check_eq(c.aio.queue_depth, 8)
  check_eq(c.aio.overlap_events, true)
  check_eq(c.checkpoint.tag_validation, 'WARN')
  check_eq(c.checkpoint.parallel_write.pipeline_stage, false)
  check_eq(c.timers.throughput.enabled, true)
  check_eq(c.tensorboard.job_name, 'DeepSpeedJobName')
  check_eq(c.csv_monitor.output_path, '')
  check_eq(c.wandb.project, 'deepspeed')
  check_eq(c.comet.samples_log_interval, 100)
  check_eq(#c.comms_logger.prof_ops, 0)
  check_eq(c.flops_profiler.module_depth, -1)
  check_eq(c.data_efficiency.enabled, false)
  check_eq(c.optimizer, nil)
  check_eq(c.scheduler, nil)
  check_eq(c.source, nil)

  c = load(cfg_of({ zero_optimization = { stage = 3 },
    optimizer = { type = 'lamb' }, scheduler = { type = 'WarmupDecayLR',
      params = { total_num_steps = 100, warmup_num_steps = 10 } } }))
  check_eq(c.zero_optimization.overlap_comm, true, 'overlap_comm defaults on at stage 3')
  check_eq(c.optimizer.type, 'Lamb', 'DeepSpeed names are case-insensitive')
  check_eq(c.optimizer.params.max_coeff, 10.0)
  check_eq(c.optimizer.params.betas[2], 0.999)
  check_eq(c.scheduler.params.warmup_min_lr, 0.0)
  check_eq(c.scheduler.params.warmup_type, 'log')
  c = load(cfg_of({ optimizer = { type = 'SGD', params = { lr = 0.1, momentum = 0.9 } },
    scheduler = { type = 'OneCycle', params = { cycle_min_lr = 0.01, cycle_max_lr = { 0.1, 0.2 } } } }))
  check_eq(c.optimizer.params.nesterov, false)
  check_eq(c.scheduler.params.cycle_second_step_size, nil)
  check_eq(c.scheduler.params.cycle_max_lr[2], 0.2)
  check_eq(c.scheduler.params.cycle_min_mom, 0.8)
end)

test('integer_coercion', function()
  local c = load(cfg_of({ zero_optimization = { reduce_bucket_size = 2e8, sub_group_size = 1e9,
    stage = 2.0 }, steps_per_print = 1e2 }))
  check_eq(c.zero_optimization.reduce_bucket_size, 200000000)
  check_eq(math.type(c.zero_optimization.reduce_bucket_size), 'integer')
  check_eq(math.type(c.zero_optimization.stage), 'integer')
  check_eq(math.type(c.steps_per_print), 'integer')
  c = load({ train_batch_size = 3.2e1, gradient_accumulation_steps = 2e0 })
  check_eq(c.train_batch_size, 32)
  check_eq(math.type(c.train_micro_batch_size_per_gpu), 'integer')
  check_error(function()
    load(cfg_of({ zero_optimization = { stage = 3, stage3_prefetch_bucket_size = 15099494.4 } }))
  end, 'zero_optimization.stage3_prefetch_bucket_size must be an integer, got 15099494.4, '
    .. 'which has a fractional part')
  check_error(function() load(cfg_of({ zero_optimization = { stage = 1.5 } })) end,
    'zero_optimization.stage must be an integer, got 1.5')
  check_error(function() load({ train_batch_size = 8.5 }) end,
    'train_batch_size must be an integer, got 8.5, which has a fractional part')
  check_error(function() load(cfg_of({ fp16 = { hysteresis = 2.5 } })) end,
    'fp16.hysteresis must be an integer, got 2.5')
  check_error(function() load(cfg_of({ zero_optimization = { reduce_bucket_size = '2e8' } })) end,
    'zero_optimization.reduce_bucket_size must be an integer, got "2e8"')
  check_error(function() load(cfg_of({ aio = { block_size = 1e300 } })) end,
    'aio.block_size must be an integer, got 1e+300')
  -- From a file: the same, with the line.
  local path = write('{\n "train_batch_size": 8,\n "zero_optimization": {\n'
    .. '  "reduce_bucket_size": 2e8,\n  "allgather_bucket_size": 5e8,\n'
    .. '  "stage3_max_live_parameters": 1.5e3,\n  "stage3_max_reuse_distance": 1000.5\n }\n}')
  check_error(function() config.load(path) end, path .. ':7: zero_optimization.'
    .. 'stage3_max_reuse_distance must be an integer, got 1000.5, which has a fractional part')
end)

test('unknown_keys', function()
  -- Strict sections: errors naming the full path and the nearest key.
  local strict = {
    { { zero_optimization = { stage3_prefetch_bucket = 1 } },
      'unknown key zero_optimization.stage3_prefetch_bucket (did you mean '
      .. 'zero_optimization.stage3_prefetch_bucket_size?)' },
    { { zero_optimization = { offload_optimizer = { device = 'cpu', pin_memry = true } } },
      'unknown key zero_optimization.offload_optimizer.pin_memry (did you mean '
      .. 'zero_optimization.offload_optimizer.pin_memory?)' },
    { { zero_optimization = { offload_param = { device = 'cpu', buffer_counts = 2 } } },
      'unknown key zero_optimization.offload_param.buffer_counts (did you mean '
      .. 'zero_optimization.offload_param.buffer_count?)' },
    { { aio = { queue_deep = 4 } }, 'unknown key aio.queue_deep (did you mean aio.queue_depth?)' },
    { { tensorboard = { output = 'x' } },
      'unknown key tensorboard.output (did you mean tensorboard.output_path?)' },
    { { csv_monitor = { job = 'x' } }, 'unknown key csv_monitor.job (did you mean csv_monitor.job_name?)' },
    { { wandb = { projects = 'x' } }, 'unknown key wandb.projects (did you mean wandb.project?)' },
    { { comet = { api = 'x' } }, 'unknown key comet.api (did you mean comet.api_key?)' },
    { { comms_logger = { verbos = true } },
      'unknown key comms_logger.verbos (did you mean comms_logger.verbose?)' },
    { { optimizer = { type = 'Adam', params = { beta = { 0.9, 0.99 } } } },
      'unknown key optimizer.params.beta (did you mean optimizer.params.betas?)' },
    { { scheduler = { type = 'WarmupLR', params = { warmup_steps = 5 } } },
      'unknown key scheduler.params.warmup_steps (did you mean scheduler.params.warmup_num_steps?)' },
    { { zero_optimization = { stage = 2, offload_param_device = 'cpu' } },
      'unknown key zero_optimization.offload_param_device (did you mean '
      .. 'zero_optimization.offload_param?)' },
    -- A key of another section: the path where it belongs.
    { { zero_optimization = { stage = 1, loss_scale = 0 } },
      'unknown key zero_optimization.loss_scale (did you mean fp16.loss_scale?)' },
  }
  for _, c in ipairs(strict) do
    check_error(function() load(cfg_of(c[1])) end, c[2])
  end
  -- Elsewhere: warnings, and the config still loads.
  local lenient = {
    { { stage = 2 }, 'unknown key stage ignored (did you mean zero_optimization.stage?)' },
    { { train_batch = 8 }, 'unknown key train_batch ignored (did you mean train_batch_size?)' },
    { { gradient_clip = 1.0 }, 'unknown key gradient_clip ignored (did you mean gradient_clipping?)' },
    { { fp16 = { loss_scal = 0 } }, 'unknown key fp16.loss_scal ignored (did you mean fp16.loss_scale?)' },
    { { bf16 = { enable = true } }, 'unknown key bf16.enable ignored (did you mean bf16.enabled?)' },
    { { optimizer = { type = 'Adam', param = {} } },
      'unknown key optimizer.param ignored (did you mean optimizer.params?)' },
    { { checkpoint = { tag_validate = 'Warn' } },
      'unknown key checkpoint.tag_validate ignored (did you mean checkpoint.tag_validation?)' },
    { { offload_optimizer = { device = 'cpu' } },
      'unknown key offload_optimizer ignored (did you mean zero_optimization.offload_optimizer?)' },
  }
  for _, c in ipairs(lenient) do
    local ok, cfg, warnings = pcall(load, cfg_of(c[1]))
    check(ok, 'loads with an unknown key: ' .. tostring(cfg))
    if ok then
      check(has_warning(warnings, c[2]), 'warning "' .. c[2] .. '", got: '
        .. table.concat(warnings, ' | '))
    end
  end
  -- Each unknown key gets its own warning; from a file, with its line.
  local path = write('{\n "train_batch_size": 8,\n "foo": 1,\n "fp16": {"enabld": true}\n}')
  local _, warnings = load(path)
  check_eq(#warnings, 2)
  check_eq(warnings[1], path .. ':3: unknown key foo ignored (did you mean aio?)')
  check_eq(warnings[2], path .. ':4: unknown key fp16.enabld ignored (did you mean fp16.enabled?)')
  -- A Lua table's keys must be strings.
  check_error(function() load({ train_batch_size = 8, [1] = 2 }) end,
    'config: keys must be strings, got 1')
end)

test('unimplemented', function()
  local cases = {
    { { dump_state = true }, 'dump_state = true: dump_state is not implemented in zlua yet (remove the key '
      .. 'or set it to false)' },
    { { sparse_gradients = true }, 'sparse_gradients = true: sparse (CSR) gradient all-reduce is '
      .. 'not implemented' },
    { { communication_data_type = 'bf16' }, 'communication_data_type = "bf16": gradient collectives '
      .. 'in fp16 or bf16 (zlua sums gradients in f32) is not implemented in zlua yet (remove the key or '
      .. 'set it to "fp32")' },
    { { sequence_parallel_size = 2 }, 'sequence_parallel_size = 2: sequence parallelism is not '
      .. 'implemented in zlua yet (remove the key or set it to 1)' },
    { { fp16 = { enabled = true, fp16_master_weights_and_grads = true } },
      'fp16.fp16_master_weights_and_grads = true: fp16 master weights and gradients is not implemented' },
    { { amp = { enabled = true, opt_level = 'O1' } }, 'amp.enabled = true: Apex AMP is not implemented' },
    { { zero_optimization = { stage = 3, zero_quantized_weights = true } },
      'zero_optimization.zero_quantized_weights = true: ZeRO++ quantized weights is not implemented' },
    { { zero_optimization = { stage = 3, zero_hpz_partition_size = 8 } },
      'zero_optimization.zero_hpz_partition_size = 8: ZeRO++ hierarchical partitioning is not '
      .. 'implemented in zlua yet (remove the key or set it to 1)' },
    { { zero_optimization = { stage = 3, mics_shard_size = 4 } },
      'zero_optimization.mics_shard_size = 4: MiCS sharding' },
    { { zero_optimization = { stage = 2, zeropp_loco_param = { err_beta = 0.8 } } },
      'zero_optimization.zeropp_loco_param = an object: LoCo-ZeRO++ is not implemented' },
    { { zero_optimization = { stage = 3, offload_optimizer = { device = 'cpu', ratio = 0.3 } } },
      'zero_optimization.offload_optimizer.ratio = 0.3: partial optimizer offload (DeepSpeed\'s '
      .. 'ZeRO-Offload++ at stage 3) is not implemented in zlua yet (remove the key or set it to 1.0)' },
    { { aio = { use_gds = true } }, 'aio.use_gds = true: GPUDirect Storage is not implemented' },
    { { optimizer = { type = 'Adam', params = { amsgrad = true } } },
      'optimizer.params.amsgrad = true: the AMSGrad variant is not implemented' },
    { { optimizer = { type = 'SGD', params = { maximize = true } } },
      'optimizer.params.maximize = true: maximising SGD is not implemented' },
    { { wandb = { enabled = true } }, 'wandb.enabled = true: the Weights & Biases monitor is not implemented' },
    { { comet = { enabled = true } }, 'comet.enabled = true: the Comet monitor is not implemented' },
    { { comms_logger = { enabled = true } }, 'comms_logger.enabled = true: the communication logger '
      .. 'is not implemented in zlua yet (remove the key or set it to false)' },
    { { checkpoint = { use_node_local_storage = true } },
      'checkpoint.use_node_local_storage = true: node-local checkpoint storage is not implemented' },
    { { data_efficiency = { enabled = true, seed = 1 } }, 'data_efficiency.enabled = true: data '
      .. 'efficiency (curriculum learning, random-LTD) is not implemented in zlua yet (remove the '
      .. 'section or set enabled to false)' },
    { { elasticity = { enabled = true } }, 'elasticity.enabled = true: elastic training is not implemented' },
    { { autotuning = { enabled = true } }, 'autotuning.enabled = true: autotuning is not implemented' },
    { { hybrid_engine = { enabled = true } }, 'hybrid_engine.enabled = true: the hybrid (RLHF) engine' },
    { { progressive_layer_drop = { enabled = true } }, 'progressive_layer_drop.enabled = true' },
    { { pipeline = { stages = 'auto' } }, 'pipeline: pipeline parallelism is not implemented in '
      .. 'zlua yet (remove the section)' },
    { { sparse_attention = { mode = 'fixed' } }, 'sparse_attention: sparse attention is not implemented' },
    { { compression_training = { weight_quantization = {} } }, 'compression_training: compression '
      .. 'training is not implemented' },
    { { tensor_parallel = { autotp_size = 2 } }, 'tensor_parallel: tensor parallelism is not implemented' },
    { { optimizer = { type = 'OneBitAdam', params = { freeze_step = 10 } } },
      'optimizer.type = "OneBitAdam": the OneBitAdam optimizer is not implemented in zlua yet '
      .. '(implemented: Adam, AdamW, Lamb, SGD)' },
    { { optimizer = { type = 'lion' } }, 'optimizer.type = "lion": the Lion optimizer is not implemented' },
    { { optimizer = { type = 'RMSprop' } }, 'the RMSprop optimizer is not implemented' },
    { { scheduler = { type = 'StepLR', params = { step_size = 10 } } },
      'scheduler.type = "StepLR": the torch scheduler StepLR is not implemented in zlua yet '
      .. '(implemented: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest)' },
  }
  for _, c in ipairs(cases) do
    check_error(function() load(cfg_of(c[1])) end, c[2])
  end
  -- The same keys at their defaults, or their sections switched off, load.
  local c = load(cfg_of({ memory_breakdown = false, flops_profiler = { enabled = false,
    profile_step = 2 }, zero_optimization = { zero_quantized_weights = false, mics_shard_size = -1,
    zero_hpz_partition_size = 1 }, data_efficiency = { enabled = false, seed = 3,
    data_sampling = { enabled = true } }, pipeline = {}, wandb = { enabled = false, team = 't' },
    amp = { enabled = false, opt_level = 'O1' } }))
  check_eq(c.flops_profiler.profile_step, 2)
  check_eq(c.wandb.team, 't')
  check_eq(c.pipeline, nil)
  -- The list is public, so engine issues can see what is left.
  check_eq(config.UNIMPLEMENTED['comms_logger.enabled'], 'the communication logger')
end)

test('auto_filling', function()
  local c = load({
    train_batch_size = 'auto', train_micro_batch_size_per_gpu = 'auto',
    gradient_accumulation_steps = 'auto', gradient_clipping = 'auto',
    fp16 = { enabled = 'auto' }, bf16 = { enabled = 'auto' },
    optimizer = { type = 'AdamW', params = { lr = 'auto', betas = 'auto', eps = 'auto',
      weight_decay = 'auto' } },
    scheduler = { type = 'WarmupDecayLR', params = { warmup_min_lr = 'auto',
      warmup_max_lr = 'auto', warmup_num_steps = 'auto', total_num_steps = 'auto' } },
    zero_optimization = { stage = 3, reduce_bucket_size = 'auto',
      stage3_prefetch_bucket_size = 'auto', stage3_param_persistence_threshold = 'auto',
      stage3_max_live_parameters = 'auto', offload_optimizer = { device = 'cpu', buffer_count = 'auto' } },
  }, { args = with(ARGS, { fp16 = true, hidden_size = 100 }), world_size = 3 })
  check_eq(c.train_micro_batch_size_per_gpu, 4)
  check_eq(c.gradient_accumulation_steps, 2)
  check_eq(c.train_batch_size, 24, 'world_size * per_device * gas')
  check_eq(c.gradient_clipping, 1.0)
  check_eq(c.fp16.enabled, true)
  check_eq(c.bf16.enabled, false)
  check_eq(c.optimizer.params.lr, 3e-5)
  check_eq(c.optimizer.params.betas[2], 0.95)
  check_eq(c.optimizer.params.eps, 1e-6)
  check_eq(c.optimizer.params.weight_decay, 0.01)
  check_eq(c.scheduler.params.warmup_min_lr, 0.0)
  check_eq(c.scheduler.params.warmup_max_lr, 3e-5)
  check_eq(c.scheduler.params.warmup_num_steps, 10)
  check_eq(c.scheduler.params.total_num_steps, 100)
  check_eq(c.zero_optimization.reduce_bucket_size, 10000)
  check_eq(c.zero_optimization.stage3_prefetch_bucket_size, 9000)
  check_eq(c.zero_optimization.stage3_param_persistence_threshold, 1000)
  check_eq(c.zero_optimization.stage3_max_live_parameters, 1000000000,
    'other "auto" in zero_optimization: the default, as DeepSpeed')
  check_eq(c.zero_optimization.offload_optimizer.buffer_count, 4)

  -- Below stage 3 the stage-3 sizes keep their defaults (DeepSpeed drops the "auto").
  c = load(cfg_of({ zero_optimization = { stage = 2, reduce_bucket_size = 'auto',
    stage3_prefetch_bucket_size = 'auto' } }), { args = ARGS })
  check_eq(c.zero_optimization.reduce_bucket_size, 4096)
  check_eq(c.zero_optimization.stage3_prefetch_bucket_size, 50000000)

  -- Arguments as strings (straight from a command line).
  c = load(cfg_of({ optimizer = { type = 'Adam', params = { lr = 'auto' } },
    fp16 = { enabled = 'auto' } }), { args = { learning_rate = '1e-4', fp16 = 'true' } })
  check_eq(c.optimizer.params.lr, 1e-4)
  check_eq(c.fp16.enabled, true)

  -- Total steps from epochs; warmup from a ratio; warmup 0 as HF's default.
  local sched = { type = 'WarmupDecayLR', params = { total_num_steps = 'auto',
    warmup_num_steps = 'auto' } }
  c = load(cfg_of({ scheduler = sched }), { args = { num_train_epochs = 2.5, steps_per_epoch = 7,
    warmup_ratio = 0.1 } })
  check_eq(c.scheduler.params.total_num_steps, 18, 'ceil(2.5 * 7)')
  check_eq(c.scheduler.params.warmup_num_steps, 2, 'ceil(18 * 0.1)')
  c = load(cfg_of({ scheduler = sched }), { args = { max_steps = 50, warmup_steps = 0,
    warmup_ratio = 0.2 } })
  check_eq(c.scheduler.params.warmup_num_steps, 10, 'warmup_steps 0 gives way to the ratio')
  c = load(cfg_of({ scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 'auto' } } }),
    { args = { warmup_steps = 0 } })
  check_eq(c.scheduler.params.warmup_num_steps, 0)

  -- Batch sizes: TBS auto uses the config's own MBS and GAS.
  c = load({ train_batch_size = 'auto', train_micro_batch_size_per_gpu = 3,
    gradient_accumulation_steps = 5 }, { world_size = 2 })
  check_eq(c.train_batch_size, 30)
  c = load({ train_batch_size = 'auto' }, { args = { per_device_train_batch_size = 6 } })
  check_eq(c.train_batch_size, 6)
  check_eq(c.gradient_accumulation_steps, 1)
end)

test('auto_errors', function()
  local cases = {
    { { train_micro_batch_size_per_gpu = 'auto' }, nil,
      'train_micro_batch_size_per_gpu is "auto" and args.per_device_train_batch_size, which fills '
      .. 'it, was not given' },
    { { train_batch_size = 8, gradient_accumulation_steps = 'auto' }, {},
      'gradient_accumulation_steps is "auto" and args.gradient_accumulation_steps, which fills it, '
      .. 'was not given' },
    { { train_batch_size = 'auto' }, {}, 'train_batch_size is "auto" and '
      .. 'args.per_device_train_batch_size, which fills it, was not given' },
    { cfg_of({ gradient_clipping = 'auto' }), {}, 'gradient_clipping is "auto" and '
      .. 'args.max_grad_norm, which fills it, was not given' },
    { cfg_of({ optimizer = { type = 'Adam', params = { betas = 'auto' } } }), { adam_beta1 = 0.9 },
      'optimizer.params.betas is "auto" and args.adam_beta2, which fills it, was not given' },
    { cfg_of({ optimizer = { type = 'Adam', params = { eps = 'auto' } } }), {},
      'optimizer.params.eps is "auto" and args.adam_epsilon' },
    { cfg_of({ optimizer = { type = 'Adam', params = { weight_decay = 'auto' } } }), {},
      'optimizer.params.weight_decay is "auto" and args.weight_decay' },
    { cfg_of({ scheduler = { type = 'WarmupLR', params = { warmup_max_lr = 'auto' } } }), {},
      'scheduler.params.warmup_max_lr is "auto" and args.learning_rate' },
    { cfg_of({ scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 'auto' } } }), {},
      'scheduler.params.warmup_num_steps is "auto" and args.warmup_steps, which fills it, was not '
      .. 'given (or args.warmup_ratio with the run\'s total steps)' },
    { cfg_of({ scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 'auto' } } }),
      { warmup_ratio = 0.1 }, 'scheduler.params.warmup_num_steps is "auto" and args.max_steps, '
      .. 'which fills it, was not given (or args.num_train_epochs with args.steps_per_epoch)' },
    { cfg_of({ scheduler = { type = 'WarmupDecayLR', params = { total_num_steps = 'auto' } } }),
      { max_steps = -1 }, 'scheduler.params.total_num_steps is "auto" and args.max_steps' },
    { cfg_of({ zero_optimization = { stage = 3, stage3_param_persistence_threshold = 'auto' } }),
      {}, 'zero_optimization.stage3_param_persistence_threshold is "auto" and args.hidden_size, '
      .. 'which fills it, was not given' },
    { cfg_of({ zero_optimization = { reduce_bucket_size = 'auto' } }), { hidden_size = 0 },
      'args.hidden_size must be greater than 0, got 0 (it fills zero_optimization.reduce_bucket_size)' },
    { cfg_of({ optimizer = { type = 'Adam', params = { lr = 'auto' } } }), { learning_rate = 'fast' },
      'args.learning_rate must be a number, got "fast" (it fills optimizer.params.lr)' },
    { cfg_of({ optimizer = { type = 'Adam', params = { lr = 'auto' } } }), { learning_rate = -1 },
      'optimizer.params.lr must be at least 0, got -1 (the value that filled "auto")' },
    { cfg_of({ fp16 = { enabled = 'auto' } }), { fp16 = 1 },
      'args.fp16 must be true or false, got 1 (it fills fp16.enabled)' },
    { { train_micro_batch_size_per_gpu = 'auto' }, { per_device_train_batch_size = 2.5 },
      'args.per_device_train_batch_size must be an integer, got 2.5' },
    { { train_micro_batch_size_per_gpu = 'auto' }, { per_device_train_batch_size = 0 },
      'args.per_device_train_batch_size must be greater than 0, got 0 (it fills '
      .. 'train_micro_batch_size_per_gpu)' },
    -- "auto" where nothing fills it.
    { cfg_of({ steps_per_print = 'auto' }), ARGS, 'steps_per_print is "auto", which nothing fills '
      .. 'for this key (only the keys the Hugging Face integration fills accept "auto")' },
    { cfg_of({ fp16 = { loss_scale = 'auto' } }), ARGS, 'fp16.loss_scale is "auto", which nothing fills' },
    { cfg_of({ optimizer = { type = 'Adam', params = { bias_correction = 'auto' } } }), ARGS,
      'optimizer.params.bias_correction is "auto", which nothing fills' },
    { cfg_of({ aio = { block_size = 'auto' } }), ARGS, 'aio.block_size is "auto", which nothing fills' },
  }
  for _, c in ipairs(cases) do
    check_error(function() load(c[1], { args = c[2] }) end, c[3])
  end
end)

test('batch_triple', function()
  local function triple(t, ws, args)
    local c = load(t, { world_size = ws, args = args })
    return { c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps }
  end
  local function check_triple(got, want, label)
    check_eq(table.concat(got, ','), table.concat(want, ','), label)
  end
  check_triple(triple({ train_batch_size = 16, train_micro_batch_size_per_gpu = 4,
    gradient_accumulation_steps = 2 }, 2), { 16, 4, 2 }, 'all three')
  check_triple(triple({ train_batch_size = 32, train_micro_batch_size_per_gpu = 4 }, 2),
    { 32, 4, 4 }, 'TBS+MBS')
  check_triple(triple({ train_batch_size = 32, gradient_accumulation_steps = 4 }, 2),
    { 32, 4, 4 }, 'TBS+GAS')
  check_triple(triple({ train_micro_batch_size_per_gpu = 4, gradient_accumulation_steps = 2 }, 3),
    { 24, 4, 2 }, 'MBS+GAS')
  check_triple(triple({ train_batch_size = 8 }, 2), { 8, 4, 1 }, 'TBS only')
  check_triple(triple({ train_micro_batch_size_per_gpu = 3 }, 4), { 12, 3, 1 }, 'MBS only')
  check_triple(triple({}, 2, { per_device_train_batch_size = 5 }), { 10, 5, 1 }, 'args')
  check_triple(triple({ gradient_accumulation_steps = 3 }, 2, { per_device_train_batch_size = 5,
    gradient_accumulation_steps = 7 }), { 30, 5, 3 }, 'the config\'s GAS before args\'')

  -- DeepSpeed's TestBatchConfig (tests/unit/runtime/test_ds_config_dict.py): num ranks, batch,
  -- micro batch, gas, success; every combination of the three that it tries.
  local PARAMS = { { 2, 32, 16, 1, true }, { 2, 32, 8, 2, true }, { 2, 33, 17, 2, false },
    { 2, 32, 18, 1, false } }
  for _, p in ipairs(PARAMS) do
    local n, tbs, mbs, gas, success = table.unpack(p)
    local label = table.concat({ n, tbs, mbs, gas }, ' ')
    local all = { train_batch_size = tbs, train_micro_batch_size_per_gpu = mbs,
      gradient_accumulation_steps = gas }
    local two = { train_batch_size = tbs, train_micro_batch_size_per_gpu = mbs }
    check_eq(pcall(load, all, { world_size = n }), success, label .. ' all three')
    check_eq(pcall(load, two, { world_size = n }), success, label .. ' TBS+MBS')
    if success then
      check_triple(triple({ train_batch_size = tbs, gradient_accumulation_steps = gas }, n),
        { tbs, mbs, gas }, label .. ' TBS+GAS')
      check_triple(triple({ train_micro_batch_size_per_gpu = mbs, gradient_accumulation_steps = gas },
        n), { tbs, mbs, gas }, label .. ' MBS+GAS')
      if gas == 1 then
        check_triple(triple({ train_micro_batch_size_per_gpu = mbs }, n), { tbs, mbs, 1 },
          label .. ' MBS only')
        check_triple(triple({ train_batch_size = tbs }, n), { tbs, mbs, 1 }, label .. ' TBS only')
      end
    end
  end

  local cases = {
    { { train_batch_size = 8, train_micro_batch_size_per_gpu = 2, gradient_accumulation_steps = 1 },
      1, 'config: Check batch related parameters. train_batch_size is not equal to '
      .. 'micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1' },
    { { train_batch_size = 33, train_micro_batch_size_per_gpu = 17, gradient_accumulation_steps = 2 },
      2, 'world_size 33 != 17 * 2 * 2' },
    { { train_batch_size = 32, train_micro_batch_size_per_gpu = 18 }, 2,
      'config: gradient_accumulation_steps = train_batch_size // train_micro_batch_size_per_gpu // '
      .. 'world_size = 32 // 18 // 2 = 0, which must be greater than 0' },
    { { train_batch_size = 33, train_micro_batch_size_per_gpu = 17 }, 2, '33 // 17 // 2 = 0' },
    { { train_batch_size = 10, train_micro_batch_size_per_gpu = 3 }, 1,
      'world_size 10 != 3 * 3 * 1 (gradient_accumulation_steps = train_batch_size // '
      .. 'train_micro_batch_size_per_gpu // world_size = 10 // 3 // 1 = 3)' },
    { { train_batch_size = 10, gradient_accumulation_steps = 3 }, 1,
      '10 != 3 * 3 * 1 (train_micro_batch_size_per_gpu = train_batch_size // world_size // '
      .. 'gradient_accumulation_steps = 10 // 1 // 3 = 3)' },
    { { train_batch_size = 4, gradient_accumulation_steps = 8 }, 1,
      'train_micro_batch_size_per_gpu = train_batch_size // world_size // gradient_accumulation_steps '
      .. '= 4 // 1 // 8 = 0, which must be greater than 0' },
    { { train_batch_size = 5 }, 2, '5 != 2 * 1 * 2 (train_micro_batch_size_per_gpu = '
      .. 'train_batch_size // world_size = 5 // 2 = 2)' },
    { { train_batch_size = 1 }, 2, 'train_batch_size // world_size = 1 // 2 = 0, which must be '
      .. 'greater than 0' },
    { { gradient_accumulation_steps = 2 }, 1, 'config: Either train_batch_size or '
      .. 'train_micro_batch_size_per_gpu needs to be provided (or args.per_device_train_batch_size)' },
    { {}, 1, 'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided' },
    { { train_batch_size = 0 }, 1, 'config: train_batch_size must be greater than 0, got 0' },
    { { train_micro_batch_size_per_gpu = -2 }, 1,
      'train_micro_batch_size_per_gpu must be greater than 0, got -2' },
    { { train_batch_size = 8, gradient_accumulation_steps = 0 }, 1,
      'gradient_accumulation_steps must be greater than 0, got 0' },
    { { train_batch_size = '8' }, 1, 'train_batch_size must be an integer or "auto", got "8"' },
    { { train_batch_size = 8, train_micro_batch_size_per_gpu = 4.5 }, 1,
      'train_micro_batch_size_per_gpu must be an integer, got 4.5, which has a fractional part' },
  }
  for _, c in ipairs(cases) do
    check_error(function() load(c[1], { world_size = c[2] }) end, c[3])
  end
  -- From a file the message points at the first batch key's line.
  local path = write('{\n "fp16": {"enabled": false},\n "train_batch_size": 8,\n'
    .. ' "train_micro_batch_size_per_gpu": 2,\n "gradient_accumulation_steps": 1\n}')
  check_error(function() config.load(path) end, path .. ':3: Check batch related parameters.')
  check_error(function() load({ train_batch_size = 8 }, { world_size = 0 }) end,
    'config.load: world_size must be a positive integer, got 0')
  check_error(function() load({ train_batch_size = 8 }, { world_size = 1.5 }) end,
    'config.load: world_size must be a positive integer, got 1.5')
end)

test('bf16_alias_and_precision', function()
  local c = load(cfg_of({ bfloat16 = { enabled = true } }))
  check_eq(c.bf16.enabled, true)
  check_eq(c.bfloat16, nil, 'only the canonical name in the result')
  check_error(function() load(cfg_of({ bf16 = { enabled = true }, bfloat16 = { enabled = true } })) end,
    'bf16 and bfloat16 are the same key (bfloat16 is an alias): give one of them')
  check_error(function() load(cfg_of({ fp16 = { enabled = true }, bf16 = { enabled = true } })) end,
    'fp16.enabled and bf16.enabled are both true: choose one precision')
  check_error(function() load(cfg_of({ fp16 = { enabled = 'auto' }, bfloat16 = { enabled = 'auto' } }),
    { args = { fp16 = true, bf16 = true } }) end, 'fp16.enabled and bf16.enabled are both true')
  check_error(function() load(cfg_of({ bfloat16 = { enabled = 'yes' } })) end,
    'bfloat16.enabled must be true or false, got "yes"')
  -- Other aliases.
  c = load(cfg_of({ zero_optimization = { stage = 3, prefetch_bucket_size = 7,
    max_live_parameters = 9 }, aio = { thread_count = 4 } }))
  check_eq(c.zero_optimization.stage3_prefetch_bucket_size, 7)
  check_eq(c.zero_optimization.stage3_max_live_parameters, 9)
  check_eq(c.aio.intra_op_parallelism, 4)
  check_error(function() load(cfg_of({ aio = { thread_count = 4, intra_op_parallelism = 2 } })) end,
    'aio.intra_op_parallelism and aio.thread_count are the same key (thread_count is an alias)')
  check_error(function() load(cfg_of({ zero_optimization = { stage3_max_reuse_distance = 1,
    max_reuse_distance = 2 } })) end, 'zero_optimization.stage3_max_reuse_distance and '
    .. 'zero_optimization.max_reuse_distance are the same key')
end)

test('deprecated_forms', function()
  local c, w = load(cfg_of({ zero_optimization = true }))
  check_eq(c.zero_optimization.stage, 1)
  check(has_warning(w, 'zero_optimization = true is deprecated: write {"stage": 1}'), 'legacy bool')
  c, w = load(cfg_of({ zero_optimization = { stage = 3, cpu_offload = true, cpu_offload_param = true,
    cpu_offload_use_pin_memory = true } }))
  check_eq(c.zero_optimization.offload_optimizer.device, 'cpu')
  check_eq(c.zero_optimization.offload_param.device, 'cpu')
  check_eq(c.zero_optimization.offload_param.pin_memory, true)
  check_eq(c.zero_optimization.cpu_offload, nil)
  check(has_warning(w, 'zero_optimization.cpu_offload is deprecated: write '
    .. 'zero_optimization.offload_optimizer = {"device": "cpu"}'), 'cpu_offload warning')
  check_error(function() load(cfg_of({ zero_optimization = { stage = 2, cpu_offload = true,
    offload_optimizer = { device = 'cpu' } } })) end, 'zero_optimization.cpu_offload and '
    .. 'zero_optimization.offload_optimizer both given')
  c, w = load(cfg_of({ zero_optimization = { stage = 3,
    stage3_gather_fp16_weights_on_model_save = true } }))
  check_eq(c.zero_optimization.stage3_gather_16bit_weights_on_model_save, true)
  check(has_warning(w, 'zero_optimization.stage3_gather_fp16_weights_on_model_save is '
    .. 'deprecated: write zero_optimization.stage3_gather_16bit_weights_on_model_save'), 'fp16 save')
  check_error(function() load(cfg_of({ zero_optimization = { legacy_stage1 = true } })) end,
    'zero_optimization.legacy_stage1 = true is not supported: the legacy stage 1 was removed in '
    .. 'DeepSpeed 0.5.9; remove the key')
  c = load(cfg_of({ zero_optimization = { stage = 2 }, aio = { block_size = 4096 } }))
  check_eq(c.aio.block_size, 4096, 'top-level aio')
  check_error(function() load(cfg_of({ zero_optimization = { aio = { block_size = 4096 } },
    aio = { block_size = 4096 } })) end, 'aio given twice, at the top level and in '
    .. 'zero_optimization: give one')
end)

test('cross_checks', function()
  local cases = {
    { { zero_optimization = { stage = 2, allgather_bucket_size = 5e8 + 1 } },
      'zero_optimization.allgather_bucket_size must be a multiple of 2, got 500000001' },
    { { zero_optimization = { stage = 2 }, gradient_predivide_factor = 2.0 },
      'gradient_predivide_factor = 2.0 is not supported with zero_optimization.reduce_scatter at stage 2' },
    { { zero_optimization = { stage = 1 }, prescale_gradients = true },
      'prescale_gradients = true is not supported with zero_optimization.reduce_scatter at stage 1' },
    { { fp16 = { enabled = true, loss_scale = 128 }, optimizer = { type = 'Lamb' } },
      'optimizer Lamb needs dynamic loss scaling: fp16.loss_scale must be 0, got 128' },
    { { zero_optimization = { stage = 3, offload_param = { device = 'nvme' } } },
      'zero_optimization.offload_param.device is "nvme" but zero_optimization.offload_param.nvme_path is not given' },
    { { optimizer = { type = 'Adam', params = { lr = 1e-3, max_grad_norm = 1.0 } } },
      'optimizer.params.max_grad_norm = 1.0 is not supported: use the top-level gradient_clipping instead' },
    { { optimizer = { type = 'AdamW', params = { adam_w_mode = false } } },
      'optimizer.params.adam_w_mode = false contradicts type "AdamW"' },
    { { optimizer = { type = 'SGD', params = { nesterov = true } } },
      'optimizer.params.nesterov needs momentum > 0 and dampening 0, got momentum 0.0 and dampening 0.0' },
  }
  for _, c in ipairs(cases) do
    check_error(function() load(cfg_of(c[1])) end, c[2])
  end
  -- A WarmupDecayLR total below its warmup loads, as in DeepSpeed: the schedule warns when built.
  local sched = load(cfg_of({ scheduler = { type = 'WarmupDecayLR',
    params = { total_num_steps = 5, warmup_num_steps = 10 } } })).scheduler
  check(sched.params.total_num_steps == 5 and sched.params.warmup_num_steps == 10, 'WarmupDecayLR T<W loads')
  -- Settings DeepSpeed ignores without a word get a warning here.
  local _, w = load(cfg_of({ zero_optimization = { stage = 2, offload_param = { device = 'cpu' } } }))
  check(has_warning(w, 'zero_optimization.offload_param needs stage 3: ignored at stage 2'),
    'offload_param below stage 3')
  _, w = load(cfg_of({ zero_optimization = { offload_optimizer = { device = 'cpu' } } }))
  check(has_warning(w, 'ignored at stage 0'), 'offload at stage 0')
  -- Without reduce_scatter the predivide factor is allowed.
  local c = load(cfg_of({ zero_optimization = { stage = 2, reduce_scatter = false },
    gradient_predivide_factor = 2.0, prescale_gradients = true }))
  check_eq(c.gradient_predivide_factor, 2.0)
  -- Adam with adam_w_mode false is L2 Adam; AdamW keeps decoupled decay.
  c = load(cfg_of({ optimizer = { type = 'Adam', params = { adam_w_mode = false } } }))
  check_eq(c.optimizer.params.adam_w_mode, false)
end)

-- The corpus: each bad config gives an error naming the key and the value.
test('bad_config_corpus', function()
  local corpus = {
    { { zero_optimization = { stage = 4 } }, 'zero_optimization.stage must be in 0..3, got 4' },
    { { zero_optimization = { stage = -1 } }, 'zero_optimization.stage must be in 0..3, got -1' },
    { { zero_optimization = { stage = '2' } }, 'zero_optimization.stage must be an integer, got "2"' },
    { { zero_optimization = 'stage2' }, 'zero_optimization must be an object, got "stage2"' },
    { { zero_optimization = { overlap_comm = 'yes' } },
      'zero_optimization.overlap_comm must be true or false, got "yes"' },
    { { zero_optimization = { reduce_bucket_size = -5 } },
      'zero_optimization.reduce_bucket_size must be at least 0, got -5' },
    { { zero_optimization = { offload_optimizer = { device = 'gpu' } } },
      'zero_optimization.offload_optimizer.device must be one of "none", "cpu", "nvme", got "gpu"' },
    { { zero_optimization = { offload_optimizer = { device = 'cpu', ratio = 1.5 } } },
      'zero_optimization.offload_optimizer.ratio must be in 0..1, got 1.5' },
    { { zero_optimization = { offload_param = { device = 'cpu', buffer_size = 1.5e8 + 0.5 } } },
      'zero_optimization.offload_param.buffer_size must be an integer, got 150000000.5' },
    { { zero_optimization = { offload_param = { nvme_path = 3 } } },
      'zero_optimization.offload_param.nvme_path must be a string, got 3' },
    { { zero_optimization = { offload_optimizer = 'cpu' } },
      'zero_optimization.offload_optimizer must be an object, got "cpu"' },
    { { fp16 = { enabled = 1 } }, 'fp16.enabled must be true or false, got 1' },
    { { fp16 = { loss_scale = -1 } }, 'fp16.loss_scale must be at least 0, got -1' },
    { { fp16 = { initial_scale_power = -2 } }, 'fp16.initial_scale_power must be at least 0, got -2' },
    { { fp16 = { loss_scale_window = 0 } }, 'fp16.loss_scale_window must be at least 1, got 0' },
    { { fp16 = { hysteresis = 0 } }, 'fp16.hysteresis must be at least 1, got 0' },
    { { fp16 = { min_loss_scale = 0 } }, 'fp16.min_loss_scale must be greater than 0, got 0' },
    { { fp16 = true }, 'fp16 must be an object, got true' },
    { { bf16 = { enabled = 'true' } }, 'bf16.enabled must be true or false, got "true"' },
    { { gradient_clipping = -1.0 }, 'gradient_clipping must be at least 0, got -1.0' },
    { { gradient_clipping = 'one' }, 'gradient_clipping must be a finite number, got "one"' },
    { { gradient_predivide_factor = 0 }, 'gradient_predivide_factor must be greater than 0, got 0' },
    { { steps_per_print = 0 }, 'steps_per_print must be at least 1, got 0' },
    { { steps_per_print = 10.5 }, 'steps_per_print must be an integer, got 10.5' },
    { { wall_clock_breakdown = 'false' }, 'wall_clock_breakdown must be true or false, got "false"' },
    { { communication_data_type = 'fp64' },
      'communication_data_type must be one of "fp16", "bf16", "fp32", got "fp64"' },
    { { checkpoint = { tag_validation = 'Maybe' } },
      'checkpoint.tag_validation must be one of "WARN", "IGNORE", "FAIL", got "Maybe"' },
    { { aio = { queue_depth = 0 } }, 'aio.queue_depth must be at least 1, got 0' },
    { { aio = { single_submit = 'no' } }, 'aio.single_submit must be true or false, got "no"' },
    { { optimizer = 'Adam' }, 'optimizer must be an object {"type": ..., "params": {...}}, got "Adam"' },
    { { optimizer = { params = { lr = 1 } } }, 'optimizer.type is required (one of Adam, AdamW, Lamb, SGD)' },
    { { optimizer = { type = 'Adamw2' } }, 'optimizer.type: unknown optimizer "Adamw2" (did you mean AdamW?)' },
    { { optimizer = { type = 'sgd' } }, 'optimizer.type: unknown optimizer "sgd" (did you mean SGD?)' },
    { { optimizer = { type = 3 } }, 'optimizer.type must be a string, got 3' },
    { { optimizer = { type = 'Adam', params = { lr = -0.1 } } },
      'optimizer.params.lr must be at least 0, got -0.1' },
    { { optimizer = { type = 'Adam', params = { betas = { 0.9 } } } },
      'optimizer.params.betas must be a list of two numbers [beta1, beta2], got [0.9]' },
    { { optimizer = { type = 'Adam', params = { betas = { 0.9, 1.0 } } } },
      'optimizer.params.betas[2] must be a number in [0, 1), got 1.0' },
    { { optimizer = { type = 'Adam', params = { betas = 0.9 } } },
      'optimizer.params.betas must be a list of two numbers [beta1, beta2], got 0.9' },
    { { optimizer = { type = 'Adam', params = { eps = 'tiny' } } },
      'optimizer.params.eps must be a finite number, got "tiny"' },
    { { optimizer = { type = 'Adam', params = 'fast' } }, 'optimizer.params must be an object, got "fast"' },
    { { scheduler = { type = 'WarmupLR', params = { warmup_type = 'cosine' } } },
      'scheduler.params.warmup_type must be one of "log", "linear", got "cosine"' },
    { { scheduler = { type = 'WarmupDecayLR' } },
      'scheduler.params.total_num_steps is required by WarmupDecayLR' },
    { { scheduler = { type = 'OneCycle', params = { cycle_min_lr = 0.1 } } },
      'scheduler.params.cycle_max_lr is required by OneCycle' },
    { { scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 10.5 } } },
      'scheduler.params.warmup_num_steps must be an integer, got 10.5' },
    { { scheduler = { type = 'WarmupLR', params = { warmup_min_lr = { 0.1, 'x' } } } },
      'scheduler.params.warmup_min_lr[2] must be a number >= 0, got "x"' },
    { { scheduler = { type = 'warmuplr' } },
      'scheduler.type: unknown scheduler "warmuplr" (did you mean WarmupLR?)' },
    { { scheduler = { type = 'WarmupCosineLR', params = { total_num_steps = 10, cos_min_ratio = 2 } } },
      'scheduler.params.cos_min_ratio must be in 0..1, got 2' },
    { { tensorboard = { enabled = 'yes' } }, 'tensorboard.enabled must be true or false, got "yes"' },
    { { csv_monitor = { output_path = 5 } }, 'csv_monitor.output_path must be a string, got 5' },
    { { comms_logger = { prof_ops = { 'all_reduce', 3 } } }, 'comms_logger.prof_ops[2] must be a string, got 3' },
    { { flops_profiler = { enabled = 'no' } }, 'flops_profiler.enabled must be true or false, got "no"' },
    { { data_efficiency = { enabled = 'yes' } }, 'data_efficiency.enabled must be true or false, got "yes"' },
    { { data_efficiency = 5 }, 'data_efficiency must be an object, got 5' },
    { { timers = { throughput = { enabled = 1 } } }, 'timers.throughput.enabled must be true or false, got 1' },
  }
  check(#corpus >= 40, 'at least 40 bad configs')
  for _, c in ipairs(corpus) do
    check_error(function() load(cfg_of(c[1])) end, c[2])
  end
  -- The same from JSON text: errors carry the line of the key.
  local text = '{\n  "train_batch_size": 8,\n  "zero_optimization": {\n    "stage": 4\n  }\n}'
  check_error(function() config.parse(text, { name = 'ds.json' }) end,
    'ds.json:4: zero_optimization.stage must be in 0..3, got 4')
  check_error(function() config.parse('{"train_batch_size": 8, "fp16": {"enabled": null}}') end,
    'config:1: fp16.enabled must not be null')
  check_error(function() config.parse('[1, 2]') end,
    'config: a DeepSpeed config must be an object, got [1, 2]')
end)

test('nulls_and_files', function()
  -- null stands for "not given" where DeepSpeed's default is None, and for a missing section.
  local c = config.parse('{"train_batch_size": 8, "steps_per_print": null, '
    .. '"zero_optimization": {"offload_optimizer": null, "overlap_comm": null}, "optimizer": null}')
  check_eq(c.steps_per_print, nil)
  check_eq(c.zero_optimization.offload_optimizer.device, 'none')
  check_eq(c.zero_optimization.overlap_comm, false)
  check_eq(c.optimizer, nil)
  -- JSON errors from a file: file:line:column.
  local path = write('{\n  "train_batch_size": 8,\n  "fp16": {"enabled": true,}, // ok\n'
    .. '  "bf16": {"enabled": false}\n  "x": 1\n}')
  check_error(function() config.load(path) end, path .. ":5:3: expected ',' or '}' after the "
    .. 'value of "bf16", got \'"\'')
  path = write('{\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 1},\n'
    .. '  /* again */\n  "zero_optimization": {"stage": 2}\n}')
  check_error(function() config.load(path) end, path .. ':5:3: duplicate key "zero_optimization" '
    .. '(first at line 3, again at line 5)')
  check_error(function() config.load('/nonexistent/ds.json') end,
    'config: cannot read /nonexistent/ds.json: No such file or directory')
  -- Errors are raised at the caller's line.
  local ok, err = pcall(function() config.load({ train_batch_size = 0 }) end)
  check(not ok and err:find('test_config%.lua:%d+: config: train_batch_size') ~= nil,
    'positioned at the caller: ' .. tostring(err))
  check_error(function() config.load(42) end, 'config.load: expected a file name or a table, got number')
  check_error(function() config.load({ train_batch_size = 8 }, { warn = 'stderr' }) end,
    'config.load: warn must be a function, got string')
  check_error(function() config.load({ train_batch_size = 8 }, { args = 'x' }) end,
    'config.load: args must be a table, got string')
end)

for _, path in ipairs(tmpfiles) do os.remove(path) end
H.done()
