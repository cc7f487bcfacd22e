--[[ zlua.engine.Engine: the object zlua.initialize returns. It owns the model's
  training step as DeepSpeed's engine does: the loss divided by the gradient
  accumulation steps, the optimizer stepped only at an accumulation boundary,
  mixed precision (zlua.engine.precision), ZeRO stages 0-3 over the ranks
  (zlua.zero.state owns the model states), gradient clipping, the scheduler
  stepped once per applied optimizer step, counters, the step log, monitors,
  the flops profiler's step (zlua.profiling.engine) and checkpoints
  (zlua.engine.checkpoint). ]]

local zl = require 'zlua'
local optim = require 'zlua.optim'
local lr = require 'zlua.lr'
local data = require 'zlua.data'
local monitor = require 'zlua.monitor'
local precision = require 'zlua.engine.precision'
local accelerator = require 'zlua.engine.accelerator'
local zero_state = require 'zlua.zero.state'
local report = require 'zlua.engine.report'
local notices = require 'zlua.engine.notices'
local flops = require 'zlua.profiling.engine'

local core = zl.core
local fmt = string.format

local Engine = {}
Engine.__index = Engine
Engine.__name = 'zlua.Engine'
function Engine.__call(self, ...) return self:forward(...) end

local function need_optimizer(self, what)
  if not self.optimizer then zl.raise('engine:' .. what .. ': there is no optimizer (none given and none in the config)') end
end

--- Engine.optimizer_from_config(oc, params): the optimizer the checked config's optimizer
--- section names, over `params` (zlua/ds_config.h reads its group defaults for C hosts).
local function optimizer_from_config(oc, params)
  local p = oc.params
  if oc.type == 'Adam' or oc.type == 'AdamW' then
    local cls = oc.type == 'Adam' and optim.Adam or optim.AdamW
    return cls(params, { lr = p.lr, betas = { p.betas[1], p.betas[2] }, eps = p.eps, weight_decay = p.weight_decay,
      bias_correction = p.bias_correction, adam_w_mode = p.adam_w_mode })
  elseif oc.type == 'Lamb' then
    return optim.Lamb(params, { lr = p.lr, betas = { p.betas[1], p.betas[2] }, eps = p.eps,
      weight_decay = p.weight_decay, bias_correction = p.bias_correction, max_coeff = p.max_coeff,
      min_coeff = p.min_coeff })
  end
  return optim.SGD(params, { lr = p.lr, momentum = p.momentum, dampening = p.dampening,
    weight_decay = p.weight_decay, nesterov = p.nesterov })
end

Engine.optimizer_from_config = optimizer_from_config

function Engine.new(t, cfg, rank, world_size)
  local self = setmetatable({}, Engine)
  self.module = t.model
  self.config = cfg
  self.rank, self.world_size = rank, world_size
  self.global_steps, self.global_samples, self.skipped_steps, self.micro_steps = 0, 0, 0, 0
  self.gas = cfg.gradient_accumulation_steps
  self.train_batch_size = cfg.train_batch_size
  self.micro_batch_size = cfg.train_micro_batch_size_per_gpu
  self.clip = cfg.gradient_clipping or 0
  self.losses = 0.0

  local params = t.model_parameters or self.module:parameters()
  if type(params) ~= 'table' then
    zl.raise(fmt('zlua.initialize: model_parameters must be an array of tensors or of param groups, got %s', type(params)))
  end
  self.dist = require 'zlua.dist'
  -- DeepSpeed's initialize puts the model on the local rank's accelerator (zlua.engine.accelerator).
  self.device = accelerator.choose(self.module, self.dist.local_rank())
  notices.say(cfg, rank, self.device)
  self.local_rank = self.dist.local_rank()
  self.module:to(self.device)
  self.precision = precision.new(cfg, self.module, self.device, rank)

  -- The optimizer: the script's (an object, or a function of the parameters), else the config's.
  local opt = t.optimizer
  if type(opt) == 'function' then opt = opt(params) end
  if opt == nil and cfg.optimizer then opt = optimizer_from_config(cfg.optimizer, params) end
  if opt ~= nil then
    if type(opt) ~= 'table' or type(opt.param_groups) ~= 'table' or type(opt.step) ~= 'function' then
      zl.raise('zlua.initialize: optimizer must be a zlua.optim optimizer or a function returning one')
    end
  end
  self.optimizer = opt
  if opt then
    self.zero = zero_state.new { optimizer = opt, module = self.module, config = cfg, rank = rank, world = world_size,
      half = self.precision.half, dist = self.dist }
    -- zlua.utils' gradients are unscaled by the loss scale of the coming step.
    self.zero.scale_of = function() return self.precision:loss_scale_value() end
  end
  -- Frozen parameters stay partitioned at stage 3 (gathered only while an op
  -- reads them); others zero.Init partitioned that nothing trains are gathered whole.
  local zero = require 'zlua.zero'
  self.frozen_partitioned, self.frozen_elements = zero.partition_frozen(self.module:parameters(), cfg,
    self.precision.half, self.device == 'cpu')
  local whole = 0
  for _, p in ipairs(self.module:parameters()) do
    if p:requires_grad() and zero.unpartition(p) then whole = whole + 1 end
  end
  if whole > 0 and rank == 0 then
    io.stderr:write(fmt('zlua: zlua.initialize: %d parameters built by zlua.zero.Init require grad but are '
      .. 'outside the optimizer: each rank now holds them whole\n', whole))
  end
  self.precision:convert_rest()
  require('zlua.activation_checkpointing').configure(cfg.activation_checkpointing)

  local sched = t.lr_scheduler
  if type(sched) == 'function' then sched = sched(opt) end
  if sched == nil and cfg.scheduler then
    if not opt then zl.raise('zlua.initialize: the config has a scheduler but there is no optimizer') end
    sched = lr.create(cfg.scheduler.type, opt, cfg.scheduler.params)
  end
  self.lr_scheduler = sched

  if t.training_data ~= nil then
    local sampler = data.DistributedSampler(t.training_data, { num_replicas = world_size, rank = rank })
    self.training_dataloader = data.DataLoader(t.training_data, { batch_size = self.micro_batch_size,
      collate_fn = t.collate_fn, drop_last = cfg.dataloader_drop_last, sampler = sampler })
  end

  self.monitor = monitor.from_config(cfg, { rank = rank, clock = core.wall_time })
  self.report = report.new(self, cfg)
  self.flops_profiler = flops.attach(self, cfg)
  return self
end

function Engine:train(mode)
  if mode == false then return self:eval() end
  self.module:train()
  return self
end

function Engine:eval()
  self.module:eval()
  return self
end

-- Tensor arguments in host memory, moved to the engine's device: DeepSpeed
-- leaves that to the script, whose host-made batches then stop on a GPU
-- machine with a device mismatch.
local function place_inputs(device, ...)
  if device == 'cpu' then return ... end
  local args = table.pack(...)
  for i = 1, args.n do
    local a = args[i]
    if zl.is_tensor(a) and a:device() == 'cpu' then args[i] = a:to(device) end
  end
  return table.unpack(args, 1, args.n)
end

--- engine:forward(...) (also engine(...)): the module's forward; tensor
--- inputs in host memory go to engine.device first, and under mixed
--- precision float ones are cast to the working dtype.
function Engine:forward(...)
  self.report:memory('Engine before forward')
  local t0 = core.now()
  if self.zero then self.zero:begin_forward() end
  local profiled = flops.begin(self, 'forward')
  local out = table.pack(self.module(self.precision:cast_inputs(place_inputs(self.device, ...))))
  flops.finish(self, 'forward', profiled)
  self.report:add('forward', core.now() - t0)
  self.report:memory('Engine after forward')
  return table.unpack(out, 1, out.n)
end

function Engine:is_gradient_accumulation_boundary()
  if self.boundary_override ~= nil then return self.boundary_override end
  return (self.micro_steps + 1) % self.gas == 0
end

--- engine:set_gradient_accumulation_boundary(b): override the boundary (nil restores the count).
function Engine:set_gradient_accumulation_boundary(b) self.boundary_override = b end

--- engine:backward(loss): back-propagates loss / gradient_accumulation_steps
--- (times the fp16 loss scale); returns the divided loss, as DeepSpeed does.
function Engine:backward(loss, opts)
  if not zl.is_tensor(loss) or loss:numel() ~= 1 then
    zl.raise('engine:backward: the loss must be a one-element tensor')
  end
  self.report:memory('Engine before backward')
  local t0 = core.now()
  local profiled = flops.begin(self, 'backward')
  local scaled = loss
  if (opts == nil or opts.scale_wrt_gas ~= false) and self.gas > 1 then
    scaled = loss:float() / self.gas
  end
  self.losses = self.losses + scaled:item()
  local to_backprop = self.precision:scale_loss(scaled)
  to_backprop:backward(nil, opts and opts.retain_graph)
  if self.zero then self.zero:finish_backward() end
  flops.finish(self, 'backward', profiled)
  self.report:add('backward', core.now() - t0)
  self.report:memory('Engine after backward')
  return scaled
end

--- engine:step(): at an accumulation boundary, clip and apply the optimizer
--- (skipped on an fp16 overflow), step the scheduler, zero the gradients.
function Engine:step()
  self.report:memory('Engine before step')
  local t0 = core.now()
  local profiled = flops.begin(self, 'step')
  if self:is_gradient_accumulation_boundary() then
    need_optimizer(self, 'step')
    self:take_model_step()
  end
  self.micro_steps = self.micro_steps + 1
  flops.finish(self, 'step', profiled)
  self.report:add('step', core.now() - t0)
  self.report:memory('Engine after step')
end

function Engine:take_model_step()
  local prec, z = self.precision, self.zero
  local overflow, norm = z:step(prec:loss_scale_value(), self.clip, prec.scaler ~= nil)
  self.global_grad_norm = norm
  if overflow then
    self.skipped_steps = self.skipped_steps + 1
  elseif self.lr_scheduler then
    self.lr_scheduler:step()
  end
  local tried = prec:loss_scale_value()
  prec:update_scale(overflow)
  if overflow then self.report:overflow(tried, prec:loss_scale_value()) end
  self.global_steps = self.global_steps + 1
  self.global_samples = self.global_samples + self.train_batch_size
  self.report:step_done(self.losses, overflow)
  self.losses = 0.0
end

--- engine:set_progress(on [, total_steps]): the one-line progress display on
--- a terminal (on by default when stdout and stderr are terminals, or rank 0
--- of `zlua --nprocs` started from one, unless ZLUA_NO_PROGRESS is set); a
--- script that prints a line of its own every step turns it off. With
--- total_steps (default: the scheduler's total_num_steps) the line shows
--- step N/total and the time left.
function Engine:set_progress(on, total_steps)
  self.report:show_progress(on)
  if total_steps ~= nil then self.report.total = math.tointeger(total_steps) end
  return self
end

--- engine:shows_progress(): whether rank 0 draws the progress line, answered
--- alike on every rank, so a script prints its own per-step lines only when
--- it is off (the output is not a terminal, or it was turned off).
function Engine:shows_progress() return self.report.watched end

--- engine:print(...): print's line on rank 0 alone (as Accelerate's
--- accelerator.print), written above the progress line rather than over it.
function Engine:print(...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = tostring(parts[i]) end
  self.report:print(table.concat(parts, '\t', 1, parts.n))
end

function Engine:was_step_applied() return self.report.last_applied end

function Engine:zero_grad()
  if self.zero then self.zero:zero_grads() end
end

--- engine:memory_report(): this rank's bytes by kind: params (working
--- copies, 16-bit under bf16/fp16), grads, master (f32 copies), moments
--- (optimizer state), buffers (the bucket buffers, named in bucket_buffers),
--- model_states (the first four), frozen (the f32 chunks this rank keeps of
--- the frozen parameters stage 3 partitions, in frozen_partitioned of them),
--- the allocator's current/peak bytes by category (allocator), the
--- collectives ZeRO started so far (collectives), and the most memory the
--- process may use with where that limit comes from (limit, limit_source:
--- zl.memory_limit()).
function Engine:memory_report()
  local rep = self.zero and self.zero:memory_report() or {}
  rep.frozen, rep.frozen_partitioned = 4 * self.frozen_elements, self.frozen_partitioned
  rep.stage = self.config.zero_optimization.stage
  rep.world_size, rep.rank = self.world_size, self.rank
  rep.allocator = zl.memory()
  rep.limit, rep.limit_source = zl.memory_limit()
  return rep
end

--- engine:get_full_fp32_param(p): the f32 master of parameter p, whole
--- (DeepSpeed's safe_get_full_fp32_param; every rank calls it).
function Engine:get_full_fp32_param(p)
  need_optimizer(self, 'get_full_fp32_param')
  return self.zero:full_master(p)
end

--- Seconds spent in collectives since the engine started (ZeRO buckets and gathers).
function Engine:comm_time() return self.zero and self.zero:comm_time() or 0 end

function Engine:get_lr()
  need_optimizer(self, 'get_lr')
  local out = {}
  for i, g in ipairs(self.optimizer.param_groups) do out[i] = g.lr end
  return out
end

function Engine:get_mom()
  need_optimizer(self, 'get_mom')
  local out = {}
  for i, g in ipairs(self.optimizer.param_groups) do out[i] = g.betas and { g.betas[1], g.betas[2] } or g.momentum end
  return out
end

--- The global L2 norm of the last step's gradients (unscaled, before clipping).
function Engine:get_global_grad_norm() return self.global_grad_norm end

function Engine:loss_scale() return self.precision:loss_scale_value() end

--- engine:save_checkpoint(dir [, tag [, client_state [, opts]]]): every rank
--- calls it; the ranks' tags are compared first (checkpoint.tag_validation).
function Engine:save_checkpoint(dir, tag, client_state, opts)
  tag = require('zlua.engine.tag').agree(self, tag or ('global_step' .. self.global_steps))
  return require('zlua.engine.checkpoint').save(self, dir, tag, client_state, opts)
end

function Engine:load_checkpoint(dir, tag, opts)
  return require('zlua.engine.checkpoint').load(self, dir, tag, opts)
end

function Engine:save_16bit_model(dir, name)
  return require('zlua.engine.checkpoint').save_16bit_model(self, dir, name)
end

function Engine:destroy()
  if self.monitor then self.monitor:close() end
end

return Engine
