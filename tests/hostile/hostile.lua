-- Helpers of the hostile-input battery (tests/hostile/test_*.lua): a scratch
-- folder, a small engine whose state is known bit for bit, engine.json
-- rewritten with a valid CRC (so the field checks, not the CRC, must catch the
-- damage), FIFOs, and a clock for "within seconds".

local zl = require 'zlua'
local nn = require 'zlua.nn'
local json = require 'zlua.json'
local H = require 'harness'

local X = {}

X.TMP = os.tmpname()
os.remove(X.TMP)
zl.core.mkdirs(X.TMP)

--- A fresh folder under the scratch folder.
function X.dir(name)
  local d = X.TMP .. '/' .. name
  zl.core.remove_tree(d)
  zl.core.mkdirs(d)
  return d
end

function X.sh(cmd)
  local ok = os.execute(cmd)
  if not ok then error('command failed: ' .. cmd) end
end

function X.write(path, bytes)
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
end

function X.read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('a')
  f:close()
  return s
end

function X.mkfifo(path) X.sh('mkfifo ' .. H.quote(path)) end

--- An engine over a small MLP trained `steps` steps from `seed` (AdamW, f32).
function X.engine(seed, steps, extra)
  zl.manual_seed(seed)
  local m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
  local cfg = { train_micro_batch_size_per_gpu = 4, gradient_accumulation_steps = 1,
    optimizer = { type = 'AdamW', params = { lr = 0.01 } } }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  local e = zl.initialize { model = m, config = cfg }
  zl.manual_seed(seed + 1000)
  local x, y = zl.randn(4, 4), zl.randn(4, 2)
  for _ = 1, steps or 0 do
    e:backward(zl.mse_loss(e(x), y))
    e:step()
  end
  return e, x, y
end

--- The engine's weights and counters as text, exact to the bit, and the same
--- after one more step (which reads the optimizer state): equal strings mean
--- the same state.
function X.fingerprint(e, x, y)
  local function weights()
    local out = {}
    for _, p in ipairs(e.module:parameters()) do
      for _, v in ipairs(H.flat(p:float())) do out[#out + 1] = string.format('%a', v) end
    end
    return table.concat(out, ' ')
  end
  local before = string.format('steps %d samples %d | %s', e.global_steps, e.global_samples, weights())
  e:backward(zl.mse_loss(e(x), y))
  e:step()
  return before .. ' || ' .. weights()
end

--- DIR/TAG/engine.json decoded, changed by fn(state), written back with its CRC-32 file to match.
function X.rewrite_json(path, fn)
  local j = path .. '/engine.json'
  local state = json.decode(X.read(j))
  fn(state)
  local text = json.encode(state, 1) .. '\n'
  X.write(j, text)
  X.write(j .. '.crc32', string.format('%d\n', zl.core.crc32(text)))
end

--- fn() under a clock: its results, and a failed check when it took more than `limit` seconds.
function X.within(limit, what, fn)
  local t0 = zl.core.now()
  local r = table.pack(pcall(fn))
  local took = zl.core.now() - t0
  H.check(took < limit, string.format('%s: took %.1f s, more than %d s', what, took, limit))
  return table.unpack(r, 1, r.n)
end

--- The names in a folder that start with `prefix` (ls -A).
function X.entries(dir, prefix)
  local out = {}
  local p = io.popen('ls -A ' .. H.quote(dir) .. ' 2>/dev/null')
  for name in p:lines() do
    if name:sub(1, #prefix) == prefix then out[#out + 1] = name end
  end
  p:close()
  return out
end

return X
