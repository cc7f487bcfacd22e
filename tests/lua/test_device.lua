-- Devices from Lua without a GPU: asking for 'cuda' in any of the ways a
-- PyTorch user would gives the reason there is none (never a crash), the
-- CPU forms work, and a bad device name is named. CUDA_VISIBLE_DEVICES
-- cannot be emptied from inside, so on a GPU machine the no-device checks
-- give way to a round trip.
local zl = require 'zlua'
local H = require 'harness'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local n, why = zl.cuda.device_count()

test('cpu forms', function()
  local x = zl.randn(3, 4)
  check_eq(x:device(), 'cpu')
  check(x:cpu() == x, 'cpu() of a host tensor is itself')
  check(x:to('cpu') == x, "to('cpu') of a host tensor is itself")
  check_eq(x:to('cpu', 'bf16'):dtype(), 'bf16')
  check_eq(x:to{ dtype = 'f16' }:dtype(), 'f16')
  check_eq(zl.zeros(2, 3, { device = 'cpu' }):device(), 'cpu')
  check_eq(zl.zeros(2, 3, { dtype = 'bf16' }):dtype(), 'bf16')
  check_eq(zl.full({ 2 }, 1.5, { device = 'cpu', dtype = 'f16' }):dtype(), 'f16')
  check_error(function() return x:to('cuda:x') end, "unknown dtype 'cuda:x'")
  check_error(function() return x:to() end, 'to: expected a dtype')
end)

test('modules convert in place, tied weights stay tied', function()
  local nn = require 'zlua.nn'
  local m = nn.GPT{ vocab_size = 11, block_size = 4, n_layer = 1, n_head = 2, n_embd = 8 }
  local w = m.wte.weight
  local idx = zl.tensor({ { 1, 2, 3 } }, 'i64')
  local _, loss = m(idx, idx)
  loss:backward()
  check(w.grad ~= nil, 'a gradient before the move')
  check(m:to('cpu') == m, 'to returns the module')
  check(w.grad ~= nil, 'to(cpu) on the host keeps the gradient')
  m:to('bf16')
  check_eq(w:dtype(), 'bf16')
  check(m.lm_head.weight == w and m.wte.weight == w, 'the tied weight is one tensor still')
  check_eq(m.blocks[1].ln1.weight:dtype(), 'bf16')
  m:to{ dtype = 'f32' }
  check_eq(w:dtype(), 'f32')
  check(w.grad == nil, 'a gradient of another dtype is dropped')
  check_error(function() return m:to(3) end, "GPT.to: expected a device")
  check_error(function() return m:to() end, "GPT.to: expected a device")
  check_eq(zl.arange(3, { device = 'cpu' }):device(), 'cpu')
  check_eq(zl.arange(1, 7, 2, { dtype = 'f32' }):totable()[3], 5)
end)

if n == 0 then
  test('no CUDA device: every way of asking says why', function()
    check(why:find('^no CUDA device: '), why)
    check_eq(zl.cuda.is_available(), false)
    local x = zl.randn(3, 4)
    for _, f in ipairs({
      function() return x:to('cuda') end,
      function() return x:cuda() end,
      function() return x:to('cuda:1', 'bf16') end,
      function() return zl.zeros(2, 3, { device = 'cuda' }) end,
      function() return zl.randn(2, { device = 'cuda:0' }) end,
      function() return zl.cuda.synchronize() end,
      function() return zl.cuda.empty_cache() end,
      function() return zl.arange(4, { device = 'cuda' }) end,
      function() return require('zlua.nn').Linear(2, 3):cuda() end,
    }) do
      check_error(f, 'no CUDA device: ')
    end
    check_eq(zl.cuda.memory_allocated(), 0)
    check_eq(zl.cuda.memory_reserved(), 0)
  end)
else
  test('a CUDA device: round trip, size and elements', function()
    local x = zl.randn(5, 6)
    local d = x:cuda()
    check_eq(d:device(), 'cuda:0')
    check(d:is_cuda())
    check_eq(d:shape()[2], 6)
    check(zl.cuda.memory_allocated() > 0)
    local back = d:cpu()
    check_eq(back:sub(x):abs():max():item(), 0)
    check_eq(((d + d):cpu() - x * 2):abs():max():item(), 0)
    check_eq(d:sum():cpu():item(), x:sum():item())
    check_eq(zl.mse_loss(d, d * 0):item(), zl.mse_loss(x, x * 0):item())
    check_eq(d:narrow(1, 2, 1):narrow(2, 3, 1):item(), x:narrow(1, 2, 1):narrow(2, 3, 1):item())   -- copied over
    check_eq(d:totable()[2][3], x:totable()[2][3])                                              -- copied over
  end)
end

H.done()
