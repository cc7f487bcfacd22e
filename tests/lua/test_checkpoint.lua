-- Activation checkpointing: zl.checkpoint and the GPT's
-- gradient_checkpointing_enable give bit-identical gradients, dropout
-- included; parameters inside a checkpoint get their gradients when no input
-- requires grad (LoRA over a frozen embedding); cpu_checkpointing moves the
-- saved inputs off the activations; the error paths.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local lora = require 'zlua.lora'
local ac = require 'zlua.activation_checkpointing'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local idx = zl.tensor({ { 1, 2, 3, 4, 5, 6, 7 }, { 8, 9, 10, 11, 12, 0, 1 } }, 'i64')

-- Loss, every gradient by name and the generator's offset after one
-- forward and backward of a GPT built by make().
local function grads_of(make, checkpointing)
  zl.manual_seed(5)
  local model = make()
  if checkpointing then model:gradient_checkpointing_enable() end
  zl.manual_seed(77)
  local _, loss = model(idx, idx)
  loss:backward()
  local g = {}
  for name, p in model:named_parameters() do g[name] = p.grad end
  return loss:item(), g, select(2, zl.core.generator_state())
end

local function same_grads(make, what)
  local l0, g0, off0 = grads_of(make, false)
  local l1, g1, off1 = grads_of(make, true)
  check_eq(l1, l0, what .. ': the same loss')
  check_eq(off1, off0, what .. ': the generator ends where it would without checkpointing')
  local n = 0
  for name, g in pairs(g0) do
    n = n + 1
    check(g1[name] ~= nil, what .. ': ' .. name .. ' has a gradient')
    if g1[name] then check_close(g1[name], g, 0, what .. ': ' .. name .. ' bit for bit') end
  end
  for name in pairs(g1) do check(g0[name] ~= nil, what .. ': no extra gradient on ' .. name) end
  check(n > 0, what .. ': gradients compared')
end

test('GPT: bit-identical gradients, without and with dropout', function()
  for _, p in ipairs({ 0, 0.3 }) do
    same_grads(function()
      return nn.GPT{ vocab_size = 13, block_size = 8, n_layer = 3, n_head = 2, n_embd = 16, dropout = p }
    end, 'dropout ' .. p)
  end
end)

test('GPT with LoRA: the blocks\' A and B get gradients though no block input requires grad', function()
  same_grads(function()
    local m = nn.GPT{ vocab_size = 13, block_size = 8, n_layer = 2, n_head = 2, n_embd = 16, dropout = 0.1 }
    lora.convert_linear_layer_to_lora(m, 'blocks', 4, 8, 0.1)
    for _, l in ipairs(m:modules()) do
      if nn.Module.is_instance(l, nn.LinearLoRA) then zl.no_grad(function() l.lora_B:normal_(0, 0.3) end) end
    end
    return lora.only_optimize_lora_parameters(m)
  end, 'LoRA')
end)

test('zl.checkpoint on a function: several tensors and plain arguments', function()
  zl.manual_seed(1)
  local w = zl.randn(4, 4):requires_grad(true)
  local a0, b0 = zl.randn(3, 4), zl.randn(3, 4)
  local function f(a, scale, b) return zl.dropout((a:matmul(w) * b):tanh() * scale, 0.5, true) end
  local function run(ck)
    w.grad = nil
    local a, b = a0:clone():requires_grad(true), b0:clone()
    zl.manual_seed(9)
    local y = ck and zl.checkpoint(f, a, 2, b) or f(a, 2, b)
    check_eq(y:requires_grad(), true, 'the output requires grad')
    y:sum():backward()
    return a.grad, w.grad, b.grad
  end
  local ga, gw, gb = run(false)
  local ca, cw, cb = run(true)
  check_close(ca, ga, 0, 'input gradient bit for bit')
  check_close(cw, gw, 0, 'parameter gradient bit for bit')
  check(gb == nil and cb == nil, 'no gradient for an input that does not require grad')
  local y = zl.no_grad(zl.checkpoint, f, a0, 1, b0)
  check(not y:requires_grad(), 'under no_grad it is a plain call')
end)

test('cpu_checkpointing moves the saved inputs off the activations', function()
  local function peak(cpu)
    ac.configure({ cpu_checkpointing = cpu })
    zl.manual_seed(2)
    local m = nn.GPT{ vocab_size = 13, block_size = 64, n_layer = 6, n_head = 2, n_embd = 64 }
    m:gradient_checkpointing_enable()
    local ids = {}
    for t = 1, 64 do ids[t] = t % 13 end
    local x = zl.tensor({ ids }, 'i64')
    collectgarbage()
    local before = zl.memory()
    zl.reset_peak_memory()
    local _, loss = m(x, x)
    local after = zl.memory()
    loss:backward()
    ac.configure({})
    return after.activations.current - before.activations.current, after.other.current - before.other.current
  end
  local act0, other0 = peak(false)
  local act1, other1 = peak(true)
  local saved = 6 * 64 * 64 * 4   -- one [1, 64, 64] f32 input per block
  check(other1 - other0 >= saved, string.format('other holds the %d saved bytes (%d more)', saved, other1 - other0))
  check(act0 - act1 >= saved, string.format('activations hold %d bytes less (%d)', saved, act0 - act1))
end)

test('errors', function()
  check_error(function() zl.checkpoint(3, zl.ones(2)) end, 'checkpoint: fn must be a function or a module, got number')
  check_error(function() zl.checkpoint(function(x) return x, x end, zl.ones(2)) end,
              'checkpoint: fn must return one tensor, got 2 values')
  check_error(function() zl.checkpoint(function() return 1 end) end, 'got 1 values (the first a number)')
  local x = zl.ones(2):requires_grad(true)
  local y = zl.checkpoint(function(t) return (t * 2):sum() end, x)
  local flip = false
  zl.core.add_grad_ready_hook(x, function() flip = true end)
  y:backward()
  check(flip and x.grad ~= nil, 'the input\'s gradient arrives through the outer backward')
end)

H.done()
