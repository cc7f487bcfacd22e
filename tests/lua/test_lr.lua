-- Tests zlua.lr: every schedule's lr (and OneCycle's momentum) at each step of its whole
-- range against DeepSpeed's formulas written out again here, the state_dict round trip,
-- resuming, and each bad-parameter error with its message.

local lr = require 'zlua.lr'

local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq,
  H.check_close, H.check_error

local TOL = 1e-12

local function optimizer()
  return { param_groups = { { lr = 0.1 }, { lr = 0.01 } } }
end

-- Steps sched from its start through last_t, comparing get_lr(), get_last_lr() and the
-- groups' lr with expect(t, group) at every t, starting with the value written at t = -1.
local function sweep(label, opt, sched, last_t, expect)
  for g, group in ipairs(opt.param_groups) do
    check_close(group.lr, expect(-1, g), TOL, label .. ' t=-1 group ' .. g)
  end
  for t = 0, last_t do
    sched:step()
    check(sched.last_batch_iteration == t, label .. ' last_batch_iteration ' .. t)
    local got, last = sched:get_lr(), sched:get_last_lr()
    for g, group in ipairs(opt.param_groups) do
      local want = expect(t, g)
      local where = label .. ' t=' .. t .. ' group ' .. g
      check_close(got[g], want, TOL, where .. ' get_lr')
      check_close(last[g], want, TOL, where .. ' get_last_lr')
      check_close(group.lr, want, TOL, where .. ' group.lr')
    end
  end
end

-- DeepSpeed's warmup fraction; W already raised to at least 2.
local function warmup_fraction(t, W, kind)
  if kind == 'linear' then
    return t / W
  end
  return math.log(t + 1) / math.log(W)
end

-- WarmupLR ---------------------------------------------------------------------------------

local function warmup_lr(t, lo, hi, W, kind)
  if t < 0 then
    return lo
  elseif t < W then
    return lo + (hi - lo) * warmup_fraction(t, W, kind)
  end
  return hi
end

test('warmup_lr', function()
  for _, kind in ipairs({ 'log', 'linear' }) do
    local opt = optimizer()
    local lo, hi = { 0.001, 0.0 }, { 0.05, 0.02 }
    local s = lr.WarmupLR(opt, { warmup_min_lr = lo, warmup_max_lr = hi, warmup_num_steps = 10,
      warmup_type = kind })
    sweep('WarmupLR ' .. kind, opt, s, 40, function(t, g)
      return warmup_lr(t, lo[g], hi[g], 10, kind)
    end)
  end

  do
    -- Defaults (0.16.5's): min 0, max 1e-3 whatever the group's lr, 1000 steps, log.
    local opt = optimizer()
    local s = lr.WarmupLR(opt)
    sweep('WarmupLR defaults', opt, s, 1100, function(t, g)
      return warmup_lr(t, 0.0, 0.001, 1000, 'log')
    end)

    -- warmup_num_steps of 1 runs as 2, as DeepSpeed clamps it.
    opt = optimizer()
    s = lr.WarmupLR(opt, { warmup_min_lr = 0.01, warmup_max_lr = 0.03, warmup_num_steps = 1 })
    sweep('WarmupLR W=1', opt, s, 5, function(t)
      return warmup_lr(t, 0.01, 0.03, 2, 'log')
    end)

    -- The first two optimizer steps of an engine run both use the minimum lr: the one
    -- written by the constructor, then the one after the first step (t = 0).
    for _, kind in ipairs({ 'log', 'linear' }) do
      opt = optimizer()
      s = lr.WarmupLR(opt, { warmup_min_lr = 0.001, warmup_max_lr = 0.01,
        warmup_num_steps = 100, warmup_type = kind })
      check(opt.param_groups[1].lr == 0.001, 'WarmupLR ' .. kind .. ' optimizer step 1 at min')
      s:step()
      check(opt.param_groups[1].lr == 0.001, 'WarmupLR ' .. kind .. ' optimizer step 2 at min')
      s:step()
      check(opt.param_groups[1].lr > 0.001, 'WarmupLR ' .. kind .. ' optimizer step 3 above min')
    end

    -- Integral floats count as integers (2e1 steps).
    opt = optimizer()
    s = lr.WarmupLR(opt, { warmup_max_lr = 0.5, warmup_num_steps = 2e1, warmup_type = 'linear' })
    sweep('WarmupLR 2e1', opt, s, 25, function(t)
      return warmup_lr(t, 0.0, 0.5, 20, 'linear')
    end)
  end
end)

-- WarmupDecayLR ----------------------------------------------------------------------------

local function warmup_decay_lr(t, lo, hi, W, T, kind)
  if t < W then
    return warmup_lr(t, lo, hi, W, kind)
  end
  local gamma = (T - t) / math.max(1, T - W)
  if gamma < 0 then
    gamma = 0
  end
  return lo + (hi - lo) * gamma
end

test('warmup_decay_lr', function()
  for _, kind in ipairs({ 'log', 'linear' }) do
    for _, lo in ipairs({ 0.0, 0.002 }) do
      local opt = optimizer()
      local s = lr.WarmupDecayLR(opt, { total_num_steps = 40, warmup_min_lr = lo,
        warmup_max_lr = { 0.05, 0.01 }, warmup_num_steps = 10, warmup_type = kind })
      local hi = { 0.05, 0.01 }
      sweep('WarmupDecayLR ' .. kind .. ' min ' .. lo, opt, s, 60, function(t, g)
        return warmup_decay_lr(t, lo, hi[g], 10, 40, kind)
      end)
    end
  end

  do
    -- Defaults: warmup_max_lr is 0.001 here, whatever the optimizer's lr.
    local opt = optimizer()
    local s = lr.WarmupDecayLR(opt, { total_num_steps = 1500 })
    sweep('WarmupDecayLR defaults', opt, s, 1600, function(t)
      return warmup_decay_lr(t, 0.0, 0.001, 1000, 1500, 'log')
    end)

    -- total_num_steps equal to warmup_num_steps: straight to the minimum after warmup.
    opt = optimizer()
    s = lr.WarmupDecayLR(opt, { total_num_steps = 8, warmup_num_steps = 8, warmup_max_lr = 0.1 })
    sweep('WarmupDecayLR T=W', opt, s, 12, function(t)
      return warmup_decay_lr(t, 0.0, 0.1, 8, 8, 'log')
    end)
  end
end)

-- WarmupCosineLR ---------------------------------------------------------------------------

local function cosine_ratio(t, W, T, wmin, cmin, kind)
  if t < 0 then
    return 0
  elseif t < W then
    return wmin + (1 - wmin) * warmup_fraction(t, W, kind)
  end
  local progress = (t - W + 1) / math.max(1, T - W)
  if progress > 1 then
    progress = 1
  end
  local r = cmin + (1 - cmin) * (1 + math.cos(math.pi * progress)) / 2
  return r > 0 and r or 0
end

test('warmup_cosine_lr', function()
  for _, kind in ipairs({ 'log', 'linear' }) do
    local opt = optimizer()
    local s = lr.WarmupCosineLR(opt, { total_num_steps = 50, warmup_num_steps = 10,
      warmup_min_ratio = 0.1, cos_min_ratio = 0.01, warmup_type = kind })
    local base = { 0.1, 0.01 }
    sweep('WarmupCosineLR ' .. kind, opt, s, 80, function(t, g)
      return base[g] * cosine_ratio(t, 10, 50, 0.1, 0.01, kind)
    end)
  end

  do
    local base = { 0.1, 0.01 }
    local opt = optimizer()
    local s = lr.WarmupCosineLR(opt, { total_num_steps = 2000 })
    sweep('WarmupCosineLR defaults', opt, s, 2100, function(t, g)
      return base[g] * cosine_ratio(t, 1000, 2000, 0.0, 0.0001, 'log')
    end)

    -- No decay window (total_num_steps <= warmup_num_steps): the floor right after warmup.
    for _, T in ipairs({ 10, 4 }) do
      opt = optimizer()
      s = lr.WarmupCosineLR(opt, { total_num_steps = T, warmup_num_steps = 10,
        warmup_type = 'linear' })
      sweep('WarmupCosineLR T=' .. T, opt, s, 20, function(t, g)
        return base[g] * cosine_ratio(t, 10, T, 0.0, 0.0001, 'linear')
      end)
    end

    -- A negative cos_min_ratio is clamped at 0 at the end.
    opt = optimizer()
    s = lr.WarmupCosineLR(opt, { total_num_steps = 30, warmup_num_steps = 5,
      cos_min_ratio = -0.2 })
    sweep('WarmupCosineLR negative floor', opt, s, 40, function(t, g)
      return base[g] * cosine_ratio(t, 5, 30, 0.0, -0.2, 'log')
    end)
    check(opt.param_groups[1].lr == 0, 'WarmupCosineLR negative floor ends at 0')
  end
end)

-- OneCycle ---------------------------------------------------------------------------------

-- Fraction of the way from the minimum lr to the maximum at t: up over the first half,
-- down over the second, in stairs when a stair count is given.
local function cycle_fraction(t, first, second, stairs1, stairs2)
  local total = first + second
  local pos = (t + 1) % total
  if pos <= first then
    if stairs1 > 0 then
      return math.floor(pos * stairs1 / first) / stairs1
    end
    return pos / first
  end
  if stairs2 > 0 then
    return math.floor((total - pos) * stairs2 / second) / stairs2
  end
  return (total - pos) / second
end

-- Expected {lr, beta1} at t for one group; c holds the schedule's parameters.
local function one_cycle(t, g, c)
  local lo, hi = c.min_lr[g], c.max_lr[g]
  local mlo, mhi = c.min_mom[g], c.max_mom[g]
  if t < 0 then
    return lo, mlo
  end
  local total = c.first + c.second
  if t < total then
    local f = cycle_fraction(t, c.first, c.second, c.stairs1, c.stairs2)
    return lo + (hi - lo) * f, mhi - (mhi - mlo) * f
  end
  local k = t - total + 1
  local lr_t, mom_t = lo, mhi
  if c.decay_step > 0 and c.lr_rate ~= 0 then
    lr_t = lo / (1 + c.lr_rate * k / c.decay_step)
  end
  if c.decay_step > 0 and c.mom_rate ~= 0 then
    mom_t = mhi * (1 + c.mom_rate * k / c.decay_step)
  end
  return lr_t, mom_t
end

local function adam_optimizer()
  return { param_groups = { { lr = 0.1, betas = { 0.9, 0.999 } },
    { lr = 0.01, betas = { 0.9, 0.999 } } } }
end

local cycles = {
  { label = 'lists with decay', min_lr = { 0.01, 0.001 }, max_lr = { 0.1, 0.02 },
    min_mom = { 0.85, 0.8 }, max_mom = { 0.95, 0.9 }, first = 6, second = 4, stairs1 = 0,
    stairs2 = 0, decay_step = 3, lr_rate = 0.5, mom_rate = 0.1, last = 40 },
  { label = 'no decay', min_lr = { 0.02, 0.02 }, max_lr = { 0.2, 0.2 },
    min_mom = { 0.8, 0.8 }, max_mom = { 0.9, 0.9 }, first = 5, second = 5, stairs1 = 0,
    stairs2 = 0, decay_step = 0, lr_rate = 0.5, mom_rate = 0.5, last = 25 },
  { label = 'stairs', min_lr = { 0.01, 0.01 }, max_lr = { 0.1, 0.1 },
    min_mom = { 0.8, 0.8 }, max_mom = { 0.9, 0.9 }, first = 9, second = 6, stairs1 = 3,
    stairs2 = 2, decay_step = 4, lr_rate = 1.0, mom_rate = 0, last = 40 },
  { label = 'no second half', min_lr = { 0.01, 0.01 }, max_lr = { 0.1, 0.1 },
    min_mom = { 0.8, 0.8 }, max_mom = { 0.9, 0.9 }, first = 7, second = 0, stairs1 = 0,
    stairs2 = 0, decay_step = 2, lr_rate = 0.25, mom_rate = 0.05, last = 20 },
}

test('one_cycle', function()
  for _, c in ipairs(cycles) do
    local opt = adam_optimizer()
    local params = {
      cycle_min_lr = c.min_lr, cycle_max_lr = c.max_lr, cycle_min_mom = c.min_mom,
      cycle_max_mom = c.max_mom, cycle_first_step_size = c.first,
      cycle_second_step_size = c.second, decay_step_size = c.decay_step,
      decay_lr_rate = c.lr_rate, decay_mom_rate = c.mom_rate,
    }
    if c.stairs1 > 0 then
      params.cycle_first_stair_count = c.stairs1
      params.cycle_second_stair_count = c.stairs2
    end
    local s = lr.OneCycle(opt, params)
    local label = 'OneCycle ' .. c.label
    for g, group in ipairs(opt.param_groups) do
      local want_lr, want_mom = one_cycle(-1, g, c)
      check_close(group.lr, want_lr, TOL, label .. ' t=-1 lr group ' .. g)
      check_close(group.betas[1], want_mom, TOL, label .. ' t=-1 beta1 group ' .. g)
      check(group.betas[2] == 0.99, label .. ' t=-1 beta2 is 0.99')
    end
    check_error(function() s:get_last_lr() end, 'OneCycle: get_last_lr() needs a step() first')
    for t = 0, c.last do
      s:step()
      local got, moms = s:get_lr(), s:get_mom()
      for g, group in ipairs(opt.param_groups) do
        local want_lr, want_mom = one_cycle(t, g, c)
        local where = label .. ' t=' .. t .. ' group ' .. g
        check_close(got[g], want_lr, TOL, where .. ' get_lr')
        check_close(s:get_last_lr()[g], want_lr, TOL, where .. ' get_last_lr')
        check_close(group.lr, want_lr, TOL, where .. ' group.lr')
        check_close(moms[g][1], want_mom, TOL, where .. ' get_mom')
        check_close(group.betas[1], want_mom, TOL, where .. ' beta1')
        check(group.betas[2] == 0.99, where .. ' beta2 is 0.99')
      end
    end
  end

  do
    -- Defaults: cycle_second_step_size follows the first (2000), no decay, moms 0.8 / 0.9.
    local opt = adam_optimizer()
    local s = lr.OneCycle(opt, { cycle_min_lr = 0.001, cycle_max_lr = 0.01 })
    local c = { min_lr = { 0.001, 0.001 }, max_lr = { 0.01, 0.01 }, min_mom = { 0.8, 0.8 },
      max_mom = { 0.9, 0.9 }, first = 2000, second = 2000, stairs1 = 0, stairs2 = 0,
      decay_step = 0, lr_rate = 0, mom_rate = 0 }
    for t = 0, 4100 do
      s:step()
      local want_lr, want_mom = one_cycle(t, 1, c)
      check_close(opt.param_groups[1].lr, want_lr, TOL, 'OneCycle defaults lr t=' .. t)
      check_close(opt.param_groups[1].betas[1], want_mom, TOL, 'OneCycle defaults beta1 t=' .. t)
    end

    -- An optimizer without betas (SGD's momentum) keeps its momentum; only lr cycles.
    opt = { param_groups = { { lr = 0.1, momentum = 0.9 } } }
    s = lr.OneCycle(opt, { cycle_min_lr = 0.01, cycle_max_lr = 0.1, cycle_first_step_size = 4 })
    check(s.cycle_momentum == false and s:get_mom() == nil, 'OneCycle without betas: no momentum')
    for _ = 1, 6 do s:step() end
    check(opt.param_groups[1].momentum == 0.9 and opt.param_groups[1].betas == nil,
      'OneCycle without betas leaves momentum alone')
    check_close(opt.param_groups[1].lr, 0.01 + 0.09 * (8 - 6) / 4, TOL, 'OneCycle without betas lr')

    -- cycle_momentum = false leaves betas alone.
    opt = adam_optimizer()
    s = lr.OneCycle(opt, { cycle_min_lr = 0.01, cycle_max_lr = 0.1, cycle_momentum = false })
    s:step()
    check(opt.param_groups[1].betas[1] == 0.9 and opt.param_groups[1].betas[2] == 0.999,
      'OneCycle cycle_momentum=false leaves betas alone')
  end
end)

-- LRRangeTest ------------------------------------------------------------------------------

test('lr_range_test', function()
  for _, staircase in ipairs({ false, true }) do
    local opt = optimizer()
    local lo = { 0.01, 0.002 }
    local s = lr.LRRangeTest(opt, { lr_range_test_min_lr = lo, lr_range_test_step_size = 5,
      lr_range_test_step_rate = 0.5, lr_range_test_staircase = staircase })
    sweep('LRRangeTest staircase=' .. tostring(staircase), opt, s, 40, function(t, g)
      local i = (t + 1) / 5
      if staircase then
        i = math.floor(i)
      end
      return lo[g] * (1 + 0.5 * i)
    end)
  end

  do
    local opt = optimizer()
    local s = lr.LRRangeTest(opt)
    sweep('LRRangeTest defaults', opt, s, 4500, function(t)
      return 1e-3 * (1 + 1.0 * (t + 1) / 2000)
    end)
  end
end)

-- step(t), state_dict, resuming -----------------------------------------------------------

local factories = {
  WarmupLR = function(opt, extra)
    local p = { warmup_min_lr = 0.001, warmup_max_lr = 0.05, warmup_num_steps = 10 }
    for k, v in pairs(extra or {}) do p[k] = v end
    return lr.WarmupLR(opt, p)
  end,
  WarmupDecayLR = function(opt, extra)
    local p = { total_num_steps = 30, warmup_num_steps = 10, warmup_type = 'linear' }
    for k, v in pairs(extra or {}) do p[k] = v end
    return lr.WarmupDecayLR(opt, p)
  end,
  WarmupCosineLR = function(opt, extra)
    local p = { total_num_steps = 30, warmup_num_steps = 10, warmup_min_ratio = 0.05 }
    for k, v in pairs(extra or {}) do p[k] = v end
    return lr.WarmupCosineLR(opt, p)
  end,
  OneCycle = function(opt, extra)
    local p = { cycle_min_lr = 0.01, cycle_max_lr = 0.1, cycle_first_step_size = 6,
      cycle_second_step_size = 4, decay_step_size = 2, decay_lr_rate = 0.3,
      decay_mom_rate = 0.02 }
    for k, v in pairs(extra or {}) do p[k] = v end
    return lr.OneCycle(opt, p)
  end,
  LRRangeTest = function(opt, extra)
    local p = { lr_range_test_step_size = 3, lr_range_test_staircase = true }
    for k, v in pairs(extra or {}) do p[k] = v end
    return lr.LRRangeTest(opt, p)
  end,
}

local function same_groups(a, b)
  for g, ga in ipairs(a.param_groups) do
    local gb = b.param_groups[g]
    if ga.lr ~= gb.lr then
      return false
    end
    if ga.betas and (ga.betas[1] ~= gb.betas[1] or ga.betas[2] ~= gb.betas[2]) then
      return false
    end
  end
  return true
end

test('state_and_resume', function()
  for _, name in ipairs(lr.names) do
    local make = factories[name]
    for _, k in ipairs({ 0, 1, 7, 12, 35 }) do
      local a_opt, b_opt = adam_optimizer(), adam_optimizer()
      local a, b = make(a_opt), make(b_opt)
      for _ = 1, k do a:step() end
      local sd = a:state_dict()
      check_eq(sd.last_batch_iteration, k - 1, name .. ' state_dict last_batch_iteration')
      check(next(sd, next(sd)) == nil, name .. ' state_dict holds only last_batch_iteration')
      b:load_state_dict(sd)
      for i = 1, 25 do
        a:step()
        b:step()
        local la, lb = a:get_lr(), b:get_lr()
        check(la[1] == lb[1] and la[2] == lb[2] and same_groups(a_opt, b_opt),
          string.format('%s restored at step %d continues identically (step %d)', name, k, i))
      end
    end

    -- step(t) jumps to t; the next step() carries on from there.
    local opt, ref_opt = adam_optimizer(), adam_optimizer()
    local s, ref = make(opt), make(ref_opt)
    for _ = 0, 20 do ref:step() end
    s:step(20)
    check(s.last_batch_iteration == 20 and same_groups(opt, ref_opt), name .. ' step(20)')
    s:step()
    ref:step()
    check(s.last_batch_iteration == 21 and same_groups(opt, ref_opt),
      name .. ' step after step(20)')

    -- Constructed at t >= 0 (resuming), the optimizer is left alone until the first step.
    opt = adam_optimizer()
    s = make(opt, { last_batch_iteration = 14 })
    check(opt.param_groups[1].lr == 0.1 and opt.param_groups[2].lr == 0.01,
      name .. ' resumed constructor leaves the optimizer alone')
    check_error(function() s:get_last_lr() end, name .. ': get_last_lr() needs a step() first')
    ref_opt = adam_optimizer()
    ref = make(ref_opt)
    for _ = 0, 15 do ref:step() end
    s:step()
    check(same_groups(opt, ref_opt), name .. ' resumed continues at step 15')

    -- get_lr and get_last_lr hand out copies.
    local got = ref:get_lr()
    got[1] = -1
    local last = ref:get_last_lr()
    last[1] = -1
    check(ref:get_lr()[1] ~= -1 and ref:get_last_lr()[1] ~= -1, name .. ' lists are copies')
    check_eq(tostring(ref), name .. '(last_batch_iteration=15)', name .. ' tostring')

    check_error(function() make(adam_optimizer(), { warmup_steps = 5 }) end,
      name .. ": unknown parameter 'warmup_steps' (nearest valid key: '")
    check_error(function() s:step(1.5) end,
      name .. ': last_batch_iteration must be an integer, got 1.5')
    check_error(function() s:step(-2) end,
      name .. ': last_batch_iteration must be at least -1, got -2')
    check_error(function() s:load_state_dict({}) end,
      name .. ': last_batch_iteration must be an integer, got nil')
    check_error(function() s:load_state_dict(3) end, name .. ': load_state_dict expects a table')
    check_error(function() make(nil) end, name .. ': optimizer must be an object with param_groups')
    check_error(function() make({ lr = 0.1 }) end, name .. ': optimizer has no param_groups array')
    check_error(function() make({ param_groups = { 0.1 } }) end,
      name .. ': optimizer.param_groups[1] must be a table, got 0.1')
  end

  do
    -- A wrapper holding the optimizer in .optimizer is scheduled through to it.
    local inner = optimizer()
    local s = lr.WarmupLR({ optimizer = inner }, { warmup_max_lr = 0.2, warmup_num_steps = 4,
      warmup_type = 'linear' })
    s:step()
    s:step()
    check_close(inner.param_groups[1].lr, 0.2 * 1 / 4, TOL, 'wrapped optimizer')

    -- lr.create builds by DeepSpeed type name.
    local opt = optimizer()
    s = lr.create('WarmupDecayLR', opt, { total_num_steps = 20, warmup_num_steps = 5 })
    check(getmetatable(s) == lr.WarmupDecayLR and s.total_num_steps == 20, 'lr.create')
  end
end)

-- Errors -----------------------------------------------------------------------------------

test('errors', function()
  local opt = optimizer()
  check_error(function() lr.WarmupLR(opt, { warmup_max_l = 0.1 }) end,
    "WarmupLR: unknown parameter 'warmup_max_l' (nearest valid key: 'warmup_max_lr')")
  check_error(function() lr.WarmupLR(opt, { warmup_steps = 10 }) end,
    "nearest valid key: 'warmup_num_steps'")
  check_error(function() lr.WarmupLR(opt, { total_num_steps = 10 }) end,
    "WarmupLR: unknown parameter 'total_num_steps' (nearest valid key: 'warmup_num_steps')")
  check_error(function() lr.WarmupDecayLR(opt, { total_steps = 10 }) end,
    "WarmupDecayLR: unknown parameter 'total_steps' (nearest valid key: 'total_num_steps')")
  check_error(function() lr.WarmupCosineLR(opt, { total_num_steps = 10, cos_min = 0 }) end,
    "WarmupCosineLR: unknown parameter 'cos_min' (nearest valid key: 'cos_min_ratio')")
  check_error(function()
    lr.OneCycle(opt, { cycle_min_lr = 0, cycle_max_lr = 1, cycle_step_size = 3 })
  end,
    "OneCycle: unknown parameter 'cycle_step_size' (nearest valid key: 'cycle_first_step_size')")
  check_error(function() lr.LRRangeTest(opt, { lr_range_test_max_lr = 1 }) end,
    "LRRangeTest: unknown parameter 'lr_range_test_max_lr' "
      .. "(nearest valid key: 'lr_range_test_min_lr')")
  check_error(function() lr.WarmupLR(opt, { 0.1 }) end,
    'WarmupLR: parameter names must be strings, got 1')
  check_error(function() lr.WarmupLR(opt, 0.1) end, 'WarmupLR: params must be a table, got 0.1')

  check_error(function() lr.WarmupLR(opt, { warmup_max_lr = 'auto' }) end,
    'WarmupLR: warmup_max_lr must be a finite number, got "auto"')
  check_error(function() lr.WarmupLR(opt, { warmup_min_lr = 0 / 0 }) end,
    'WarmupLR: warmup_min_lr must be a finite number, got')
  check_error(function() lr.WarmupLR(opt, { warmup_min_lr = { 0.1 } }) end,
    'WarmupLR: warmup_min_lr must have one value per param group (2), got {0.1}')
  check_error(function() lr.WarmupLR(opt, { warmup_max_lr = { 0.1, 'x' } }) end,
    'WarmupLR: warmup_max_lr[2] must be a finite number, got "x"')
  check_error(function() lr.WarmupLR(opt, { warmup_num_steps = 10.5 }) end,
    'WarmupLR: warmup_num_steps must be an integer, got 10.5')
  check_error(function() lr.WarmupLR(opt, { warmup_num_steps = -1 }) end,
    'WarmupLR: warmup_num_steps must be at least 0, got -1')
  check(lr.WarmupLR(opt, { warmup_num_steps = 0 }).warmup_num_steps == 2, 'warmup_num_steps 0 runs as 2, as DeepSpeed clamps it')
  check_error(function() lr.WarmupLR(opt, { warmup_num_steps = '10' }) end,
    'WarmupLR: warmup_num_steps must be an integer, got "10"')
  check_error(function() lr.WarmupLR(opt, { warmup_type = 'cosine' }) end,
    "WarmupLR: warmup_type must be 'log' or 'linear', got \"cosine\"")
  check_error(function() lr.WarmupCosineLR({ param_groups = { { lr = 'x' } } }, { total_num_steps = 10 }) end,
    'WarmupCosineLR: param_groups[1].lr must be a finite number, got "x"')

  check_error(function() lr.WarmupDecayLR(opt, { warmup_num_steps = 10 }) end,
    'WarmupDecayLR: total_num_steps is required')
  do
    -- A total below the warmup is DeepSpeed's warning, not an error: one line through
    -- lr.warn, and the schedule warms up, then stays at its minimum.
    local said, warn = {}, lr.warn
    lr.warn = function(line) said[#said + 1] = line end
    local o = optimizer()
    local s = lr.WarmupDecayLR(o, { total_num_steps = 5, warmup_num_steps = 10, warmup_min_lr = 0.01,
      warmup_max_lr = 0.1 })
    lr.WarmupDecayLR(optimizer(), { total_num_steps = 1, warmup_num_steps = 1 })
    lr.WarmupDecayLR(optimizer(), { total_num_steps = 10, warmup_num_steps = 10 })
    lr.warn = warn
    check(#said == 2, 'WarmupDecayLR below its warmup warns once each, got ' .. #said)
    check(said[1] == 'WarmupDecayLR: total_num_steps (5) is less than warmup_num_steps (10): the lr '
      .. 'warms up for 10 steps, then stays at warmup_min_lr', said[1])
    check(said[2]:find('(1, raised to the minimum of 2): the lr warms up for 2 steps', 1, true), said[2])
    sweep('WarmupDecayLR T<W', o, s, 14, function(t)
      return warmup_decay_lr(t, 0.01, 0.1, 10, 5, 'log')
    end)
  end
  check_error(function() lr.WarmupDecayLR(opt, { total_num_steps = 2.5e3 + 0.5 }) end,
    'WarmupDecayLR: total_num_steps must be an integer, got 2500.5')
  do
    -- A rejected schedule leaves the optimizer as it was.
    local o = optimizer()
    pcall(lr.WarmupDecayLR, o, { total_num_steps = 5, warmup_num_steps = -1 })
    check(o.param_groups[1].lr == 0.1, 'failed constructor leaves the optimizer alone')
  end

  check_error(function() lr.WarmupCosineLR(opt, {}) end,
    'WarmupCosineLR: total_num_steps is required')
  check_error(function()
    lr.WarmupCosineLR(opt, { total_num_steps = 10, warmup_min_ratio = { 0, 0 } })
  end,
    'WarmupCosineLR: warmup_min_ratio must be a finite number, got {0, 0}')
  check_error(function() lr.WarmupCosineLR(opt, { total_num_steps = 10, warmup_type = 'exp' }) end,
    "WarmupCosineLR: warmup_type must be 'log' or 'linear', got \"exp\"")
  check_error(function() lr.WarmupCosineLR(opt, { total_num_steps = -1 }) end,
    'WarmupCosineLR: total_num_steps must be at least 0, got -1')

  check_error(function() lr.OneCycle(opt, { cycle_max_lr = 0.1 }) end,
    'OneCycle: cycle_min_lr is required')
  check_error(function() lr.OneCycle(opt, { cycle_min_lr = 0.1 }) end,
    'OneCycle: cycle_max_lr is required')
  local function one_cycle_with(extra)
    return function()
      local p = { cycle_min_lr = 0.01, cycle_max_lr = 0.1 }
      for k, v in pairs(extra) do p[k] = v end
      lr.OneCycle(adam_optimizer(), p)
    end
  end
  check_error(one_cycle_with({ cycle_first_step_size = 0 }),
    'OneCycle: cycle_first_step_size must be positive, got 0')
  check_error(one_cycle_with({ cycle_second_step_size = -1 }),
    'OneCycle: cycle_second_step_size must be non-negative, got -1')
  check_error(one_cycle_with({ cycle_first_stair_count = 1.5 }),
    'OneCycle: cycle_first_stair_count must be an integer, got 1.5')
  check_error(one_cycle_with({ cycle_second_stair_count = -1 }),
    'OneCycle: cycle_second_stair_count must be at least 0, got -1')
  check_error(one_cycle_with({ decay_step_size = -2 }),
    'OneCycle: decay_step_size must be non-negative, got -2')
  check_error(one_cycle_with({ cycle_momentum = 'yes' }),
    'OneCycle: cycle_momentum must be true or false, got "yes"')
  check_error(one_cycle_with({ cycle_min_mom = { 0.8, 0.8, 0.8 } }),
    'OneCycle: cycle_min_mom must have one value per param group (2), got {0.8, 0.8, 0.8}')
  check_error(one_cycle_with({ cycle_max_lr = { 0.1, nil, 0.3 } }),
    'OneCycle: cycle_max_lr must have one value per param group (2)')
  check_error(one_cycle_with({ cycle_max_lr = { 0.1, 0.2, extra = 0.3 } }),
    'OneCycle: cycle_max_lr must have one value per param group (2)')
  check_error(one_cycle_with({ decay_lr_rate = 'fast' }),
    'OneCycle: decay_lr_rate must be a finite number, got "fast"')

  check_error(function() lr.LRRangeTest(opt, { lr_range_test_step_size = 0 }) end,
    'LRRangeTest: lr_range_test_step_size must be at least 1, got 0')
  check_error(function() lr.LRRangeTest(opt, { lr_range_test_staircase = 1 }) end,
    'LRRangeTest: lr_range_test_staircase must be true or false, got 1')
  check_error(function() lr.LRRangeTest(opt, { lr_range_test_step_rate = 1 / 0 }) end,
    'LRRangeTest: lr_range_test_step_rate must be a finite number, got inf')

  check_error(function() lr.create('WarmupLr', opt, {}) end,
    "zlua.lr: unknown scheduler type \"WarmupLr\" (nearest valid type: 'WarmupLR')")
  check_error(function() lr.create(nil, opt, {}) end, 'zlua.lr: unknown scheduler type nil')
end)

H.done()
