-- zlua.utils' accessors of a parameter's state (DeepSpeed's safe_get/set_full_*
-- and safe_get/set_local_*) at ZeRO stages 0-3, run at one rank and, by CTest,
-- at two (`zlua --nprocs 2`, from tests/lua for the harness); with
-- ZLUA_TEST_NVME=DIR also with the optimizer state (and at stage 3 the parameters) on NVMe, in
-- sub-groups small enough that the gradients are swapped too. In each case:
-- the full gradient after backward is the plain model's on the same global
-- batch (to 1e-6 relative; equal bit for bit between the stages), the local
-- forms are this rank's slice of the full ones, exp_avg and the master after
-- a step are what the plain AdamW computes from that gradient (bit for bit),
-- and a master and a state set, then a step, give what the same edit on the
-- plain model gives; then the errors, each naming the parameter and why.
-- Usage: [ZLUA_TEST_NVME=DIR] zlua test_state_access.lua [test name filter]

local zl = require 'zlua'
local dist = require 'zlua.dist'
local nn = require 'zlua.nn'
local optim = require 'zlua.optim'
local utils = require 'zlua.utils'
local registry = require 'zlua.zero.registry'
local H = require 'harness'
local test, check, check_error = H.test, H.check, H.check_error

local rank, N = dist.rank(), dist.world_size()
-- A folder of its own under ZLUA_TEST_NVME for each world size, so that runs
-- at one and two ranks may share the base.
local nvme = os.getenv('ZLUA_TEST_NVME')
if nvme then
  nvme = nvme .. '/state_access_np' .. N
  zl.core.mkdirs(nvme)
end
local B = 8
local HP = { lr = 0.01, betas = { 0.9, 0.95 }, eps = 1e-8, weight_decay = 0.1 }

local function build()
  zl.manual_seed(5)
  local m = nn.Sequential(nn.Linear(6, 33), nn.LayerNorm(33), nn.ReLU(), nn.Linear(33, 4))
  m[2].bias:requires_grad_(false)   -- a frozen parameter, which the engine does not keep
  return m
end

local x, y = zl.randn(B, 6), zl.tensor({ 0, 1, 2, 3, 3, 2, 1, 0 }, 'i64')
-- This rank's rows of the global batch.
local rows = zl.arange(rank * (B // N), (rank + 1) * (B // N))
local xr, yr = x:index_select(1, rows), y:index_select(1, rows)

local function config(stage, offload)
  local zc = { stage = stage, stage3_param_persistence_threshold = 0 }
  if offload then
    zc.offload_optimizer = { device = 'nvme', nvme_path = nvme, buffer_count = 4 }
    zc.sub_group_size = 100   -- more sub-groups than the gradients' buffers: they are swapped too
    if stage == 3 then zc.offload_param = { device = 'nvme', nvme_path = nvme, max_in_cpu = 0 } end
  end
  return { train_batch_size = B, train_micro_batch_size_per_gpu = B // N,
    optimizer = { type = 'AdamW', params = HP }, zero_optimization = zc }
end

local function trained(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do if p:requires_grad() then out[#out + 1] = p end end
  return out
end

-- Bit-for-bit equality of two tensors of the same shape.
local function same(a, b) return a:shape() == b:shape() and a:float():eq(b:float()):sum():item() == a:numel() end

local function rel(a, b)
  return ((a - b):abs():max():item()) / math.max(b:abs():max():item(), 1e-30)
end

-- The elements [lo, lo + own) of t flattened, as the local forms give them.
local function slice(t, p)
  local e = registry.get(p).entry
  if e.own == 0 then return zl.zeros(0) end   -- a rank past the parameter's end owns none of it
  return t:reshape(t:numel()):narrow(1, e.lo + 1, e.own)
end

local reference = {}   -- the first stage's full gradients, which every stage must equal bit for bit

local function run(stage, offload)
  local label = ('stage %d%s at %d rank%s'):format(stage, offload and ' on NVMe' or '', N, N > 1 and 's' or '')
  local m, pm = build(), build()
  local e = zl.initialize { model = m, config = config(stage, offload) }
  e:set_progress(false)
  local opt = optim.AdamW(trained(pm), HP)
  local ps, pps = trained(m), trained(pm)

  -- Step 1: the gradient after backward, against the plain model's.
  e:backward(zl.cross_entropy(e(xr), yr))
  zl.cross_entropy(pm(x), y):backward()
  local grads = {}
  for i, p in ipairs(ps) do
    local g = utils.safe_get_full_grad(p)
    grads[i] = g
    check(g:shape() == pps[i]:shape(), label .. ': the full gradient has the parameter\'s shape')
    check(rel(g, pps[i].grad) <= 1e-6, ('%s: gradient %d is the plain model\'s (relative %.3g)'):format(label, i,
      rel(g, pps[i].grad)))
    local key = N .. ':' .. (offload and 'nvme' or 'memory') .. ':' .. i
    reference[key] = reference[key] or g
    check(same(g, reference[key]), label .. ': gradient ' .. i .. ' equals the other stages\' bit for bit')
    check(same(utils.safe_get_local_grad(p), slice(g, p)), label .. ': the local gradient is this rank\'s slice')
    check(same(utils.safe_get_local_fp32_param(p), slice(pps[i]:detach(), p)), label .. ': the local master')
  end
  -- The plain AdamW steps on exactly the gradient the engine will use.
  for i, pp in ipairs(pps) do pp.grad = grads[i]:clone() end
  e:step()
  opt:step()
  for i, p in ipairs(ps) do
    local st = opt.state[pps[i]:id()]
    check(same(utils.safe_get_full_fp32_param(p), pps[i]:detach()), label .. ': master ' .. i .. ' after a step')
    for _, key in ipairs({ 'exp_avg', 'exp_avg_sq' }) do
      local mine = utils.safe_get_full_optimizer_state(p, key)
      check(same(mine, st[key]), ('%s: %s of %d is the plain AdamW\'s'):format(label, key, i))
      check(same(utils.safe_get_local_optimizer_state(p, key), slice(st[key], p)), label .. ': local ' .. key)
    end
  end
  check_error(function() utils.safe_get_full_grad(ps[1]) end,
    'safe_get_full_grad: 1.weight: there is no gradient now: one exists from the end of a backward until the step')

  -- Edits, whole and by part, made on both; the next step must agree.
  zl.manual_seed(9)
  local v, w = zl.randn(33, 6), zl.randn(33):abs()
  local b1 = zl.randn(33)
  utils.safe_set_full_fp32_param(ps[1], v)
  utils.safe_set_full_optimizer_state(ps[2], w, 'exp_avg_sq')
  utils.safe_set_local_fp32_param(ps[2], slice(b1, ps[2]))
  utils.safe_set_local_optimizer_state(ps[1], slice(v * 0.01, ps[1]), 'exp_avg')
  zl.no_grad(function()
    pps[1]:copy_(v)
    pps[2]:copy_(b1)
  end)
  opt.state[pps[2]:id()].exp_avg_sq:copy_(w)
  opt.state[pps[1]:id()].exp_avg:copy_(v * 0.01)
  check(same(utils.safe_get_full_fp32_param(ps[2]), b1), label .. ': a master set by parts reads back whole')
  pm:zero_grad()
  e:backward(zl.cross_entropy(e(xr), yr))
  zl.cross_entropy(pm(x), y):backward()
  for i, p in ipairs(ps) do
    local g = utils.safe_get_full_grad(p)
    -- The working weights followed the masters: the gradients are the edited plain model's.
    check(rel(g, pps[i].grad) <= 1e-6, ('%s: after the edits gradient %d is the plain model\'s (relative %.3g)')
      :format(label, i, rel(g, pps[i].grad)))
    pps[i].grad = g:clone()
  end
  e:step()
  opt:step()
  for i, p in ipairs(ps) do
    check(same(utils.safe_get_full_fp32_param(p), pps[i]:detach()), label .. ': master ' .. i .. ' after the edits')
  end
  if offload then
    local rep = e.zero:memory_report()
    check(rep.swap_write_bytes > 0 and rep.swap_read_bytes > 0, label .. ': the state went through NVMe')
  end
end

for _, stage in ipairs({ 0, 1, 2, 3 }) do
  test('stage ' .. stage, function() run(stage, false) end)
  if nvme and stage >= 1 then test('stage ' .. stage .. ' nvme', function() run(stage, true) end) end
end

-- bf16 working weights: a master set whole or by parts reads back exactly,
-- and the working weight the model computes with is it rounded to bf16.
test('bf16 working weights', function()
  local zero = require 'zlua.zero'
  for _, stage in ipairs({ 0, 1, 2, 3 }) do
    local m = build()
    local cfg = config(stage, false)
    cfg.bf16 = { enabled = true }
    local e = zl.initialize { model = m, config = cfg }
    e:set_progress(false)
    local p = m[1].weight
    e:backward(zl.cross_entropy(e(xr):float(), yr))
    local g = utils.safe_get_full_grad(p)
    check(g:dtype() == 'f32' and g:size(1) == 33 and g:size(2) == 6, 'bf16 stage ' .. stage .. ': an f32 gradient')
    e:step()
    zl.manual_seed(4)
    local v = zl.randn(33, 6)
    utils.safe_set_full_fp32_param(p, v)
    check(same(utils.safe_get_full_fp32_param(p), v), 'bf16 stage ' .. stage .. ': the master reads back')
    zero.GatheredParameters({ p }, function()
      -- held gathered though each op reading it ends a use
      check(p:dtype() == 'bf16' and same(p, v:bf16()), 'bf16 stage ' .. stage .. ': the working weight is it rounded')
      check(p:numel() == 198, 'bf16 stage ' .. stage .. ': still gathered after ops read it')
    end)
    local b = m[4].bias
    utils.safe_set_local_fp32_param(b, slice(zl.full(4, 0.3), b))
    zero.GatheredParameters({ b }, function()
      check(same(b, zl.full(4, 0.3):bf16()), 'bf16 stage ' .. stage .. ': a part set on each rank, gathered')
    end)
  end
end)

test('errors', function()
  local m = build()
  local e = zl.initialize { model = m, config = config(2, false) }
  e:set_progress(false)
  local p = m[1].weight
  check_error(function() utils.safe_get_full_grad(p) end, 'safe_get_full_grad: 1.weight: there is no gradient now')
  check_error(function() utils.safe_get_full_fp32_param(m[2].bias) end,
    'safe_get_full_fp32_param: the parameter is frozen (requires_grad false)')
  check_error(function() utils.safe_get_full_optimizer_state(p, 'momentum_buffer') end,
    "safe_get_full_optimizer_state: 1.weight: the optimizer keeps no state 'momentum_buffer' (it keeps exp_avg, "
      .. 'exp_avg_sq)')
  check_error(function() utils.safe_get_full_optimizer_state(p) end, 'the state key must be a string')
  check_error(function() utils.safe_set_full_fp32_param(p, zl.zeros(6, 33)) end,
    "safe_set_full_fp32_param: 1.weight: the value's shape [6, 33] is not the parameter's [33, 6]")
  check_error(function() utils.safe_set_local_fp32_param(p, zl.zeros(1000)) end,
    'safe_set_local_fp32_param: 1.weight: this rank\'s part is 1-d with')
  check_error(function() utils.safe_set_full_optimizer_state(p, zl.zeros(33, 6, 'i64'), 'exp_avg') end,
    'the value must be a floating-point tensor, got i64')
  check_error(function() utils.safe_get_full_grad(zl.zeros(3):requires_grad_()) end,
    'safe_get_full_grad: the tensor is not a parameter of an engine with an optimizer')
  check_error(function() utils.safe_get_local_grad('x') end, 'safe_get_local_grad: expected a parameter tensor')
end)

H.done()
