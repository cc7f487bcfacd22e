-- LoRA on two ranks (CTest runs `zlua --nprocs 2 test_lora.lua`
-- from tests/lua, for the harness): at every ZeRO stage only lora_A/lora_B
-- have gradients and optimizer state (the engine's report and the
-- allocator's categories), the losses agree between stages bit for bit, and
-- at stage 3 the frozen base stays partitioned, each rank holding its half,
-- whether the model was built by zero.Init or whole.

local zl = require 'zlua'
local dist = require 'zlua.dist'
local nn = require 'zlua.nn'
local lora = require 'zlua.lora'
local zero = require 'zlua.zero'
local layout = require 'zlua.zero.layout'
local H = require 'harness'
local test, check, check_eq = H.test, H.check, H.check_eq

local rank, N = dist.rank(), dist.world_size()

local function config(stage, mode)
  return { train_batch_size = 4, train_micro_batch_size_per_gpu = 4 // N,
    optimizer = { type = 'AdamW', params = { lr = 1e-2 } },
    bf16 = { enabled = mode == 'bf16' },
    zero_optimization = { stage = stage, stage3_param_persistence_threshold = 0 } }
end

local function build()
  zl.manual_seed(11)
  local m = nn.GPT{ vocab_size = 29, block_size = 8, n_layer = 2, n_head = 2, n_embd = 32 }
  lora.convert_linear_layer_to_lora(m, { 'attn', 'mlp' }, 4, 8)
  zl.no_grad(function()
    for _, l in ipairs(m:modules()) do
      if nn.Module.is_instance(l, nn.LinearLoRA) then
        zero.GatheredParameters({ l.lora_B }, function() l.lora_B:normal_(0, 0.1) end, 0)
      end
    end
  end)
  return lora.only_optimize_lora_parameters(m)
end

-- The elements of the trained and of the frozen parameters, whole.
local function sizes(model)
  local trained, frozen = {}, {}
  for _, p in ipairs(model:parameters()) do
    local list = p:requires_grad() and trained or frozen
    list[#list + 1] = zero.numel(p)
  end
  return trained, frozen
end

local function chunks(list, P)
  local s = 0
  for _, n in ipairs(list) do s = s + layout.chunk(n, P) end
  return s
end

-- Counted on a whole model: what num_parameters must say at every stage.
local WHOLE = build():num_parameters()

local function run(stage, init, mode)
  collectgarbage()   -- the engine of the run before, and its memory
  local cfg = config(stage, mode)
  local model = init and zero.Init(cfg, build) or build()
  local trained, frozen = sizes(model)
  local engine = zl.initialize { model = model, config = cfg }
  engine:set_progress(false)
  check_eq(model:num_parameters(), WHOLE, string.format('stage %d%s %s: num_parameters counts whole parameters',
    stage, init and ' (zero.Init)' or '', mode))
  local g = zl.Generator(5)
  local losses = {}
  for _ = 1, 3 do
    local ids = (zl.rand({ 4, 8 }, g) * 28.99):long()
    local x = ids:narrow(1, rank * (4 // N) + 1, 4 // N)
    local _, loss = engine(x, x)
    engine:backward(loss)
    engine:step()
    losses[#losses + 1] = dist.all_reduce(loss:float():detach(), 'avg'):item()
  end
  local rep = engine:memory_report()
  local P = stage == 0 and 1 or N
  local S = chunks(trained, P)
  local what = string.format('stage %d%s %s', stage, init and ' (zero.Init)' or '', mode)
  check_eq(rep.moments, 2 * 4 * S, what .. ': moments for A and B only')
  check_eq(rep.grads, (stage == 1 and N or 1) * S * (mode == 'bf16' and 2 or 4), what .. ': gradients for A and B only')
  if mode == 'f32' and stage > 0 then
    check_eq(rep.master, 4 * S, what .. ': f32 masters for A and B only')
  end
  -- The allocator's own count: at most the f32 master, two moments and a
  -- working copy of A and B whole (zero.Init's store keeps the chunk of the
  -- untied head weight GPT replaces, 1856 bytes, there too).
  local alloc = rep.allocator
  local lora_bytes = 4 * chunks(trained, 1)
  check(alloc.optimizer.current <= 4 * lora_bytes,
        string.format('%s: allocator optimizer bytes %d, A and B take %d', what, alloc.optimizer.current, lora_bytes))
  local whole = 0
  for _, n in ipairs(frozen) do whole = whole + n end
  if stage == 3 then
    check_eq(rep.frozen_partitioned, #frozen, what .. ': every frozen parameter stays partitioned')
    check_eq(rep.frozen, 4 * chunks(frozen, N), what .. ': the frozen chunks of this rank')
    check(rep.frozen < 0.6 * 4 * whole, string.format('%s: frozen bytes %d are about 1/%d of %d', what,
                                                       rep.frozen, N, 4 * whole))
    local empty = true
    for _, p in ipairs(model:parameters()) do
      if not p:requires_grad() then empty = empty and p:numel() == 0 end
    end
    check(empty, what .. ': frozen parameters are empty between steps')
    check(alloc.params.current < rep.params + rep.frozen + 4096,
          string.format('%s: allocator params %d, engine params %d + frozen %d', what, alloc.params.current,
                        rep.params, rep.frozen))
  else
    check_eq(rep.frozen, 0, what .. ': nothing partitioned')
  end
  if rank == 0 then
    print(string.format('%s, rank 0 (bytes): frozen base %d whole, %d held; allocator params %d, grads %d, '
                        .. 'optimizer %d; engine grads %d, master %d, moments %d', what, 4 * whole, rep.frozen,
                        alloc.params.current, alloc.grads.current, alloc.optimizer.current, rep.grads, rep.master,
                        rep.moments))
  end
  return losses
end

for _, mode in ipairs({ 'f32', 'bf16' }) do
  test('LoRA at stages 0-3, ' .. mode, function()
    local ref = run(0, false, mode)
    for _, case in ipairs({ { 1, false }, { 2, false }, { 3, false }, { 3, true } }) do
      local losses = run(case[1], case[2], mode)
      for i = 1, #ref do
        check_eq(losses[i], ref[i], string.format('%s: stage %d%s, step %d loss == stage 0', mode, case[1],
                                                   case[2] and ' (zero.Init)' or '', i))
      end
    end
  end)
end

H.done()
