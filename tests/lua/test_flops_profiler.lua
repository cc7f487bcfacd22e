-- Tests zlua.profiling (DeepSpeed's FLOPS profiler): per-module parameters,
-- MACs and FLOPs of a Linear, an MLP, a Conv2d, element-wise ops and a tiny
-- nn.GPT against formulas written out here, the ops and forwards restored
-- after a profile, get_model_profile, and the engine's flops_profiler
-- section: the profile printed once at profile_step with the achieved FLOPS
-- lines, module_depth, top_modules, detailed, output_file, gradient
-- accumulation, and its keys refused when wrong.

local zl = require 'zlua'
local nn = require 'zlua.nn'
local profiling = require 'zlua.profiling'
local H = require 'harness'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local FlopsProfiler = profiling.FlopsProfiler
local fmt = string.format
local TMP = os.tmpname()
os.remove(TMP)
zl.core.mkdirs(TMP)

-- One profiled call of fn(); returns the profiler, figures readable.
local function profiled(model, fn, opts)
  local prof = FlopsProfiler.new(model)
  prof:start_profile(opts)
  zl.no_grad(fn)
  prof:stop_profile()
  return prof
end

-- Checks module `name`'s params, MACs and FLOPs.
local function check_module(prof, name, params, macs, flops)
  local p = prof:module_profile(name)
  check_eq(p.params, params, name .. ': params')
  check_eq(p.macs, macs, name .. ': MACs')
  check_eq(p.flops, flops, name .. ': FLOPs')
end

test('linear', function()
  local lin = nn.Linear(5, 3)
  -- y[b, o] = sum_i x[b, i] w[o, i]: one MAC per (row, output, input); the
  -- bias is left out of the FLOPs, as DeepSpeed counts F.linear.
  local prof = profiled(lin, function() lin(zl.randn(4, 5)) end)
  check_module(prof, '', 5 * 3 + 3, 4 * 3 * 5, 2 * 4 * 3 * 5)
  check_eq(prof:get_total_macs(), 60)
  check_eq(prof:get_total_flops(), 120)
  check_eq(prof:get_total_params(), 18)
  check(prof:get_total_duration() > 0, 'the forward took time')
  -- Leading dimensions multiply the rows.
  prof = profiled(lin, function() lin(zl.randn(2, 7, 5)) end)
  check_eq(prof:get_total_macs(), 2 * 7 * 3 * 5, 'x [2, 7, 5]')
  check_eq(prof:get_total_macs(true), '210 MACs', 'as a string')
  check_eq(prof:get_total_params(true), '18')
  prof:end_profile()
  check_error(function() prof:get_total_macs() end, 'FlopsProfiler:get_total_macs: nothing profiled')
end)

test('mlp_per_module', function()
  local n, d, h, o = 10, 6, 16, 3
  local mlp = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, o))
  local prof = profiled(mlp, function() mlp(zl.randn(n, d)) end)
  local fc1, fc2 = n * d * h, n * h * o
  check_module(prof, '1', d * h + h, fc1, 2 * fc1)
  check_module(prof, '2', 0, 0, n * h)                  -- one FLOP an element
  check_module(prof, '3', h * o + o, fc2, 2 * fc2)
  check_module(prof, '', d * h + h + h * o + o, fc1 + fc2, 2 * fc1 + n * h + 2 * fc2)
  local list = prof:module_profiles()
  check_eq(#list, 4, 'the model and its three layers')
  check_eq(list[1].name .. '|' .. list[2].name .. '|' .. list[4].class, '|1|Linear')
  check_eq(list[3].depth, 1)
  check_error(function() prof:module_profile('9') end, 'FlopsProfiler:module_profile: no module named 9')
  -- An ignored class is not hooked: its work counts for its parent.
  prof = profiled(mlp, function() mlp(zl.randn(n, d)) end, { ignore_list = { nn.ReLU } })
  check_module(prof, '2', 0, 0, 0)
  check_eq(prof:get_total_flops(), 2 * fc1 + n * h + 2 * fc2, 'the ReLU counted in the Sequential')
end)

test('conv_norm_elementwise', function()
  local conv = nn.Conv2d(3, 4, 3, { padding = 1 })
  local prof = profiled(conv, function() conv(zl.randn(2, 3, 5, 5)) end)
  -- Each of the 2*4*5*5 outputs is a dot product over 3*3*3 inputs; the bias
  -- adds one FLOP an output.
  local outs = 2 * 4 * 5 * 5
  check_module(prof, '', 4 * 3 * 3 * 3 + 4, outs * 27, 2 * outs * 27 + outs)

  local Net = nn.Module:extend('ElementwiseNet')
  function Net:__init() self.ln = nn.LayerNorm(8) end
  function Net:forward(x)
    local y = self.ln(x)
    -- Counted: add, mul and softmax by name; not counted: the operators, as
    -- DeepSpeed does not count Python's.
    return (y:add(x):mul(2) + y * 3):softmax(-1)
  end
  local net = Net()
  prof = profiled(net, function() net(zl.randn(4, 8)) end)
  check_module(prof, 'ln', 16, 0, 5 * 32)
  check_module(prof, '', 16, 0, 5 * 32 + 32 + 32 + 32)
  -- Without an affine weight a norm is 4 FLOPs an element.
  local bare = nn.Module:extend('BareNorm')
  function bare:forward(x) return zl.layer_norm(x, 8) end
  local b = bare()
  prof = profiled(b, function() b(zl.randn(4, 8)) end)
  check_eq(prof:get_total_flops(), 4 * 32)
end)

-- A tiny GPT's figures, written out: B sequences of t tokens, C wide, H
-- heads, L blocks, V tokens, block size T.
local B, t, C, Hd, L, V, T = 3, 8, 16, 2, 2, 11, 8

local function gpt(dropout)
  zl.manual_seed(3)
  return nn.GPT{ vocab_size = V, block_size = T, n_layer = L, n_head = Hd, n_embd = C, dropout = dropout }
end

local function gpt_expected()
  local rows = B * t
  local e = {}
  e.qkv, e.proj = rows * C * 3 * C, rows * C * C
  -- Scores q k^T: every query meets every key over C/H per head, H heads;
  -- then the weights times v: the same count again. Causal masking is not
  -- subtracted, as DeepSpeed counts attention whole.
  e.core = 2 * B * Hd * t * t * (C // Hd)
  e.attn = e.qkv + e.proj + e.core
  e.fc, e.out = rows * C * 4 * C, rows * 4 * C * C
  e.mlp = e.fc + e.out
  e.block = e.attn + e.mlp
  e.head = rows * C * V
  e.macs = L * e.block + e.head
  e.ln = 5 * rows * C
  e.gelu = rows * 4 * C
  e.flops = 2 * e.macs + L * (2 * e.ln + e.gelu) + e.ln
  e.block_params = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)
  e.params = V * C + T * C + L * e.block_params + 2 * C
  return e
end

test('gpt_per_module', function()
  local e = gpt_expected()
  local model = gpt(0)
  model:eval()
  local ids = zl.zeros({ B, t }, 'i64')
  local prof = profiled(model, function() model(ids) end)
  for l = 1, L do
    local p = 'blocks.' .. l
    check_module(prof, p .. '.attn.qkv', 3 * C * C + 3 * C, e.qkv, 2 * e.qkv)
    check_module(prof, p .. '.attn.proj', C * C + C, e.proj, 2 * e.proj)
    check_module(prof, p .. '.attn', 4 * C * C + 4 * C, e.attn, 2 * e.attn)
    check_module(prof, p .. '.mlp.1', 4 * C * C + 4 * C, e.fc, 2 * e.fc)
    check_module(prof, p .. '.mlp.2', 0, 0, e.gelu)
    check_module(prof, p .. '.mlp', 8 * C * C + 5 * C, e.mlp, 2 * e.mlp + e.gelu)
    check_module(prof, p .. '.ln1', 2 * C, 0, e.ln)
    check_module(prof, p, e.block_params, e.block, 2 * e.block + 2 * e.ln + e.gelu)
  end
  -- The head shares its weight with the token embedding: both modules count
  -- it, the model once.
  check_module(prof, 'lm_head', V * C, e.head, 2 * e.head)
  check_module(prof, 'wte', V * C, 0, 0)
  check_module(prof, '', e.params, e.macs, e.flops)
  check_eq(prof:get_total_params(), model:num_parameters())
  local blocks = prof:module_profile('blocks')
  local b1, b2 = prof:module_profile('blocks.1'), prof:module_profile('blocks.2')
  check_eq(blocks.duration, b1.duration + b2.duration, 'a ModuleList takes its children\'s time')
  prof:end_profile()

  -- In training with dropout the attention is spelt out (two matmuls and a
  -- softmax): the same MACs, and the softmax's FLOPs on top.
  local train = gpt(0.1)
  prof = profiled(train, function() train(ids) end)
  check_module(prof, 'blocks.1.attn', 4 * C * C + 4 * C, e.attn, 2 * e.attn + B * Hd * t * t)
  check_eq(prof:get_total_macs(), e.macs)
end)

test('ops_restored', function()
  local model = gpt(0)
  model:eval()
  local linear, matmul, gelu, attention = zl.linear, zl.Tensor.matmul, zl.Tensor.gelu, zl.attention
  local prof = FlopsProfiler.new(model)
  prof:start_profile()
  check(zl.linear ~= linear and zl.Tensor.matmul ~= matmul, 'swapped while profiling')
  check(rawget(model.lm_head, 'forward') ~= nil, 'forwards hooked while profiling')
  local ids = zl.zeros({ B, t }, 'i64')
  model(ids)
  prof:stop_profile()
  check(zl.linear == linear and zl.Tensor.matmul == matmul and zl.Tensor.gelu == gelu and zl.attention == attention,
    'the original ops are back')
  local hooked = 0
  for _, m in model:named_modules() do
    if rawget(m, 'forward') ~= nil then hooked = hooked + 1 end
  end
  check_eq(hooked, 0, 'no module keeps a hooked forward')
  local macs = prof:get_total_macs()
  model(ids)
  check_eq(prof:get_total_macs(), macs, 'a forward after stop_profile is not counted')
  check_eq(macs, gpt_expected().macs)
  -- Two profiles cannot swap the ops at once.
  local other = FlopsProfiler.new(nn.Linear(2, 2))
  prof:start_profile()
  check_error(function() other:start_profile() end, 'another profile is running')
  model(ids)
  prof:reset_profile()
  model(ids)
  check_eq(prof:get_total_macs(), macs, 'reset_profile: a running profile counts again from zero')
  prof:end_profile()
  other:start_profile()
  other:end_profile()
end)

test('get_model_profile', function()
  local e = gpt_expected()
  local model = gpt(0)
  model:train()
  local flops, macs, params = profiling.get_model_profile(model, { input_shape = { B, t }, input_dtype = 'i64',
    print_profile = false, as_string = false })
  check_eq(macs, e.macs)
  check_eq(flops, e.flops)
  check_eq(params, e.params)
  check(model.training, 'the training mode is restored')
  local fs, ms, ps = profiling.get_model_profile(model, { args = { zl.zeros({ B, t }, 'i64') }, print_profile = false,
    warm_up = 0 })
  check_eq(ms, fmt('%g KMACs', math.floor(e.macs / 10 + 0.5) / 100), 'MACs as a string')
  check_eq(fs, fmt('%g K', math.floor(e.flops / 10 + 0.5) / 100), 'FLOPs as a string')
  check_eq(ps, fmt('%g K', math.floor(e.params / 10 + 0.5) / 100), 'params as a string')
  local path = TMP .. '/standalone/profile.txt'
  profiling.get_model_profile(model, { input_shape = { B, t }, input_dtype = 'i64', output_file = path,
    detailed = false })
  local f = assert(io.open(path))
  local text = f:read('a')
  f:close()
  check(text:find('Profile Summary at step 1:', 1, true) ~= nil, 'the summary in output_file')
  check(text:find('fwd MACs per GPU:%s+' .. ms:gsub('%.', '%%.')) ~= nil, 'the MACs line')
  check(text:find('Detailed Profile', 1, true) == nil, 'detailed = false leaves the tree out')
  check(text:find('bwd latency:', 1, true) == nil, 'standalone: no backward lines')
  check_error(function() profiling.get_model_profile(model, {}) end, 'give input_shape or a non-empty args list')
  check_error(function() profiling.get_model_profile(model, { input_shape = { 0 } }) end,
    'input_shape[1] must be a positive integer, got 0')
  check_error(function() profiling.get_model_profile(model, { input_shapes = { 2 } }) end,
    'get_model_profile: unknown option input_shapes')
  check_error(function() FlopsProfiler.new({}) end, 'FlopsProfiler.new: model must be a zlua.nn module')
  local prof = FlopsProfiler.new(model)
  check_error(function() prof:print_model_profile() end, 'print_model_profile: nothing profiled')
  prof:start_profile()
  check_error(function() prof:print_model_profile{ top_module = 2 } end,
    'print_model_profile: unknown option top_module')
  check_error(function() prof:print_model_profile{ module_depth = -2 } end, 'module_depth must be an integer >= -1')
  check_error(function() prof:print_model_profile{ output_file = '/proc/zlua/x' } end,
    "print_model_profile: cannot write output_file '/proc/zlua/x'")
  prof:end_profile()
end)

-- What `fn` writes to stdout (the engine's profile goes there).
local function stdout_of(fn)
  local out, stdout = io.tmpfile(), io.stdout
  io.stdout = out
  local ok, err = pcall(fn)
  io.stdout = stdout
  out:seek('set')
  local text = out:read('a')
  out:close()
  if not ok then error(err, 0) end
  return text
end

-- Trains the tiny GPT `steps` optimizer steps under a flops_profiler section;
-- returns its stdout and the engine.
local function train_gpt(section, steps, extra)
  local engine
  local text = stdout_of(function()
    local model = gpt(0)
    local c = { train_micro_batch_size_per_gpu = B, optimizer = { type = 'SGD', params = { lr = 0.01 } },
      flops_profiler = section }
    for k, v in pairs(extra or {}) do c[k] = v end
    engine = zl.initialize { model = model, config = c }
    for s = 1, steps * engine.gas do
      local rows = {}
      for b = 1, B do
        rows[b] = {}
        for i = 1, t do rows[b][i] = (s * 5 + b * 3 + i) % V end
      end
      local ids = zl.tensor(rows)
      local _, loss = engine(ids, ids)
      engine:backward(loss)
      engine:step()
    end
  end)
  return text, engine
end

local function count(text, plain)
  local n, at = 0, 1
  while true do
    local s, e = text:find(plain, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

-- The value printed after `label` in DeepSpeed's "label:   value" lines.
local function value_of(text, label)
  local s = text:find(label, 1, true)
  if not s then return nil end
  return text:sub(s):match('^[^\n]-:%s+([^\n]-)%s*\n')
end

test('engine_profile_at_step', function()
  local e = gpt_expected()
  local text, engine = train_gpt({ enabled = true, profile_step = 2 }, 4)
  check_eq(count(text, 'Profile Summary at step'), 1, 'one profile in four steps')
  -- Named by global_steps after the profiled step, as DeepSpeed names it.
  check(text:find('Profile Summary at step 3:', 1, true) ~= nil, 'at profile_step')
  check_eq(value_of(text, 'world size:'), '1')
  check_eq(value_of(text, 'data parallel size:'), '1')
  check_eq(value_of(text, 'batch size per GPU:'), tostring(B))
  check_eq(value_of(text, 'params per GPU:'), fmt('%g K', math.floor(e.params / 10 + 0.5) / 100))
  -- One forward of the profiled step: the steps before and after are not counted.
  check_eq(value_of(text, 'fwd MACs per GPU:'), fmt('%g KMACs', math.floor(e.macs / 10 + 0.5) / 100))
  for _, label in ipairs({ 'fwd latency:', 'bwd latency:', 'step latency:', 'iter latency:' }) do
    check((value_of(text, label) or ''):match('^[%d.]+ [mu]?s$') ~= nil, label .. ' ' .. tostring(value_of(text, label)))
  end
  -- The model's achieved FLOPS: fwd, bwd (2 x the forward's FLOPs), both, and the whole step.
  check((value_of(text, 'fwd FLOPS per GPU = fwd flops per GPU / fwd latency:') or ''):match('FLOPS$') ~= nil,
    'the forward FLOPS')
  check((value_of(text, 'bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency:') or ''):match('FLOPS$') ~= nil,
    'the backward FLOPS')
  check(value_of(text, 'fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency):') ~= nil, 'fwd+bwd')
  local total = value_of(text, 'FLOPS per GPU = 3 * fwd flops per GPU / iter latency:')
  check(total ~= nil and total:match('^[%d.]+ [KMGT]?FLOPS$') ~= nil, 'the total FLOPS line: ' .. tostring(total))
  check((value_of(text, 'samples/second:') or ''):match('^%d+%.%d+$') ~= nil, 'samples/second')
  -- detailed by default: the tree, with the figures before each module's own description.
  check(text:find('Detailed Profile per GPU', 1, true) ~= nil, 'the detailed profile')
  check(text:find(fmt('(qkv): Linear(%d = ', 3 * C * C + 3 * C), 1, true) ~= nil, 'a Linear\'s line')
  check(text:find(', 16 -> 48)', 1, true) ~= nil, 'its own description last')
  -- module_depth -1: every depth down to the innermost (GPT > ModuleList > block > attn > Linear).
  check(text:find('\ndepth 4:\n', 1, true) ~= nil and text:find('\ndepth 5:', 1, true) == nil, 'depths 0..4')
  check(text:find("    MACs        - {'GPT': ", 1, true) ~= nil, 'depth 0 is the model')
  -- After the profile the ops are the originals and the profiler holds nothing.
  check(engine.flops_profiler ~= nil and engine.flops_profiler.records == nil, 'the profile ended')
  check(rawget(engine.module.lm_head, 'forward') == nil, 'forwards unhooked')
end)

test('engine_options', function()
  local text = train_gpt({ enabled = true, profile_step = 1, module_depth = 2, top_modules = 2, detailed = false,
    recompute_fwd_factor = 1 }, 2)
  check(text:find('\ndepth 1:\n', 1, true) ~= nil and text:find('\ndepth 2:', 1, true) == nil,
    'module_depth 2: depths 0 and 1')
  check(text:find("params      - {'ModuleList': '", 1, true) ~= nil, 'depth 1 led by the blocks')
  check(text:find("    MACs        %- {'ModuleList': '[^']+', 'Linear': '[^']+'}") ~= nil, 'top_modules 2: two classes')
  check(text:find('Detailed Profile', 1, true) == nil, 'detailed false')
  check(text:find('bwd FLOPS per GPU = 3 * fwd flops per GPU / bwd latency:', 1, true) ~= nil,
    'recompute_fwd_factor 1: the backward counted as 3 forwards')
  check(text:find('FLOPS per GPU = 4 * fwd flops per GPU / iter latency:', 1, true) ~= nil, 'and the step as 4')

  local path = TMP .. '/made/here/flops.txt'
  text = train_gpt({ enabled = true, output_file = path }, 2)
  check(text:find('Flops Profiler', 1, true) == nil, 'output_file: nothing on stdout')
  local f = assert(io.open(path))
  local written = f:read('a')
  f:close()
  check(written:find('Profile Summary at step 2:', 1, true) ~= nil, 'the profile in output_file')
  check(written:find('FLOPS per GPU = 3 * fwd flops per GPU / iter latency:', 1, true) ~= nil, 'with the total FLOPS')
  check_error(function() train_gpt({ enabled = true, output_file = '/proc/zlua/flops.txt' }, 2) end,
    "flops_profiler: cannot write output_file '/proc/zlua/flops.txt'")

  -- Gradient accumulation: the profiled step's two micro-steps together.
  local e = gpt_expected()
  text = train_gpt({ enabled = true }, 2, { gradient_accumulation_steps = 2 })
  check_eq(value_of(text, 'gradient accumulation steps profiled:'), '2')
  check_eq(value_of(text, 'fwd MACs per GPU:'), fmt('%g KMACs', math.floor(2 * e.macs / 10 + 0.5) / 100))
  check_eq(count(text, 'Profile Summary at step'), 1)

  -- Off by default.
  text = train_gpt({ enabled = false }, 2)
  check(text:find('Flops Profiler', 1, true) == nil, 'enabled false: no profile')
end)

test('config_refusals', function()
  local function init(section)
    zl.initialize { model = nn.Linear(2, 1), config = { train_micro_batch_size_per_gpu = 1,
      optimizer = { type = 'SGD' }, flops_profiler = section } }
  end
  check_error(function() init({ enabled = true, profile_steps = 3 }) end,
    'unknown key flops_profiler.profile_steps (did you mean flops_profiler.profile_step?)')
  check_error(function() init({ enabled = true, top_modules = 0 }) end, 'flops_profiler.top_modules must be at least 1')
  check_error(function() init({ enabled = true, module_depth = -2 }) end,
    'flops_profiler.module_depth must be at least -1')
  check_error(function() init({ enabled = 'yes' }) end, 'flops_profiler.enabled must be true or false, got "yes"')
  check_error(function() init({ enabled = true, output_file = 3 }) end, 'flops_profiler.output_file must be a string')
  check_error(function() init({ enabled = true, recompute_fwd_factor = -1 }) end,
    'flops_profiler.recompute_fwd_factor must be at least 0')
end)

zl.core.remove_tree(TMP)
H.done()
