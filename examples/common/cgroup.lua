--[[ A memory limit that the kernel enforces: a memory cgroup (v1's memory
  controller, or v2) made for one run, for examples/gpt/infinity.lua and
  scripts/bench/infinity.lua, whose point is training in less memory than
  the model states take. Needs root.

  local cgroup = dofile(here .. '/../common/cgroup.lua')
  local limit = cgroup.bytes('400M')            -- nil for a bad size
  local cg, err = cgroup.new('zlua-infinity', limit)
  cg:join(pid)        -- or start a child with: echo $$ > cg.procs && exec ...
  cg:peak(), cg:oom_kills(), cgroup.resident_peak()
  cg:remove(pid)      -- pid (if given) back where it was, the cgroup removed

  On v1 the cgroup is made inside the one the process is in, so any limit
  above it still applies and the process goes back to where it was; v2 lets
  no cgroup that holds processes give the memory controller to its
  children, so there it is made at the top. ]]

local zl = require 'zlua'
local fmt = string.format

local cgroup = {}

local UNITS = { [''] = 1, K = 1 << 10, M = 1 << 20, G = 1 << 30, T = 1 << 40 }

--- cgroup.bytes('400M') -> 419430400 (K, M, G, T are powers of 1024), or nil.
function cgroup.bytes(text)
  local num, unit = tostring(text):upper():match('^(%d+%.?%d*)([KMGT]?)I?B?$')
  local n = num and math.tointeger(math.floor(tonumber(num) * UNITS[unit]))
  return n and n > 0 and n or nil
end

local function write(path, text)
  local f, err = io.open(path, 'w')
  if not f then return nil, err end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not ok or not cok then return nil, werr or cerr end
  return true
end

local function read(path)
  local f = io.open(path, 'r')
  if not f then return nil end
  local s = f:read('a')
  f:close()
  return s
end

--- cgroup.root() -> whether this process runs as root (its effective uid is 0).
function cgroup.root()
  return (read('/proc/self/status') or ''):match('\nUid:%s*%d+%s+(%d+)') == '0'
end

--- cgroup.resident_peak() -> the most resident memory this process has had (VmHWM), bytes.
function cgroup.resident_peak()
  local kb = (read('/proc/self/status') or ''):match('VmHWM:%s*(%d+) kB')
  return (tonumber(kb) or 0) * 1024
end

local CG = {}
CG.__index = CG

--- cgroup.new(name, bytes) -> a cgroup NAME-PID limited to bytes with swap
--- forbidden where the kernel lets us say so, or nil and why.
function cgroup.new(name, bytes)
  local own = read('/proc/self/cgroup') or ''
  local pid = zl.core.getpid()
  local cg
  if zl.core.exists('/sys/fs/cgroup/memory/cgroup.procs') then
    local home = '/sys/fs/cgroup/memory' .. (own:match('\n?%d+:[^:\n]*memory[^:\n]*:([^\n]*)') or '/'):gsub('/$', '')
    cg = { v = 1, home = home, path = fmt('%s/%s-%d', home, name, pid), limit_file = 'memory.limit_in_bytes',
      swap_file = 'memory.memsw.limit_in_bytes', swap_value = tostring(bytes), peak_file = 'memory.max_usage_in_bytes',
      events_file = 'memory.oom_control' }
  elseif zl.core.exists('/sys/fs/cgroup/cgroup.controllers') then
    cg = { v = 2, home = '/sys/fs/cgroup' .. (own:match('0::([^\n]*)') or '/'):gsub('/$', ''),
      path = fmt('/sys/fs/cgroup/%s-%d', name, pid), limit_file = 'memory.max', swap_file = 'memory.swap.max',
      swap_value = '0', peak_file = 'memory.peak', events_file = 'memory.events' }
  else
    return nil, 'no memory cgroup here (/sys/fs/cgroup); run as root on Linux with cgroups'
  end
  local ok, err = pcall(zl.core.mkdirs, cg.path)
  if not ok then return nil, fmt('cannot make %s: %s', cg.path, require('zlua.args').message(err)) end
  cg.procs = cg.path .. '/cgroup.procs'
  setmetatable(cg, CG)
  local wok, werr = write(cg.path .. '/' .. cg.limit_file, tostring(bytes))
  if not wok then
    os.remove(cg.path)
    return nil, fmt('cannot limit %s: %s', cg.path, werr)
  end
  write(cg.path .. '/' .. cg.swap_file, cg.swap_value)
  return cg
end

--- cg:join(pid) -> true, or nil and why.
function CG:join(pid)
  local ok, err = write(self.procs, tostring(pid))
  if not ok then return nil, fmt('cannot move process %d into %s: %s', pid, self.path, err) end
  return true
end

--- cg:peak() -> the most memory the cgroup has been charged, bytes, or nil.
function CG:peak() return tonumber((read(self.path .. '/' .. self.peak_file) or ''):match('%d+')) end

--- cg:oom_kills() -> how many processes the kernel killed for the limit (0 where not counted).
function CG:oom_kills() return tonumber((read(self.path .. '/' .. self.events_file) or ''):match('oom_kill (%d+)')) or 0 end

--- cg:remove([pid]) -> true, or nil and why: pid back to the cgroup it came
--- from, then the cgroup, which must hold no process by then, removed.
function CG:remove(pid)
  if pid then write(self.home .. '/cgroup.procs', tostring(pid)) end
  local ok, err = os.remove(self.path)
  if not ok then return nil, fmt('cannot remove %s: %s', self.path, err) end
  return true
end

return cgroup
