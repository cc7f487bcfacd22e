-- Tests the mixed-precision binding (lua/src/amp.c): the gradient-list passes
-- against plain Lua, the loss scaler userdata (a hand-worked DeepSpeed
-- sequence, state and load, the floor error, release), and the bad arguments.

local zl = require 'zlua'
local core = require 'zlua.core'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

test('grad passes', function()
  zl.manual_seed(7)
  local a, b = zl.randn(5, 7), zl.randn(40000):to('bf16')
  local want = 0
  for _, t in ipairs({ a, b }) do
    for _, v in ipairs(H.flat(t)) do want = want + v * v end
  end
  check_close(core.grad_norm_sq({ a, b }), want, 1e-12, 'sum of squares')
  check_eq(core.grad_nonfinite({ a, b }), false, 'finite')
  check_eq(core.grad_nonfinite({}), false, 'empty list')
  local c = zl.zeros(3):to('f16')
  c:set(2, 1 / 0)
  check_eq(core.grad_nonfinite({ a, c }), true, 'inf found')
  local before = H.flat(a)
  core.grad_scale({ a }, 0.5)
  check_close(a, (function() local t = {} for i, v in ipairs(before) do t[i] = v * 0.5 end return t end)(), 1e-7)
  check_close(core.grad_clip_coef(10, 1), 1 / (10 + 1e-6), 1e-12, 'clip coefficient')
  check_eq(core.grad_clip_coef(0.5, 1), 1, 'no clipping below max_norm')
end)

test('loss scaler follows DeepSpeed', function()
  -- window 3, hysteresis 2: O spends the hysteresis, O halves, three clean steps double
  local s = core.loss_scaler_new { initial_scale_power = 4, loss_scale_window = 3, hysteresis = 2 }
  check(s:is_dynamic(), 'dynamic')
  check_eq(s:scale(), 16)
  local got = {}
  for _, c in ipairs { 'O', 'O', 'C', 'C', 'C', 'O' } do got[#got + 1] = s:update(c == 'O') end
  check_close(got, { 16, 8, 8, 8, 16, 16 }, 0, 'scales after each update')
  local st = s:state()
  check_eq(st.cur_iter, 6)
  check_eq(st.last_overflow_iter, 5)
  check_eq(st.cur_hysteresis, 1)
  local r = core.loss_scaler_new { initial_scale_power = 4, loss_scale_window = 3, hysteresis = 2 }
  r:load(st)
  check_eq(r:update(true), s:update(true), 'a loaded scaler continues the sequence')
  check(tostring(r):find('LossScaler(dynamic, scale 8', 1, true), tostring(r))
  local fixed = core.loss_scaler_new { loss_scale = 128 }
  for _ = 1, 10 do fixed:update(true) end
  check_eq(fixed:scale(), 128, 'a static scale never changes')
  check(not fixed:is_dynamic(), 'static')
end)

test('loss scaler errors', function()
  local f = core.loss_scaler_new { initial_scale_power = 0, hysteresis = 1 }
  check_error(function() f:update(true) end,
    'fp16: gradient overflow at the minimum loss scale 1 (min_loss_scale); the run cannot continue')
  check_error(function() core.loss_scaler_new { hysterisis = 2 } end, "loss_scaler_new: unknown key 'hysterisis'")
  check_error(function() core.loss_scaler_new { hysteresis = 1.5 } end, 'hysteresis must be an integer, got 1.5')
  check_error(function() core.loss_scaler_new { hysteresis = 0 } end, 'fp16.hysteresis must be an integer >= 1, got 0')
  check_error(function() core.loss_scaler_new { min_loss_scale = 'one' } end, 'min_loss_scale must be a number, got a string')
  check_eq(core.loss_scaler_new { loss_scale_window = 1e3 }:state().cur_iter, 0, 'an integral float is an integer')
  local block = core.loss_scaler_new { enabled = true, auto_cast = false, fp16_master_weights_and_grads = false,
                                       initial_scale_power = 8 }
  check_eq(block:scale(), 256, "a config's whole fp16 block is accepted")
  check_error(function() f:load { cur_scale = 1 } end, 'loss scaler load: the state has no cur_iter')
  check_error(function() f:load { cur_scale = -1, cur_iter = 0, last_overflow_iter = -1, cur_hysteresis = 1 } end,
    'loss scaler state: cur_scale must be a finite number > 0, got -1')
  check_error(function() f:update() end, 'boolean expected')
  f:free()
  check_error(function() f:scale() end, 'loss scaler was freed')
  f:free()   -- a second release is a no-op
  do local c <close> = core.loss_scaler_new() end
  check_error(function() core.grad_norm_sq({ zl.randn(2), 3 }) end,
    'grad_norm_sq: entry 2 of the list is a number, expected a tensor')
  check_error(function() core.grad_nonfinite({ zl.zeros(2, 3):to('i64') }) end,
    'grad_nonfinite: entry 1 of the list (shape [2, 3]) is i64; gradients must be f32, bf16 or f16')
  check_error(function() core.grad_scale({ zl.randn(2) }, 1 / 0) end, 'grad_scale: the factor must be finite, got inf')
end)

H.done()
