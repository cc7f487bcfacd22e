-- zlua.engine.memory_table: the seeds' per-parameter estimate of each model
-- state beside what the engine holds and the allocator counts. At one rank
-- nothing is padded, so for the GPT at every stage, f32 and bf16, the
-- estimate of gradients and optimizer states is the engine's to the byte,
-- and of parameters too except where stage 3 keeps a gathered working copy
-- beside the partition; the printed table names each category.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local memory_table = require 'zlua.engine.memory_table'
local test, check, check_eq = H.test, H.check, H.check_eq

local function engine_after_a_step(precision, stage, optimizer)
  collectgarbage()
  zl.manual_seed(1)
  local m = nn.GPT{ vocab_size = 100, block_size = 16, n_layer = 2, n_head = 2, n_embd = 32 }
  local e = zl.initialize { model = m, config = { train_batch_size = 2, zero_optimization = { stage = stage },
    bf16 = { enabled = precision == 'bf16' }, optimizer = optimizer } }
  e:set_progress(false)
  local idx = zl.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }, 'i64')
  local _, loss = e(idx, idx)
  e:backward(loss)
  e:step()
  return e, m:num_parameters()
end

local ADAMW = { type = 'AdamW', params = { lr = 1e-3 } }
local SGD = { type = 'SGD', params = { lr = 1e-3, momentum = 0.9 } }

for _, precision in ipairs({ 'f32', 'bf16' }) do
  for stage = 0, 3 do
    test(('%s, stage %d: estimates equal the engine\'s bytes'):format(precision, stage), function()
      local e, n = engine_after_a_step(precision, stage, ADAMW)
      local rows = {}
      for _, r in ipairs(memory_table.rows(e)) do rows[r.category] = r end
      local w = precision == 'bf16' and 2 or 4
      check_eq(rows.grads.estimated, w * n, 'gradients: a working-dtype value a parameter')
      check_eq(rows.grads.engine, rows.grads.estimated, 'gradients held')
      local master = (precision == 'f32' and stage == 0) and 0 or 4 * n
      check_eq(rows.optimizer.estimated, master + 8 * n, 'optimizer: f32 master where needed and two Adam moments')
      check_eq(rows.optimizer.engine, rows.optimizer.estimated, 'optimizer states held')
      check_eq(rows.params.estimated, w * n, 'parameters: a working copy')
      if stage < 3 then check_eq(rows.params.engine, rows.params.estimated, 'parameters held') end
      check(rows.params.engine >= rows.params.estimated, 'stage 3 holds at least the partition')
      check(rows.activations.estimated == nil and rows.activations.peak > 0, 'activations measured, not estimated')
    end)
  end
end

test('SGD with momentum: one state a parameter', function()
  local e, n = engine_after_a_step('f32', 1, SGD)
  for _, r in ipairs(memory_table.rows(e)) do
    if r.category == 'optimizer' then check_eq(r.estimated, 4 * n + 4 * n, 'f32 master and one momentum') end
  end
end)

test('the printed table', function()
  local e = engine_after_a_step('bf16', 2, ADAMW)
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  memory_table.print(e, f, { activations = 3 * 2 ^ 20 })
  f:close()
  local text = H.read_file(path)
  os.remove(path)
  check(text:find('memory of rank 0 (stage 2, 1 rank), MiB:', 1, true) ~= nil, 'title: ' .. text)
  for _, c in ipairs({ 'params', 'grads', 'optimizer', 'comm buffers', 'activations', 'other' }) do
    check(text:find('\n  ' .. c .. ' ', 1, true) ~= nil, 'a row for ' .. c)
  end
  check(text:find('\n  activations +3%.00 ') ~= nil, 'the activation estimate given: ' .. text)
end)

H.done()
