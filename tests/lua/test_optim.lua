-- Tests zlua.optim: SGD, Adam, AdamW and Lamb over 100 steps against plain-Lua
-- references written out here (two param groups with their own lr and weight
-- decay, bias correction on and off), the SIMD kernels against the scalar one,
-- state_dict round trips, and the bad-argument errors.

local zl = require 'zlua'
local optim = require 'zlua.optim'
local H = require 'harness'
local test, check, check_error = H.test, H.check, H.check_error

-- Round to f32, as the engine stores p, m and v after each step.
local function f32(x) return (string.unpack('f', string.pack('f', x))) end

local function flat(t) return H.flat(t) end

-- Relative error of the whole tensor, ||got - want|| / ||want|| <= 1e-6: the
-- engine rounds every operation to f32 while the reference rounds only what
-- it stores, so single elements that pass near zero differ by more than 1e-6
-- of themselves while the tensor as a whole agrees to f32 precision.
local function check_rel(got, want, what)
  local num, den = 0, 0
  for i = 1, #want do
    num = num + (got[i] - want[i]) ^ 2
    den = den + want[i] ^ 2
  end
  local rel = math.sqrt(num) / math.sqrt(den)
  if not (rel <= 1e-6) then print(string.format('  %s: relative error %.3g', what, rel)) end
  check(rel <= 1e-6, what .. ' within 1e-6 relative of the reference')
end

-- Two groups of parameters with fixed values and a fixed gradient sequence.
local function setup(seed)
  zl.manual_seed(seed)
  local ps = { zl.randn(7, 5), zl.randn(33), zl.randn(3, 3) }
  local grads = {}
  for s = 1, 100 do
    grads[s] = {}
    for i, p in ipairs(ps) do grads[s][i] = zl.randn(p:shape()) * (0.5 + 0.01 * s) end
  end
  return ps, grads
end

local function run(opt_fn, seed)
  local ps, grads = setup(seed)
  local ref = {}
  for i, p in ipairs(ps) do ref[i] = flat(p) end
  local gref = {}
  for s = 1, 100 do
    gref[s] = {}
    for i = 1, #ps do gref[s][i] = flat(grads[s][i]) end
  end
  local opt = opt_fn({ { params = { ps[1], ps[2] }, lr = 0.01, weight_decay = 0.1 }, { params = { ps[3] }, lr = 0.003, weight_decay = 0 } })
  for s = 1, 100 do
    opt:zero_grad()
    for i, p in ipairs(ps) do p.grad = grads[s][i] end
    opt:step()
  end
  return ps, ref, gref, opt
end

local function group_of(i) return i <= 2 and { lr = 0.01, wd = 0.1 } or { lr = 0.003, wd = 0 } end

local function adam_reference(ref, gref, adamw, bias_correction, b1, b2, eps)
  local out = {}
  for i, p0 in ipairs(ref) do
    local g_ = group_of(i)
    local p, m, v = {}, {}, {}
    for k = 1, #p0 do p[k], m[k], v[k] = p0[k], 0, 0 end
    for t = 1, 100 do
      local bc1 = bias_correction and 1 - b1 ^ t or 1
      local bc2 = bias_correction and 1 - b2 ^ t or 1
      for k = 1, #p do
        local g = gref[t][i][k]
        if not adamw then g = g + g_.wd * p[k] end
        m[k] = f32(b1 * m[k] + (1 - b1) * g)
        v[k] = f32(b2 * v[k] + (1 - b2) * g * g)
        local denom = math.sqrt(v[k]) / math.sqrt(bc2) + eps
        local pk = p[k]
        if adamw then pk = pk - g_.lr * g_.wd * pk end
        p[k] = f32(pk - (g_.lr / bc1) * m[k] / denom)
      end
    end
    out[i] = p
  end
  return out
end

test('adamw_matches_reference', function()
  for _, bc in ipairs({ true, false }) do
    local ps, ref, gref = run(function(groups) return optim.AdamW(groups, { betas = { 0.9, 0.95 }, eps = 1e-8, bias_correction = bc }) end, 1)
    local want = adam_reference(ref, gref, true, bc, 0.9, 0.95, 1e-8)
    for i, p in ipairs(ps) do check_rel(flat(p), want[i], 'AdamW p' .. i .. (bc and '' or ' (no bias correction)')) end
  end
end)

test('adam_l2_matches_reference', function()
  local ps, ref, gref = run(function(groups) return optim.Adam(groups, { betas = { 0.8, 0.999 }, eps = 1e-6 }) end, 2)
  local want = adam_reference(ref, gref, false, true, 0.8, 0.999, 1e-6)
  for i, p in ipairs(ps) do check_rel(flat(p), want[i], 'Adam p' .. i) end
  -- adam_w_mode turns Adam's decay into AdamW's
  local ps2, ref2, gref2 = run(function(groups) return optim.Adam(groups, { adam_w_mode = true }) end, 3)
  local want2 = adam_reference(ref2, gref2, true, true, 0.9, 0.999, 1e-8)
  for i, p in ipairs(ps2) do check_rel(flat(p), want2[i], 'Adam adam_w_mode p' .. i) end
end)

test('sgd_matches_reference', function()
  for _, cfg in ipairs({ { momentum = 0.9, nesterov = false, dampening = 0.1 }, { momentum = 0.9, nesterov = true, dampening = 0 }, { momentum = 0 } }) do
    local ps, ref, gref = run(function(groups) return optim.SGD(groups, cfg) end, 4)
    for i, p0 in ipairs(ref) do
      local g_ = group_of(i)
      local p, buf = {}, {}
      for k = 1, #p0 do p[k] = p0[k] end
      for t = 1, 100 do
        for k = 1, #p do
          local g = gref[t][i][k] + g_.wd * p[k]
          if cfg.momentum ~= 0 then
            buf[k] = t == 1 and f32(g) or f32(cfg.momentum * buf[k] + (1 - cfg.dampening) * g)
            g = cfg.nesterov and g + cfg.momentum * buf[k] or buf[k]
          end
          p[k] = f32(p[k] - g_.lr * g)
        end
      end
      check_rel(flat(ps[i]), p, string.format('SGD(momentum %s, nesterov %s) p%d', cfg.momentum, cfg.nesterov, i))
    end
  end
end)

test('lamb_matches_reference', function()
  local b1, b2, eps = 0.9, 0.999, 1e-6
  local ps, ref, gref, opt = run(function(groups) return optim.Lamb(groups, { betas = { b1, b2 }, eps = eps }) end, 5)
  for i, p0 in ipairs(ref) do
    local g_ = group_of(i)
    local p, m, v = {}, {}, {}
    for k = 1, #p0 do p[k], m[k], v[k] = p0[k], 0, 0 end
    for t = 1, 100 do
      local rate = g_.lr * math.sqrt(1 - b2 ^ t) / (1 - b1 ^ t)
      local u, psq, usq = {}, 0, 0
      for k = 1, #p do
        local g = gref[t][i][k]
        m[k] = f32(b1 * m[k] + (1 - b1) * g)
        v[k] = f32(b2 * v[k] + (1 - b2) * g * g)
        u[k] = m[k] / (math.sqrt(v[k]) + eps) + g_.wd * p[k]
        psq, usq = psq + p[k] * p[k], usq + u[k] * u[k]
      end
      local ratio = (psq > 0 and usq > 0) and math.sqrt(psq) / math.sqrt(usq) or 1
      ratio = math.min(10.0, math.max(0.01, ratio))
      for k = 1, #p do p[k] = f32(p[k] - rate * ratio * u[k]) end
    end
    check_rel(flat(ps[i]), p, 'Lamb p' .. i)
  end
  check(opt.state[ps[1]:id()].lamb_coeff > 0, 'Lamb keeps its trust ratio in the state')
end)

test('simd_kernels_agree_with_scalar', function()
  local default = optim.kernel()
  for _, name in ipairs({ 'Adam', 'AdamW', 'Lamb', 'SGD' }) do
    local results = {}
    for _, kernel in ipairs({ 'scalar', default }) do
      optim.kernel(kernel)
      local opts = name == 'SGD' and { momentum = 0.9 } or nil
      local ps = run(function(groups) return optim[name](groups, opts) end, 6)
      results[kernel] = ps
    end
    for i = 1, 3 do check_rel(flat(results[default][i]), flat(results.scalar[i]), name .. ' ' .. default .. ' vs scalar p' .. i) end
  end
  optim.kernel('auto')
end)

test('state_dict_round_trip', function()
  -- 50 steps, save, 50 more; a fresh optimizer loaded at 50 gives the same parameters.
  local function make()
    local ps, grads = setup(7)
    return ps, grads, optim.AdamW({ { params = { ps[1], ps[2] }, weight_decay = 0.1 }, { params = { ps[3] } } }, { lr = 0.01 })
  end
  local ps, grads, opt = make()
  local saved_p, sd
  for s = 1, 100 do
    if s == 51 then
      sd = opt:state_dict()
      saved_p = {}
      for i, p in ipairs(ps) do saved_p[i] = p:clone() end
    end
    for i, p in ipairs(ps) do p.grad = grads[s][i] end
    opt:step()
  end
  local ps2, _, opt2 = make()
  zl.no_grad(function() for i, p in ipairs(ps2) do p:copy_(saved_p[i]) end end)
  opt2:load_state_dict(sd)
  for s = 51, 100 do
    for i, p in ipairs(ps2) do p.grad = grads[s][i] end
    opt2:step()
  end
  for i = 1, 3 do check(table.concat(flat(ps2[i]), ',') == table.concat(flat(ps[i]), ','), 'resumed p' .. i .. ' is bit-identical') end
  check(opt2.param_groups[1].weight_decay == 0.1 and opt2.param_groups[2].weight_decay == 0.01, 'hyperparameters restored')
  -- A bad tensor in the last parameter's state loads nothing at all.
  local _, _, opt3 = make()
  local key3 = sd.param_groups[2].params[1]
  local bad = { param_groups = sd.param_groups, state = {} }
  for k, v in pairs(sd.state) do bad.state[k] = v end
  bad.state[key3] = { step = 50, exp_avg = zl.zeros(2), exp_avg_sq = sd.state[key3].exp_avg_sq }
  check_error(function() opt3:load_state_dict(bad) end, 'AdamW: load_state: state "exp_avg" has 2 elements, the parameter 9')
  check(next(opt3:state_dict().state) == nil, 'a refused state dict leaves every parameter without state')
end)

test('errors', function()
  local p = zl.zeros(3)
  check_error(function() optim.AdamW({ p }, { lr = -1 }) end, 'AdamW: lr must be a finite number >= 0, got -1')
  check_error(function() optim.AdamW({ p }, { betas = { 0.9, 1.5 } }) end, 'AdamW: betas must be a pair {beta1, beta2}, each in [0, 1), got {0.9, 1.5}')
  check_error(function() optim.AdamW({ p }, { weight_decy = 0.1 }) end, 'AdamW: unknown option "weight_decy" (did you mean "weight_decay"?)')
  check_error(function() optim.SGD({ { params = { p }, momentum = -1 } }) end, 'SGD in param group 1: momentum must be a finite number >= 0, got -1')
  check_error(function() optim.SGD({ p }, { nesterov = true }) end, 'SGD: nesterov needs momentum > 0 and dampening 0')
  check_error(function() optim.Adam({ zl.zeros(2, 'bf16') }) end, 'must be a contiguous f32 tensor (the master weights), got bf16')
  check_error(function() optim.Lamb({ 3 }) end, 'Lamb: param group 1, entry 1 is a number, not a tensor')
  check_error(function() optim.Adam({ p }, { amsgrad = true }) end, 'amsgrad is not supported')
  check_error(function() optim.kernel('avx9000') end, 'avx9000')
end)

test('half_copy_written_in_the_same_pass', function()
  zl.manual_seed(11)
  local master = zl.randn(1000)
  local half = master:to('bf16')
  local opt = optim.AdamW({ master }, { lr = 0.01 })
  opt:set_half(master, half)
  for _ = 1, 3 do
    master.grad = zl.randn(1000):to('bf16')
    opt:step()
  end
  check(table.concat(flat(half), ',') == table.concat(flat(master:to('bf16')), ','), 'half copy equals the master rounded to bf16')
  check_error(function() opt:set_half(master, zl.zeros(3, 'bf16')) end, 'set_half needs a bf16 or f16 tensor of 1000 elements')
  -- a parameter turned into its own bf16 working copy with set_data keeps its identity
  local p = zl.randn(4)
  local id = p:id()
  p:set_data(p:to('bf16'))
  check(p:id() == id and p:dtype() == 'bf16', 'set_data changes the data, not the tensor')
end)

test('empty_group_and_no_grad_params', function()
  local a, b = zl.ones(2), zl.ones(2)
  local opt = optim.SGD({ { params = { a } }, { params = {} } }, { lr = 0.5 })
  a.grad = zl.ones(2)
  opt:step()
  check(a:totable()[1] == 0.5 and b:totable()[1] == 1, 'only parameters with a gradient move')
end)

-- A group is stepped in one call while its parameters' step counts agree, one
-- by one once a parameter missed a step: either way as separate optimizers.
test('a group steps as its parameters would alone', function()
  for _, make in ipairs { optim.AdamW, optim.Lamb, function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9 }) end } do
    zl.manual_seed(3)
    local ps = { zl.randn(5), zl.randn(3, 2), zl.randn(7) }
    local alone = {}
    for i, p in ipairs(ps) do alone[i] = p:clone() end
    local together = make(ps)
    local apart = {}
    for i, p in ipairs(alone) do apart[i] = make({ p }) end
    for s = 1, 4 do
      for i = 1, 3 do
        local g = (s == 2 and i == 2) and nil or zl.randn(table.unpack(ps[i]:shape()))
        ps[i].grad, alone[i].grad = g, g and g:clone()
      end
      together:step()
      for i = 1, 3 do apart[i]:step() end
    end
    for i = 1, 3 do H.check_close(ps[i]:totable(), alone[i]:totable(), 0, 'parameter ' .. i) end
  end
end)

-- The raw kernels' single-set form, core.optim_*(p, g, m, v, hp), steps as
-- the list form does (it once took its own scratch for a missing p_half).
test('raw_kernels_one_set_as_a_list', function()
  local core = zl.core
  for _, name in ipairs({ 'optim_adam', 'optim_lamb', 'optim_sgd' }) do
    zl.manual_seed(3)
    local p, g = zl.randn(37), zl.randn(37)
    local a = { p:clone(), g:clone(), zl.zeros(37), zl.zeros(37) }
    local b = { p:clone(), g:clone(), zl.zeros(37), zl.zeros(37) }
    local hp = { lr = 0.01, momentum = 0.9, step = 1 }
    core[name](a[1], a[2], a[3], a[4], hp)
    core[name]({ b }, hp)
    check(a[1]:eq(b[1]):sum():item() == 37 and a[3]:eq(b[3]):sum():item() == 37,
      name .. ': one set steps as a list of it')
    check(a[1]:ne(p):sum():item() > 0, name .. ': the parameter moved')
  end
end)

H.done()
