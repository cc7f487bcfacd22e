--[[ zlua.activation_checkpointing: zl.checkpoint(fn, ...) runs fn without
  keeping its activations and computes it again in backward (DeepSpeed's
  deepspeed.checkpointing.checkpoint, torch.utils.checkpoint), and the
  settings of the config's activation_checkpointing block.

  local y = zl.checkpoint(block, x)     -- as y = block(x), holding only x

  Design: fn runs with grad mode off, so no graph is kept; the output gets a
  node of its own (zl_function_record) over fn's tensor arguments. Its
  backward runs fn again on detached copies of those arguments, with grad
  mode on and the default generator back at the offset the forward started
  from (the same dropout masks), back-propagates the incoming gradient
  through that, and hands the arguments' gradients on. Parameters read by fn
  get theirs in that inner backward, so their gradient-ready hooks (ZeRO's
  buckets) fire there. The node is recorded even when no argument requires
  grad (a frozen embedding under LoRA). fn must return one tensor and draw
  its random numbers from the default generator. ]]

local zl = require 'zlua'

local core = zl.core
local fmt = string.format

local M = {}

-- cpu_checkpointing: the saved arguments live in host memory charged to
-- 'other', off the working (activations) memory; synchronize: the device is
-- synchronised at each checkpoint's boundaries; profile: time is counted.
local settings = { cpu_checkpointing = false, synchronize = false, profile = false }
local stats = { checkpoints = 0, forward = 0, recompute = 0 }

--- M.configure(block): the config's activation_checkpointing block (as
--- zlua.config checked it); zlua.initialize calls it.
function M.configure(block)
  settings.cpu_checkpointing = block.cpu_checkpointing == true
  settings.synchronize = block.synchronize_checkpoint_boundary == true
  settings.profile = block.profile == true
end

--- M.stats(): with profile, {checkpoints =, forward =, recompute =} (a
--- count and seconds) since the last call, which restarts them; else nil.
function M.stats()
  if not settings.profile then return nil end
  local out = { checkpoints = stats.checkpoints, forward = stats.forward, recompute = stats.recompute }
  stats.checkpoints, stats.forward, stats.recompute = 0, 0, 0
  return out
end

local function boundary(device)
  if settings.synchronize and device ~= 'cpu' then zl.cuda.synchronize() end
end

-- Moves x's data to host memory charged to 'other' (a copy), in place.
local function offload(x)
  zl.no_grad(function()
    local h = x:device() == 'cpu' and x:clone() or x:cpu()
    h:set_category('other')
    core.move_data(x, h)
  end)
end

local function callable(fn)
  if type(fn) == 'function' then return true end
  local mt = getmetatable(fn)
  return type(mt) == 'table' and mt.__call ~= nil
end

function M.checkpoint(fn, ...)
  if not callable(fn) then zl.raise(fmt('checkpoint: fn must be a function or a module, got %s', type(fn))) end
  if not zl.is_grad_enabled() then return fn(...) end
  local args = table.pack(...)
  -- the tensor arguments leave `args`: the node holds them, the closure must not
  local where, inputs, devices, grads_wanted = {}, {}, {}, {}
  for i = 1, args.n do
    local a = args[i]
    if zl.is_tensor(a) then
      where[#where + 1], inputs[#inputs + 1], devices[#devices + 1] = i, a, a:device()
      grads_wanted[#grads_wanted + 1] = a:requires_grad()
      args[i] = false
    end
  end
  local seed, offset = core.generator_state()
  local t0 = core.now()
  boundary(devices[1] or 'cpu')
  local res = table.pack(zl.no_grad(fn, ...))
  boundary(devices[1] or 'cpu')
  local out = res[1]
  if res.n ~= 1 or not zl.is_tensor(out) then
    zl.raise(fmt('checkpoint: fn must return one tensor, got %d values (the first a %s)', res.n, type(out)))
  end
  if settings.cpu_checkpointing then
    for _, x in ipairs(inputs) do offload(x) end
  end
  -- fn's activations are garbage already (no graph holds them): collected
  -- here, the next checkpoint's forward reuses their memory.
  res = nil
  collectgarbage()
  stats.checkpoints, stats.forward = stats.checkpoints + 1, stats.forward + (core.now() - t0)
  core.function_record(out, inputs, function(gout, ...)
    local t1 = core.now()
    local replay = table.move(args, 1, args.n, 1, {})
    local leaves = {}
    for j, x in ipairs({ ... }) do
      local d = x:detach()
      if d:device() ~= devices[j] then d = d:to(devices[j]) end
      if grads_wanted[j] then d:requires_grad(true) end
      leaves[j], replay[where[j]] = d, d
    end
    local now_seed, now_offset = core.generator_state()
    core.generator_seed(nil, seed)
    core.generator_set_offset(nil, offset)
    local ok, y = pcall(zl.enable_grad, fn, table.unpack(replay, 1, args.n))
    core.generator_seed(nil, now_seed)
    core.generator_set_offset(nil, now_offset)
    if not ok then error(y, 0) end
    boundary(devices[1] or 'cpu')
    if y:requires_grad() then y:backward(gout) end
    boundary(devices[1] or 'cpu')
    local grads, n = {}, #leaves
    for j = 1, n do grads[j] = grads_wanted[j] and leaves[j].grad or nil end
    -- The recomputed activations are garbage now: collected here, the next
    -- block's recompute reuses their memory instead of adding to it.
    y, replay, leaves = nil, nil, nil
    collectgarbage()
    stats.recompute = stats.recompute + (core.now() - t1)
    return table.unpack(grads, 1, n)
  end)
  return out
end

return M
