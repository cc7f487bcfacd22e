-- The DeepSpeed keys whose effect needs several ranks (run by CTest as
-- `zlua --nprocs 2 test_config_keys.lua` from tests/lua, for the harness):
-- prescale_gradients and gradient_predivide_factor (the mean kept, the
-- division moved before the sum: seen in the result and in the range of the
-- sum) at stages 0, 1 and 3; checkpoint.tag_validation with tags that differ
-- between ranks ("Warn", "Fail", "Ignore"), and a tag that is not a string on
-- one rank (every rank gets the error, none hangs).

local zl = require 'zlua'
local dist = require 'zlua.dist'
local nn = require 'zlua.nn'
local tagging = require 'zlua.engine.tag'
local H = require 'harness'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local r, n = dist.rank(), dist.world_size()

-- A one-row Linear(2, 1) without bias, weights w, on an SGD engine (lr 1):
-- a step subtracts the mean over the ranks of each rank's input row.
local function engine_of(w, extra)
  local model = nn.Linear(2, 1, false)
  zl.no_grad(function() model.weight:copy_(zl.tensor({ w }, 'f32')) end)
  local cfg = { train_micro_batch_size_per_gpu = 1, optimizer = { type = 'SGD', params = { lr = 1 } } }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return (zl.initialize { model = model, config = cfg }), model
end

local function one_step(e, x)
  local loss = e(zl.tensor({ x }, 'f32')):sum()
  e:backward(loss)
  e:step()
end

-- Each (stage, reduce_scatter) DeepSpeed allows the two keys at.
local STAGES = { { 0, true }, { 1, false }, { 3, true } }

test('the_mean_is_kept', function()
  -- Powers of two: every way of scaling sums exactly, so each setting must
  -- give the plain mean bit for bit. Leaving out the multiplication after the
  -- sum (or the division before it) would not.
  local xs = { { 2, 4 }, { 8, 16 } }
  local want = { 1 - (2 + 8) / 2, 2 - (4 + 16) / 2 }
  for _, st in ipairs(STAGES) do
    for _, keys in ipairs({ {}, { prescale_gradients = true }, { gradient_predivide_factor = 4.0 },
        { gradient_predivide_factor = 2.0 } }) do
      keys.zero_optimization = { stage = st[1], reduce_scatter = st[2] }
      local e, model = engine_of({ 1, 2 }, keys)
      one_step(e, xs[r + 1])
      local got = e:get_full_fp32_param(model.weight):totable()[1]
      check(got[1] == want[1] and got[2] == want[2], string.format('stage %d prescale %s predivide %s: %s, %s',
        st[1], tostring(keys.prescale_gradients), tostring(keys.gradient_predivide_factor), got[1], got[2]))
    end
  end
end)

test('the_division_comes_before_the_sum', function()
  -- Gradients of 3e38 on both ranks: their f32 sum overflows, half of each does not.
  local big = 3e38
  local f32 = string.unpack('<f', string.pack('<f', big))
  for _, st in ipairs(STAGES) do
    local z = { stage = st[1], reduce_scatter = st[2] }
    local e = engine_of({ 0, 0 }, { zero_optimization = z })
    one_step(e, { big, big })
    check_eq(e:get_global_grad_norm(), math.huge, 'stage ' .. st[1] .. ': the plain sum overflows')
    for _, keys in ipairs({ { prescale_gradients = true }, { gradient_predivide_factor = 2.0 } }) do
      keys.zero_optimization = z
      e = engine_of({ 0, 0 }, keys)
      one_step(e, { big, big })
      local norm = e:get_global_grad_norm()
      check(norm < math.huge and math.abs(norm - math.sqrt(2) * f32) <= 1e-6 * norm, string.format('stage %d %s: norm %g', st[1],
        keys.prescale_gradients and 'prescale' or 'predivide 2', norm))
    end
    -- A factor below 1 multiplies before the sum: 1e38 sums to 2e38, but twice it overflows.
    e = engine_of({ 0, 0 }, { zero_optimization = z })
    one_step(e, { 1e38, 1e38 })
    check(e:get_global_grad_norm() < math.huge, 'stage ' .. st[1] .. ': 1e38 + 1e38 is finite')
    e = engine_of({ 0, 0 }, { zero_optimization = z, gradient_predivide_factor = 0.5 })
    one_step(e, { 1e38, 1e38 })
    check_eq(e:get_global_grad_norm(), math.huge, 'stage ' .. st[1] .. ': predivide 0.5 doubles before the sum')
  end
end)

local function tmpdir()
  local d = r == 0 and os.tmpname() or ''
  if r == 0 then
    os.remove(d)
    zl.core.mkdirs(d)
  end
  -- Every rank needs rank 0's name: sent as bytes.
  local len = dist.broadcast(zl.tensor({ #d }, 'i32'), 0):totable()[1]
  local bytes = {}
  for i = 1, len do bytes[i] = r == 0 and d:byte(i) or 0 end
  local got = dist.broadcast(zl.tensor(bytes, 'i32'), 0):totable()
  for i = 1, len do got[i] = string.char(math.tointeger(got[i])) end
  return table.concat(got)
end

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- The names in a folder, sorted, hidden ones too.
local function listing(dir)
  local p = io.popen('ls -A ' .. H.quote(dir))
  local names = {}
  for name in p:lines() do names[#names + 1] = name end
  p:close()
  table.sort(names)
  return table.concat(names, ' ')
end

-- Saves with this rank's tag under the given tag_validation; returns the
-- warnings rank 0 wrote and the error (nil when the save went through).
local function save_with(mode, tag, dir)
  local e = engine_of({ 1, 2 }, { checkpoint = mode and { tag_validation = mode } or nil })
  one_step(e, { 1, 1 })
  local warned = {}
  local before = tagging.warn
  tagging.warn = function(line) warned[#warned + 1] = line end
  local ok, err = pcall(e.save_checkpoint, e, dir, tag)
  tagging.warn = before
  return warned, not ok and tostring(err) or nil
end

test('tag_validation', function()
  local dir = tmpdir()
  local mine = r == 0 and 'same' or 'rank' .. r
  -- The default ("Warn"): one warning on rank 0, the save under rank 0's tag.
  local warned, err = save_with(nil, mine, dir)
  check_eq(err, nil, 'Warn saves')
  check_eq(#warned, r == 0 and 1 or 0, 'one warning, on rank 0')
  if r == 0 and warned[1] then
    check(warned[1]:find('the checkpoint tag is not the same on every rank (rank 0: "same"; different on rank 1)',
      1, true) ~= nil, warned[1])
  end
  dist.barrier()
  check(exists(dir .. '/same/engine.json'), "saved under rank 0's tag")
  check_eq(listing(dir), 'latest same', 'nothing under the other tag, no folder left behind')
  -- "Fail": the same error on every rank, and nothing written.
  warned, err = save_with('Fail', r == 0 and 'first' or 'other', dir)
  check(err ~= nil and err:find('save_checkpoint: the checkpoint tag is not the same on every rank (rank 0: '
    .. '"first"; different on rank 1): nothing saved, as checkpoint.tag_validation is "Fail"', 1, true) ~= nil,
    'Fail: ' .. tostring(err))
  check_eq(#warned, 0)
  dist.barrier()
  check(not exists(dir .. '/first'), 'Fail writes nothing')
  -- "Ignore": no word, the save under rank 0's tag.
  warned, err = save_with('ignore', r == 0 and 'quiet' or 'loud', dir)
  check_eq(err, nil, 'Ignore saves')
  check_eq(#warned, 0, 'Ignore says nothing')
  dist.barrier()
  check(exists(dir .. '/quiet/engine.json') and not exists(dir .. '/loud'), "Ignore: rank 0's tag")
  -- Equal tags: no warning.
  warned, err = save_with(nil, 'equal', dir)
  check(err == nil and #warned == 0, 'equal tags: saved without a word')
  -- A tag that is not a string on one rank: every rank raises, none hangs.
  check_error(function()
    local e = engine_of({ 1, 2 })
    e:save_checkpoint(dir, r == 1 and 7 or 'fine')
  end, 'save_checkpoint: the tag must be a string on every rank; rank 1 gave a')
  dist.barrier()
  if r == 0 then zl.core.remove_tree(dir) end
end)

H.done()
