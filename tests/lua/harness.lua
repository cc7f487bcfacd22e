-- The Lua test harness: test(name, fn) runs fn unless arg[1] names other tests,
-- check* record failures with file:line and keep going, done() prints
-- "N passed, N failed" and exits non-zero on any failure; skip() ends a file
-- this build cannot run with CTest's skip.
-- Runs under zlua, or under a stock lua5.4 with the binding preloaded:
--   lua5.4 -e 'package.preload.zlua = package.loadlib("libzlua-lua.so", "luaopen_zlua")' test_x.lua

local H = {}
local passed, failed = 0, 0
local filter = arg and arg[1]

local function where(level)
  local info = debug.getinfo(level + 1, 'Sl')
  return info and (info.short_src .. ':' .. info.currentline) or '?'
end

local function fail(level, msg)
  failed = failed + 1
  print('FAIL ' .. where(level + 1) .. ': ' .. msg)
end

function H.check(cond, msg)
  if cond then passed = passed + 1 else fail(2, msg or 'check failed') end
end

-- Elements of a tensor (or nested table, or number) as one flat list.
function H.flat(x, out)
  out = out or {}
  if type(x) == 'table' then
    for _, v in ipairs(x) do H.flat(v, out) end
  elseif type(x) == 'number' or type(x) == 'boolean' then
    out[#out + 1] = x
  else
    H.flat(x:totable(), out)
  end
  return out
end

--- check_close(a, b [, tol [, msg]]): numbers, tables or tensors, elementwise
--- |a - b| <= tol * (1 + |b|).
function H.check_close(a, b, tol, msg)
  tol = tol or 1e-6
  local fa, fb = H.flat(a), H.flat(b)
  if #fa ~= #fb then
    fail(2, string.format('%s: %d elements, expected %d', msg or 'check_close', #fa, #fb))
    return
  end
  for i = 1, #fa do
    local x, y = fa[i], fb[i]
    local bad
    if type(x) == 'boolean' or type(y) == 'boolean' then bad = x ~= y
    else bad = not (math.abs(x - y) <= tol * (1 + math.abs(y))) end
    if bad then
      fail(2, string.format('%s: element %d is %s, expected %s (tol %g)',
                            msg or 'check_close', i, tostring(x), tostring(y), tol))
      return
    end
  end
  passed = passed + 1
end

--- check_error(fn, needle [, msg]): fn must raise an error whose message
--- contains needle (plain text, not a pattern).
function H.check_error(fn, needle, msg)
  local ok, err = pcall(fn)
  if ok then
    fail(2, (msg or 'check_error') .. ': no error raised, expected "' .. needle .. '"')
    return
  end
  err = tostring(err)
  if not err:find(needle, 1, true) then
    fail(2, string.format('%s: expected an error containing "%s", got "%s"', msg or 'check_error', needle, err))
    return
  end
  passed = passed + 1
  return err
end

function H.check_eq(a, b, msg)
  if a == b then passed = passed + 1 return end
  fail(2, string.format('%s: got %s, expected %s', msg or 'check_eq', tostring(a), tostring(b)))
end

function H.test(name, fn)
  if filter and not name:find(filter, 1, true) then return end
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then fail(2, 'test ' .. name .. ' raised: ' .. tostring(err)) end
end

--- True when lists a and b hold the same values in the same order.
function H.same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

--- A whole file's bytes (nil when it cannot be opened); write_file replaces one.
function H.read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('a')
  f:close()
  return s
end

function H.write_file(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

--- Shell-quote s for os.execute / io.popen.
function H.quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- The zlua running this test (arg's lowest index), to run scripts with.
H.exe = require('zlua.args').executable()

--- The source tree (tests run from tests/lua).
H.source_dir = os.getenv('ZLUA_SOURCE_DIR') or '../..'

--- Runs a Lua script with this zlua; returns its exit status and its output
--- (stdout and stderr together).
function H.run_script(script, ...)
  local args = { H.quote(H.exe), H.quote(script) }
  for _, a in ipairs({ ... }) do args[#args + 1] = H.quote(a) end
  local p = io.popen(table.concat(args, ' ') .. ' 2>&1')
  local out = p:read('a')
  local _, _, status = p:close()
  return status, out
end

function H.done()
  print(string.format('%d passed, %d failed', passed, failed))
  if failed > 0 or passed == 0 then os.exit(1) end
end

--- Ends a file whose subject this build lacks: "skipped: why" and exit 77,
--- CTest's skip (SKIP_RETURN_CODE), unless a check before it failed.
--- with_accelerator(name, fn, ...): fn(...) while os.getenv('ZLUA_ACCELERATOR')
--- says name ('cpu', 'cuda'): the engine reads the setting when it is made,
--- and CTest pins the suite to the CPU. Raises what fn raised.
function H.with_accelerator(name, fn, ...)
  local getenv = os.getenv
  os.getenv = function(k)
    if k == 'ZLUA_ACCELERATOR' then return name end
    return getenv(k)
  end
  local r = table.pack(pcall(fn, ...))
  os.getenv = getenv
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function H.skip(why)
  print(string.format('%d passed, %d failed; skipped: %s', passed, failed, why))
  os.exit(failed > 0 and 1 or 77)
end

return H
