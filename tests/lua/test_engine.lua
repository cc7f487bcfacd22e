-- Tests zlua.initialize and the engine: DeepSpeed's step semantics (loss divided
-- by the accumulation steps, the optimizer and scheduler stepped only at the
-- boundary), clipping by the global norm, the optimizer and scheduler from the
-- config or from the script, bf16 and fp16 (with injected overflows), the seeds'
-- configs training the digits MLP, and checkpoints (bit-exact resume, a damaged
-- file named, the previous checkpoint kept by an interrupted save).

local zl = require 'zlua'
local nn = require 'zlua.nn'
local optim = require 'zlua.optim'
local data = require 'zlua.data'
local zero = require 'zlua.zero'
local H = require 'harness'
local test, check, check_close, check_error = H.test, H.check, H.check_close, H.check_error

local SRC = os.getenv('ZLUA_SOURCE_DIR') or '../..'
-- A build without libaio refuses NVMe offload: those cases check the refusal instead.
local NO_AIO = zl.core.aio_unavailable()
local TMP = os.tmpname()
os.remove(TMP)
zl.core.mkdirs(TMP)

-- A small regression problem: y = x W + noise, fixed by the seed.
local function problem(seed)
  zl.manual_seed(seed)
  local x, w = zl.randn(64, 8), zl.randn(8, 1)
  local y = x:matmul(w) + zl.randn(64, 1) * 0.1
  return x, y
end

local function model(seed)
  zl.manual_seed(seed)
  return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
end

local function cfg(extra)
  local c = { train_micro_batch_size_per_gpu = 16, gradient_accumulation_steps = 1,
    optimizer = { type = 'AdamW', params = { lr = 0.01, weight_decay = 0.01 } } }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

local function batches(x, y, mb)
  local out = {}
  for i = 1, x:size(1) // mb do
    out[i] = { x:narrow(1, (i - 1) * mb + 1, mb), y:narrow(1, (i - 1) * mb + 1, mb) }
  end
  return out
end

local function flat_params(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do
    for _, v in ipairs(H.flat(p:float())) do out[#out + 1] = v end
  end
  return out
end

test('accumulation_matches_one_big_batch', function()
  -- 4 micro-batches of 16 with GAS 4 give the same update as one batch of 64.
  local x, y = problem(1)
  local m1, m2 = model(2), model(2)
  local e1 = zl.initialize { model = m1, config = cfg { train_micro_batch_size_per_gpu = 16, gradient_accumulation_steps = 4 } }
  local e2 = zl.initialize { model = m2, config = cfg { train_micro_batch_size_per_gpu = 64 } }
  check(e1.train_batch_size == 64 and e1.gas == 4, 'the batch triple derived')
  for step = 1, 3 do
    for i, b in ipairs(batches(x, y, 16)) do
      check(e1:is_gradient_accumulation_boundary() == (i == 4), 'boundary only at the 4th micro-batch')
      local loss = e1:backward(zl.mse_loss(e1(b[1]), b[2]))
      check_close(loss:item() * 4, zl.mse_loss(m1(b[1]), b[2]):item(), 1e-5, 'backward returns loss / GAS')
      e1:step()
    end
    e2:backward(zl.mse_loss(e2(x), y))
    e2:step()
    check(e1.global_steps == step and e1.micro_steps == 4 * step and e1.global_samples == 64 * step, 'counters')
  end
  check_close(flat_params(m1), flat_params(m2), 1e-5, 'GAS 4 x 16 equals one batch of 64')
end)

test('progress_line_total_and_time_left', function()
  local e = zl.initialize { model = model(4), config = cfg { scheduler = { type = 'WarmupDecayLR',
    params = { total_num_steps = 40, warmup_num_steps = 4 } } } }
  local x, y = problem(4)
  local function plain(s) return (s:gsub('[\r\27]', ''):gsub('%[K', '')) end
  check(plain(e.report:progress_line(1.5, 10)):find('^step 0/40  loss 1.5  lr ') ~= nil, 'the total from the scheduler')
  for _ = 1, 2 do
    e:backward(zl.mse_loss(e(x), y))
    e:step()
  end
  local line = plain(e.report:progress_line(1.5, 10))
  check(line:find('^step 2/40 ') and line:find('  eta %d+s$'), 'step 2/40 with the time left: ' .. line)
  e:set_progress(false, 100)
  check(plain(e.report:progress_line(1.5, 10)):find('^step 2/100 ') ~= nil, 'a total the script gives')
  -- Not on a terminal (the test's output is a file or a pipe), nobody watches:
  -- asking for the line does not draw it, and a script keeps its own lines.
  e:set_progress(true)
  check(e:shows_progress() == false and not e.report.progress, 'no progress line off a terminal')
end)

test('clipping_by_global_norm', function()
  local x, y = problem(3)
  local m1, m2 = model(4), model(4)
  local e = zl.initialize { model = m1, config = cfg { gradient_clipping = 0.05,
    optimizer = { type = 'SGD', params = { lr = 0.1 } } } }
  local opt = optim.SGD(m2:parameters(), { lr = 0.1 })
  e:backward(zl.mse_loss(e(x), y))
  e:step()
  -- the same by hand: global norm, coefficient 0.05 / (norm + 1e-6), SGD
  local loss = zl.mse_loss(m2(x), y)
  loss:backward()
  local sq = 0
  for _, p in ipairs(m2:parameters()) do sq = sq + (p.grad * p.grad):sum():item() end
  local norm = math.sqrt(sq)
  check(norm > 0.05, 'the gradient is large enough to be clipped')
  check_close(e:get_global_grad_norm(), norm, 1e-5, 'get_global_grad_norm is the norm before clipping')
  opt:step { grad_scale = 0.05 / (norm + 1e-6) }
  check_close(flat_params(m1), flat_params(m2), 1e-6, 'clipped update')
end)

test('scheduler_steps_once_per_applied_step', function()
  local x, y = problem(5)
  local m = model(6)
  local e, opt, _, sched = zl.initialize { model = m, config = cfg {
    gradient_accumulation_steps = 2,
    scheduler = { type = 'WarmupLR', params = { warmup_min_lr = 0, warmup_max_lr = 0.01, warmup_num_steps = 10,
      warmup_type = 'linear' } } } }
  check(sched ~= nil and opt == e.optimizer, 'initialize returns the optimizer and scheduler')
  local lrs = {}
  for _, b in ipairs(batches(x, y, 16)) do
    e:backward(zl.mse_loss(e(b[1]), b[2]))
    e:step()
    lrs[#lrs + 1] = e:get_lr()[1]
  end
  -- micro-steps 1..4, boundaries at 2 and 4: t = 0 after the first applied step, 1 after the second
  check_close(lrs, { 0, 0, 0, 0.001 }, 1e-12, 'lr after each micro-step (DeepSpeed: first two applied steps at min lr)')
  check(sched.last_batch_iteration == 1, 'two scheduler steps for two applied optimizer steps')
end)

test('client_optimizer_and_scheduler_override_config', function()
  local m = model(7)
  local mine = optim.SGD(m:parameters(), { lr = 0.5 })
  local e, opt = zl.initialize { model = m, optimizer = mine, config = cfg() }
  check(opt == mine, 'the script optimizer is used instead of the config one')
  local e2, opt2, _, s2 = zl.initialize { model = model(7), config = cfg(),
    optimizer = function(params) return optim.Lamb(params, { lr = 0.02 }) end,
    lr_scheduler = function(o) return require('zlua.lr').WarmupLR(o, { warmup_num_steps = 5 }) end }
  check(opt2.__name == 'Lamb' and s2 ~= nil and e2.lr_scheduler == s2, 'callables build the optimizer and scheduler')
  check_error(function() zl.initialize { model = model(7), config = cfg(), optimiser = mine } end,
    'zlua.initialize: unknown argument "optimiser"')
  do
    -- dist_init_required has no effect here, and says so in one line.
    local notices, said = require 'zlua.engine.notices', {}
    local write = notices.write
    notices.write = function(line) said[#said + 1] = line end
    local ok = pcall(zl.initialize, { model = model(7), config = cfg(), dist_init_required = false })
    notices.write = write
    check(ok and #said == 1 and said[1]:find('dist_init_required has no effect here', 1, true) ~= nil,
      'dist_init_required gets its note')
  end
  check_error(function() zl.initialize { model = model(7) } end,
    'zlua.initialize: no config: pass config= (a file or a table) or --deepspeed_config FILE')
  check_error(function() zl.initialize { model = model(7), config = cfg { zero_optimization = { stage = 4 } } } end,
    'config: zero_optimization.stage must be in 0..3, got 4')
  check_error(function() zl.initialize { model = model(7), config = cfg {
    zero_optimization = { stage = 3, offload_param = { device = 'nvme', nvme_path = '/proc/version/x' } } } } end,
    NO_AIO and 'zero_optimization.offload_param.device = "nvme": ' .. NO_AIO
      or 'offload_param: cannot prepare the swap folder /proc/version/x/zlua_swap/params/rank0')
  local e3 = zl.initialize { model = model(7), config = { train_batch_size = 4 } }
  check_error(function() e3:step() end, 'there is no optimizer')
end)

local function train(config, steps, seed, m)
  local x, y = problem(seed)
  m = m or model(seed + 1)
  local e = zl.initialize { model = m, config = config }
  local losses = {}
  for s = 1, steps do
    local b = batches(x, y, 16)[(s - 1) % 4 + 1]
    local loss = zl.mse_loss(e(b[1]), b[2])
    losses[s] = loss:float():item()
    e:backward(loss)
    e:step()
  end
  return losses, e, m
end

test('bf16_follows_f32', function()
  local f32 = train(cfg(), 60, 8)
  local bf16, e, m = train(cfg { bf16 = { enabled = true } }, 60, 8)
  check(m:parameters()[1]:dtype() == 'bf16', 'working weights are bf16')
  check(e:get_full_fp32_param(m:parameters()[1]):dtype() == 'f32', 'the optimizer steps f32 masters')
  check(math.abs(bf16[60] - f32[60]) <= 0.05 * f32[60] + 0.01, string.format('bf16 final loss %.4f vs f32 %.4f', bf16[60], f32[60]))
  check(bf16[60] < bf16[1] * 0.5, 'bf16 training lowers the loss')
end)

-- Without bf16 dot products (ZLUA_BF16_GEMM=f32 asks for that path: CTest
-- runs this test so as lua.test_engine_bf16_widened) a bf16 model keeps its
-- weights and gradients in bf16 and its activations in f32: the embedding
-- gives f32 and float inputs are not cast. With them, activations are bf16.
test('bf16_activations_follow_the_cpu', function()
  zl.manual_seed(12)
  local m = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 4))
  local e = zl.initialize { model = m, config = cfg { bf16 = { enabled = true } } }
  local dots = zl.core.bf16_dot_products()
  local ids = zl.tensor { { 1, 2, 3 }, { 4, 5, 6 } }:to('i64')
  local y = e(ids)
  check(y:dtype() == (dots and 'bf16' or 'f32'), 'activations are ' .. (dots and 'bf16' or 'f32') .. ', got '
    .. y:dtype())
  local before = flat_params(m)
  e:backward(y:float():pow(2):mean())
  e:step()
  for _, p in ipairs(m:parameters()) do check(p:dtype() == 'bf16', 'weights stay bf16') end
  local after, moved = flat_params(m), 0
  for i = 1, #after do if after[i] ~= before[i] then moved = moved + 1 end end
  check(moved > #after // 2, 'the step moved the weights (' .. moved .. ' of ' .. #after .. ')')
  local lin = nn.Linear(8, 4)
  local e2 = zl.initialize { model = lin, config = cfg { bf16 = { enabled = true } } }
  check(e2(zl.randn(2, 8)):dtype() == (dots and 'bf16' or 'f32'), 'float inputs are cast only with dot products')
end)

test('fp16_dynamic_scale_and_skipped_steps', function()
  local m = model(9)
  local e, _, _, sched = zl.initialize { model = m, config = cfg { fp16 = { enabled = true, initial_scale_power = 8,
    hysteresis = 1, loss_scale_window = 2 },
    scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 10 } } } }
  local x, y = problem(9)
  check(e:loss_scale() == 256, 'initial scale 2^8')
  -- an overflow: an infinite loss skips the step, halves the scale, leaves the scheduler
  local before = flat_params(m)
  local loss = zl.mse_loss(e(x), y) * math.huge
  e:backward(loss)
  -- DeepSpeed's line for the skipped step, on stdout.
  local said, stdout = {}, io.stdout
  io.stdout = { write = function(_, ...) for _, v in ipairs { ... } do said[#said + 1] = v end end }
  local ok, err = pcall(e.step, e)
  io.stdout = stdout
  if not ok then error(err, 0) end
  check(table.concat(said) == '[Rank 0] OVERFLOW! Skipping step. Attempted loss scale: 256, reducing to 128\n',
    'the skipped step is said: ' .. table.concat(said))
  check(e.skipped_steps == 1 and e.global_steps == 1, 'the step is skipped but counted')
  check(e:loss_scale() == 128, 'the scale halves on an overflow (hysteresis 1)')
  check(sched.last_batch_iteration == -1, 'the scheduler does not step on a skipped step')
  check_close(flat_params(m), before, 0, 'weights unchanged by a skipped step')
  for _ = 1, 2 do
    e:backward(zl.mse_loss(e(x), y))
    e:step()
  end
  check(e:loss_scale() == 256, 'two clean steps (loss_scale_window 2) double it')
  check(sched.last_batch_iteration == 1, 'two applied steps, two scheduler steps')
  check(m:parameters()[1]:dtype() == 'f16', 'working weights are f16')
end)

test('seed_configs_train_digits', function()
  local X = zl.read_csv(SRC .. '/examples/digits/digits.csv.gz')
  local n = 256
  local x = (X:narrow(2, 1, 64):narrow(1, 1, n) / 16):contiguous()
  local y = X:narrow(2, 65, 1):narrow(1, 1, n):reshape(n):to('i64')
  local ds = data.TensorDataset(x, y)
  local args = { learning_rate = 3e-3, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8, weight_decay = 0.0,
    per_device_train_batch_size = 16, gradient_accumulation_steps = 1, max_grad_norm = 1.0, warmup_steps = 5,
    max_steps = 40, hidden_size = 64, bf16 = false, fp16 = false, nvme_path = TMP .. '/nvme' }
  local dir = SRC .. '/tests/lua/configs'
  local p = io.popen('ls ' .. dir .. '/seed_*.json')
  local names = {}
  for f in p:lines() do names[#names + 1] = f end
  p:close()
  check(#names >= 10, 'the seed configs are there')
  for _, path in ipairs(names) do
    zl.manual_seed(1)
    local m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    local ok, err = pcall(function()
      -- A config without an optimizer section trains with the script's, as the seeds' scripts do.
      local loaded = require('zlua.config').load(path, { args = args })
      local own = not loaded.optimizer
      local z = loaded.zero_optimization
      if NO_AIO and z and (z.offload_optimizer.device == 'nvme' or z.offload_param.device == 'nvme') then
        check_error(function()
          local e, _, loader = zl.initialize { model = m, config = path, args = args, training_data = ds,
            optimizer = own and function(params) return optim.AdamW(params, { lr = 3e-3 }) end or nil }
          for xb, yb in loader() do
            e:backward(zl.cross_entropy(e(xb), yb))
            e:step()
          end
        end, '.device = "nvme": ' .. NO_AIO, path)
        return
      end
      local e, _, loader = zl.initialize { model = m, config = path, args = args, training_data = ds,
        optimizer = own and function(params) return optim.AdamW(params, { lr = 3e-3 }) end or nil }
      local means = {}
      for pass = 1, 5 do
        local sum, n = 0, 0
        for xb, yb in loader() do
          local loss = e:backward(zl.cross_entropy(e(xb), yb))
          e:step()
          sum, n = sum + loss:float():item(), n + 1
        end
        means[pass] = sum / n
      end
      check(means[5] < means[1], string.format('%s: mean loss falls over 5 passes (%.4f -> %.4f)', path, means[1], means[5]))
    end)
    check(ok, path .. ': ' .. tostring(err))
  end
end)

test('checkpoint_resume_is_bit_identical', function()
  for _, extra in ipairs({ {}, { bf16 = { enabled = true } }, { fp16 = { enabled = true, initial_scale_power = 10 } } }) do
    local c = cfg(extra)
    c.scheduler = { type = 'WarmupLR', params = { warmup_num_steps = 8 } }
    local x, y = problem(12)
    local function run(from, to, e)
      local out = {}
      for s = from, to do
        local b = batches(x, y, 16)[(s - 1) % 4 + 1]
        local loss = zl.mse_loss(e(b[1]), b[2])
        out[#out + 1] = string.format('%.9g', loss:float():item())
        e:backward(loss)
        e:step()
      end
      return out
    end
    local dir = TMP .. '/ckpt'
    zl.core.remove_tree(dir)
    local e1 = zl.initialize { model = model(13), config = c }
    local a = run(1, 10, e1)
    e1:save_checkpoint(dir, nil, { note = 'hi', epoch = 3 })
    local rest = run(11, 20, e1)
    local e2 = zl.initialize { model = model(99), config = c }
    local path, client = e2:load_checkpoint(dir)
    check(path == dir .. '/global_step10' and client.note == 'hi' and client.epoch == 3, 'tag, path and client_state')
    check(e2.global_steps == 10 and e2.global_samples == 160, 'counters restored')
    local again = run(11, 20, e2)
    check(table.concat(again, ' ') == table.concat(rest, ' '), 'steps 11-20 bit-identical after resume ('
      .. (extra.bf16 and 'bf16' or extra.fp16 and 'fp16' or 'f32') .. ')')
    check(#a == 10, 'ran')
  end
end)

test('checkpoint_faults', function()
  local dir = TMP .. '/faults'
  zl.core.remove_tree(dir)
  local e = zl.initialize { model = model(14), config = cfg() }
  local x, y = problem(14)
  e:backward(zl.mse_loss(e(x), y))
  e:step()
  e:save_checkpoint(dir, 'good')
  -- a damaged file is named, and nothing is loaded
  local f = io.open(dir .. '/good/model.safetensors', 'r+b')
  f:seek('set', 200)
  f:write('\255\255\255\255')
  f:close()
  local e2 = zl.initialize { model = model(15), config = cfg() }
  check_error(function() e2:load_checkpoint(dir) end, dir .. '/good/model.safetensors is damaged')
  -- a truncated file
  e:save_checkpoint(dir, 'cut')
  local p = dir .. '/cut/optim_rank0.safetensors'
  local whole = io.open(p, 'rb'):read('a')
  local g = io.open(p, 'wb')
  g:write(whole:sub(1, #whole - 10))
  g:close()
  check_error(function() e2:load_checkpoint(dir, 'cut') end, 'optim_rank0.safetensors is ' .. (#whole - 10) .. ' bytes')
  -- a save killed in the middle leaves the previous checkpoint loadable
  e:save_checkpoint(dir, 'ok', { n = -1 })
  local zlua = arg[-1] or 'zlua'
  local script = TMP .. '/killed_save.lua'
  local s = io.open(script, 'w')
  s:write(string.format([[
    local zl = require 'zlua'
    local nn = require 'zlua.nn'
    local m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    local e = zl.initialize { model = m, config = { train_batch_size = 16, optimizer = { type = 'AdamW' } } }
    local n = 0
    while true do e:save_checkpoint(%q, 'ok', { n = n }); n = n + 1 end
  ]], dir))
  s:close()
  local h = io.popen(string.format('%s %s & pid=$!; sleep 1.5; kill -9 $pid; wait $pid 2>/dev/null; echo killed', zlua, script))
  local out = h:read('a')
  h:close()
  check(out:find('killed') ~= nil, 'the saving process was killed')
  local e3 = zl.initialize { model = model(14), config = cfg() }
  local path, client = e3:load_checkpoint(dir, nil)
  check(path == dir .. '/ok' and type(client.n) == 'number', 'latest still names a complete checkpoint, which loads')
end)

test('checkpoint_refusals_and_checks', function()
  local dir = TMP .. '/checks'
  zl.core.remove_tree(dir)
  local x, y = problem(18)
  local e = zl.initialize { model = model(18), config = cfg { gradient_accumulation_steps = 2 } }
  e:backward(zl.mse_loss(e(x), y))
  e:step()
  check_error(function() e:save_checkpoint(dir) end, '1 micro-steps into an accumulation window of 2')
  e:backward(zl.mse_loss(e(x), y))
  e:step()
  check_error(function() e:save_checkpoint(dir, 't', { best = 0 / 0 }) end, 'client_state.best is')
  check_error(function() e:save_checkpoint(dir, 't', { [1] = 1, a = 2 }) end, 'mixes array entries and string keys')
  check(not zl.core.exists(dir .. '/t') and not zl.core.exists(string.format('%s/.t.tmp-%d', dir, zl.core.getpid())),
    'a refused save leaves nothing behind')
  e:save_checkpoint(dir, 't')
  -- another optimizer, another parameter order, a tampered engine.json
  local other = zl.initialize { model = model(18), config = cfg { gradient_accumulation_steps = 2,
    optimizer = { type = 'SGD', params = { lr = 0.1 } } } }
  check_error(function() other:load_checkpoint(dir, 't') end, 'holds the state of a AdamW optimizer; this engine has SGD')
  local Swapped = nn.Module:extend('Swapped')
  function Swapped:__init() self['2'] = nn.Linear(16, 1); self['1'] = nn.Linear(8, 16) end
  local sw = zl.initialize { model = Swapped(), config = cfg { gradient_accumulation_steps = 2 } }
  check_error(function() sw:load_checkpoint(dir, 't', { load_module_strict = false }) end, 'defines its parameters in another order')
  local j = dir .. '/t/engine.json'
  local text = io.open(j, 'rb'):read('a')
  local f = io.open(j, 'wb')
  f:write((text:gsub('"global_steps": 1', '"global_steps": 7')))
  f:close()
  check_error(function() e:load_checkpoint(dir, 't') end, 'engine.json is damaged')
  -- metamethods called by hand on something else do not crash
  local ok = pcall(getmetatable(zl.zeros(1)).__gc, {})
  check(ok, 'a tensor __gc on a plain table is harmless')
  -- load_module_only under bf16: the masters follow the loaded weights
  local b = zl.initialize { model = model(19), config = cfg { bf16 = { enabled = true } } }
  b:backward(zl.mse_loss(b(x), y))
  b:step()
  b:save_checkpoint(dir, 'bf')
  local m2 = model(20)
  local b2 = zl.initialize { model = m2, config = cfg { bf16 = { enabled = true }, optimizer = { type = 'SGD', params = { lr = 0 } } } }
  b2:load_checkpoint(dir, 'bf', { load_module_only = true })
  local loaded = flat_params(m2)
  b2:backward(zl.mse_loss(b2(x), y))
  b2:step()
  check_close(flat_params(m2), loaded, 0, 'a step at lr 0 after load_module_only keeps the loaded weights')
end)

test('monitors_and_step_log', function()
  local dir = TMP .. '/runs'
  zl.core.remove_tree(dir)
  local e = zl.initialize { model = model(17), config = cfg {
    csv_monitor = { enabled = true, output_path = dir, job_name = 'job' },
    fp16 = { enabled = true, initial_scale_power = 4 } } }
  local x, y = problem(17)
  for _ = 1, 3 do
    e:backward(zl.mse_loss(e(x), y))
    e:step()
  end
  e:destroy()
  local function rows(name)
    local out = {}
    for line in io.lines(dir .. '/job/' .. name .. '.csv') do out[#out + 1] = line:gsub('\r$', '') end
    return out
  end
  local loss = rows('Train_Samples_train_loss')
  check(#loss == 4 and loss[1] == 'step,train_loss' and loss[4]:find('^48,') ~= nil,
    'train_loss by samples: ' .. table.concat(loss, ' | '))
  local scale = rows('Train_Samples_loss_scale')
  check(scale[2] == '16,16.0', 'loss_scale logged under fp16: ' .. tostring(scale[2]))
  check(#rows('Train_Samples_lr') == 4, 'lr logged every step')
end)

test('zero_to_fp32_and_16bit_model', function()
  local dir = TMP .. '/consolidate'
  zl.core.remove_tree(dir)
  local m = model(16)
  local e = zl.initialize { model = m, config = cfg { bf16 = { enabled = true } } }
  local x, y = problem(16)
  for _ = 1, 3 do
    e:backward(zl.mse_loss(e(x), y))
    e:step()
  end
  e:save_checkpoint(dir)
  local out = TMP .. '/fp32.safetensors'
  local zlua = arg[-1] or 'zlua'
  local h = io.popen(string.format('%s %s/scripts/zero_to_fp32.lua %s %s 2>&1', zlua, SRC, dir, out))
  local msg = h:read('a')
  local ok = h:close()
  check(ok and msg:find('4 tensors', 1, true) ~= nil, 'zero_to_fp32 ran: ' .. msg)
  local w = zl.load_safetensors(out)
  local names = {}
  for name, p in m:named_parameters() do
    names[#names + 1] = name
    local master = e:get_full_fp32_param(p)
    check(w[name] ~= nil and w[name]:dtype() == 'f32', name .. ' is consolidated as f32')
    check(w[name] and table.concat(H.flat(w[name]), ',') == table.concat(H.flat(master), ','),
      name .. ' equals the f32 master exactly')
  end
  check(#names == 4, 'four parameters')
  local p16 = e:save_16bit_model(TMP .. '/export')
  local w16 = zl.load_safetensors(p16)
  check(w16['1.weight']:dtype() == 'bf16', 'save_16bit_model keeps the working dtype')
end)

test('frozen_parameters_and_buffers', function()
  -- A frozen weight is never stepped (weight decay included); buffers and the
  -- frozen weight come back from a checkpoint with the trained masters.
  for _, stage in ipairs({ 0, 2, 3 }) do
    local dir = TMP .. '/frozen' .. stage
    zl.core.remove_tree(dir)
    local m = model(21)
    m[1].weight:requires_grad(false)
    m[1]:register_buffer('count', zl.zeros(1))
    local frozen = m[1].weight:clone()
    local e = zl.initialize { model = m, config = cfg { zero_optimization = { stage = stage } } }
    local x, y = problem(21)
    for _ = 1, 3 do
      e:backward(zl.mse_loss(e(x), y))
      e:step()
      zl.no_grad(function() m[1].count:add_(zl.ones(1)) end)
    end
    -- At stage 3 the frozen weight stays partitioned: read and written whole
    -- under GatheredParameters, as in DeepSpeed.
    local function weight() return zero.GatheredParameters(m[1].weight, function() return m[1].weight:clone() end) end
    check(stage < 3 or m[1].weight:numel() == 0, 'stage 3: the frozen weight is partitioned')
    check(table.concat(H.flat(weight()), ',') == table.concat(H.flat(frozen), ','),
      'stage ' .. stage .. ': the frozen weight is unchanged')
    e:save_checkpoint(dir)
    zl.no_grad(function() m[1].count:fill_(0) end)
    zero.GatheredParameters(m[1].weight, function() zl.no_grad(function() m[1].weight:fill_(0) end) end, 0)
    check(weight():abs():sum():item() == 0, 'stage ' .. stage .. ': the frozen weight is zeroed')
    e:load_checkpoint(dir)
    check(m[1].count:item() == 3, 'stage ' .. stage .. ': the buffer is restored')
    check(table.concat(H.flat(weight()), ',') == table.concat(H.flat(frozen), ','),
      'stage ' .. stage .. ': the frozen weight is restored')
  end
  local m = model(22)
  check_error(function()
    zl.initialize { model = m, config = cfg(), optimizer = function()
      return require('zlua.optim').AdamW { { params = { m[1].weight } }, { params = { m[1].weight, m[3].weight } } }
    end }
  end, 'appears in more than one place')
end)

zl.core.remove_tree(TMP)
H.done()
