-- The aio engine from Lua (core.aio_open, zlua.offload.aio): round trips through
-- aligned buffers and unaligned views, the "aio" block as zlua.config checks it,
-- errors raised with the file's name, and requests and engines collected in any order.
local zl = require 'zlua'
local H = require 'harness'
local aio = require 'zlua.offload.aio'
local config = require 'zlua.config'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local dir = os.tmpname()
os.remove(dir)
assert(os.execute('mkdir -p ' .. dir))
local function path(name) return dir .. '/' .. name end

local missing = zl.core.aio_unavailable()
if missing then
  check_error(function() aio.new() end, missing)
  check(aio.buffer(4):numel() == 4, 'aligned buffers need no engine')
  os.execute('rm -rf ' .. dir)
  H.skip(missing)
end

local function same(a, b) return (a:float() - b:float()):abs():max():item() == 0 end

test('round_trip', function()
  local e = aio.new{ block_size = 8192, queue_depth = 4, intra_op_parallelism = 2 }
  check(e:is_direct(), 'O_DIRECT under ' .. dir)
  local x = zl.randn(10007)
  check(e:write(path('x.swp'), x):wait() == true, 'wait gives true')
  local y = aio.buffer(10007)
  check_eq(y:dtype(), 'f32', 'buffer dtype')
  check_eq(y:numel(), 10007, 'buffer numel')
  e:read(path('x.swp'), y):wait()
  check(same(x, y), 'read back what was written')
  -- A view one element into a bigger tensor: unaligned, through bounce blocks.
  local big = zl.randn(5001)
  local v = big:narrow(1, 2, 5000)
  e:write(path('x.swp'), v, 40960):wait()
  local w = zl.zeros(5001):narrow(1, 2, 5000)
  e:read(path('x.swp'), w, 40960):wait()
  check(same(v, w), 'unaligned view round trip')
  local h = aio.buffer(100, 'bf16', 'optimizer')
  check_eq(h:dtype(), 'bf16', 'buffer of another dtype')
  e:close()
  e:close()
  check_eq(tostring(e), 'aio engine (closed)', 'closed engine prints so')
end)

test('config_section', function()
  local cfg = config.load({ train_batch_size = 1,
    aio = { block_size = 262144, queue_depth = 16, thread_count = 2, single_submit = true,
            overlap_events = false } })
  check_eq(cfg.aio.intra_op_parallelism, 2, 'thread_count is intra_op_parallelism')
  local e = aio.new(cfg.aio)
  local x = zl.randn(300000)
  local reqs = {}
  for i = 1, 4 do reqs[i] = e:write(path('c' .. i .. '.swp'), x) end
  for i = 4, 1, -1 do reqs[i]:wait() end
  local y = aio.buffer(300000)
  e:read(path('c3.swp'), y):wait()
  check(same(x, y), 'round trip with the checked section')
  e:close()
  -- Defaults, and the old name straight to the core.
  aio.new():close()
  aio.new({}):close()
  zl.core.aio_open{ thread_count = 3 }:close()
end)

test('errors_name_the_file', function()
  local e = aio.new{ block_size = 4096 }
  local t = aio.buffer(2000)
  local missing = path('missing.swp')
  check_error(function() e:read(missing, t):wait() end,
    missing .. ': cannot open for reading: No such file or directory')
  local f = assert(io.open(path('short.swp'), 'wb'))
  f:write(string.rep('x', 5000))
  f:close()
  check_error(function() e:read(path('short.swp'), t):wait() end,
    path('short.swp') .. ': read 5000 of 8000 bytes at offset 0 (file too short)')
  check_error(function() e:write(path('short.swp') .. '/x', t):wait() end,
    path('short.swp') .. '/x: cannot open for writing: Not a directory')
  local r = e:write(path('ok.swp'), t)
  r:wait()
  check_error(function() r:wait() end, 'aio write request was already waited on')
  check_eq(tostring(r), 'aio write request (waited on)', 'request prints its state')
  check_error(function() e:write(path('ok.swp'), t, 100) end, 'offset 100 into')
  check_error(function() e:write(path('ok.swp'), zl.randn(3, 4):transpose(1, 2)) end, 'is not contiguous')
  check_error(function() e:write(path('ok.swp'), 'x') end, 'zlua.Tensor expected')
  e:close()
  check_error(function() e:write(path('ok.swp'), t) end, 'aio engine was closed')
  check_error(function() aio.new{ bogus = 1 } end, "aio_open: unknown key 'bogus'")
  check_error(function() aio.new{ block_size = 1000 } end, 'aio: block_size must be a positive multiple of 4096')
  check_error(function() aio.new{ queue_depth = 0 } end, 'aio_open: queue_depth must be between 1 and')
  check_error(function() aio.new{ single_submit = 1 } end, 'aio_open: single_submit must be a boolean')
  check_error(function() aio.new{ block_size = 'big' } end, 'aio_open: block_size must be an integer')
  check_error(function() aio.new{ thread_count = 2, intra_op_parallelism = 2 } end,
    'aio_open: intra_op_parallelism and its old name thread_count are both given: give one')
  check_error(function() aio.new{ use_gds = true } end, 'aio.use_gds: GPUDirect Storage is not implemented')
  check_error(function() aio.buffer(-1) end, 'numel -1 is negative')
  check_error(function() aio.buffer(10, 'f32', 'nowhere') end, "unknown memory category 'nowhere'")
end)

test('gc_safety', function()
  -- Requests never waited on, their engine and tensors dropped: the collector waits.
  do
    local e = aio.new{ block_size = 65536, queue_depth = 8, intra_op_parallelism = 2 }
    local t = zl.randn(1 << 18)
    for i = 1, 8 do e:write(path('gc' .. i .. '.swp'), t) end
    e:read(path('missing.swp'), t)   -- fails; nobody hears of it
  end
  collectgarbage()
  collectgarbage()
  -- The engine closed while requests are out: they stay valid to wait on.
  local e = aio.new{ block_size = 65536 }
  local x = zl.randn(100000)
  local r = e:write(path('late.swp'), x)
  e:close()
  check(r:wait(), 'wait after close')
  -- A tensor released while its request runs: the engine holds it until the wait.
  e = aio.new{ block_size = 65536 }
  local y = aio.buffer(100000)
  r = e:read(path('late.swp'), y)
  local view = y:narrow(1, 1, 100000)
  y:release()
  r:wait()
  check(same(x, view), 'data arrived in a released tensor still viewed')
  r = nil
  collectgarbage()
  e = nil
  collectgarbage()
  check(true, 'no crash')
end)

os.execute('rm -rf ' .. dir)
H.done()
