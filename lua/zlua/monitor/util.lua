--[[ zlua.monitor.util: what the monitors share (private): the log directory
  (DeepSpeed's os.path.join(output_path, job_name), created as os.makedirs
  would), the host name, and the check of an event list that names the
  event at fault. Paths are looked at without being opened (a FIFO there
  would block an open), and a name with a NUL byte, which C would cut, is
  refused. ]]

local zl = require 'zlua'

local fmt, tointeger = string.format, math.tointeger

local util = {}

util.raise = zl.raise

--- util.join(a, b): Python's os.path.join for two parts: b when it is
--- absolute or a is empty, else a and b with one '/' between.
function util.join(a, b)
  if a == '' or b:sub(1, 1) == '/' then return b end
  if a:sub(-1) == '/' then return a .. b end
  return a .. '/' .. b
end

--- util.exists(path): whether anything is there (a link not followed, nothing opened).
local function exists(path) return zl.core.path_kind(path) ~= nil end
util.exists = exists

--- util.make_dir(who, dir): creates dir and its parents unless it exists;
--- an error names the directory.
function util.make_dir(who, dir)
  if dir == '' then return end
  if dir:find('\0', 1, true) then util.raise(fmt("%s: the directory '%s' holds a NUL byte", who, dir:gsub('%z', '\\0'))) end
  local ok, err = pcall(zl.core.mkdirs, dir)
  if not ok then
    util.raise(fmt("%s: cannot create the directory '%s': %s", who, dir, tostring(err):gsub('^[^\n]-:%d+: ', '', 1)))
  end
end

--- util.check_file(who, path): raises unless path is nothing yet or a regular
--- file: a FIFO, a device, a folder or a link there is named, never opened.
function util.check_file(who, path)
  local kind = zl.core.path_kind(path)
  if kind and kind ~= 'file' then
    util.raise(fmt("%s: '%s' is a %s, not a regular file", who, path, kind))
  end
end

--- util.hostname(): the kernel's host name, as socket.gethostname() gives it.
function util.hostname()
  local f = io.open('/proc/sys/kernel/hostname', 'r')
  local name = f and f:read('l')
  if f then f:close() end
  if not name or name == '' then name = os.getenv('HOSTNAME') end
  if not name or name == '' then name = 'localhost' end
  return name
end

--- util.event(who, events, i) -> name, value, step: the i-th entry of an
--- event list, each entry {name, value, step} as DeepSpeed's (name, value,
--- step) tuples; value a number, step an integer (an integral float is
--- taken as one).
function util.event(who, events, i)
  local e = events[i]
  if type(e) ~= 'table' then
    util.raise(fmt('%s: event %d must be a table {name, value, step}, got %s', who, i, type(e)))
  end
  local name, value, step = e[1], e[2], e[3]
  if type(name) ~= 'string' or name == '' then
    util.raise(fmt('%s: event %d: the name must be a non-empty string, got %s', who, i,
                   type(name) == 'string' and "''" or type(name)))
  end
  if name:find('\0', 1, true) then
    util.raise(fmt("%s: event %d ('%s'): the name holds a NUL byte, which would cut its file name there", who, i,
                   (name:gsub('%z', '\\0'))))
  end
  if type(value) ~= 'number' then
    util.raise(fmt("%s: event %d ('%s'): the value must be a number, got %s", who, i, name, type(value)))
  end
  local s = type(step) == 'number' and tointeger(step)
  if not s then
    util.raise(fmt("%s: event %d ('%s'): the step must be an integer, got %s", who, i, name,
                   type(step) == 'number' and tostring(step) or type(step)))
  end
  return name, value, s
end

--- util.events(who, events): checks that events is a list.
function util.events(who, events)
  if type(events) ~= 'table' then
    util.raise(fmt('%s: expected a list of events {{name, value, step}, ...}, got %s', who, type(events)))
  end
end

return util
