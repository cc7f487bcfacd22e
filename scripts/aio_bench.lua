--[[ scripts/aio_bench.lua: how fast the aio engine writes and reads a folder (as
  DeepSpeed's ds_io / ds_nvme_tune): for each block size, queue depth and thread
  count, a file of --size is written then read back through the engine (O_DIRECT,
  so the page cache plays no part), --loops times; the medians are printed in GB/s
  (1e9 bytes), then the best combination as an "aio" block to paste into a config.
  With --fio, fio (libaio, O_DIRECT, sequential) moves the same file with the same
  block size, queue depth and threads, and the zlua/fio ratios are printed.
  Run by hand, not in CI:
    zlua scripts/aio_bench.lua --folder /nvme/tmp [--size 1G] [--block_sizes 128K,256K,1M]
        [--queue_depths 8,32,128] [--threads 1,2] [--loops 3] [--fio] ]]

local zl = require 'zlua'
local aio = require 'zlua.offload.aio'
local json = require 'zlua.json'

local fmt = string.format
local now = zl.core.now

local USAGE = [[
usage: zlua scripts/aio_bench.lua --folder DIR [--size 1G] [--block_sizes 128K,256K,1M]
                                  [--queue_depths 8,32,128] [--threads 1,2] [--loops 3] [--fio]
  --folder DIR        where the test file goes (made if missing; the file is removed after)
  --size N            bytes per file: 1G, 512M, 1048576 (K, M, G, T are powers of 1024)
  --block_sizes L     block_size values to try, multiples of 4K
  --queue_depths L    queue_depth values to try
  --threads L         intra_op_parallelism values to try
  --loops N           timed write+read rounds per combination; the median is reported
  --fio               also run fio with the same settings and print zlua/fio]]

local message = require('zlua.args').message
local o, die = require('zlua.args').script('aio_bench', USAGE, arg, { folder = '', size = '1G', block_sizes = '128K,256K,1M',
                                    queue_depths = '8,32,128', threads = '1,2', loops = 3, fio = false })
if o.folder == '' then die('--folder is required\n' .. USAGE) end
if o.loops < 1 then die('--loops must be at least 1') end

local UNITS = { [''] = 1, K = 1 << 10, M = 1 << 20, G = 1 << 30, T = 1 << 40 }

local function bytes(name, text)
  local num, unit = text:upper():match('^(%d+)([KMGT]?)I?B?$')
  if not num then die(fmt("--%s: '%s' is not a size (1G, 512M, 128K, 4096)", name, text)) end
  local n = math.tointeger(tonumber(num)) * UNITS[unit]
  if n <= 0 then die(fmt('--%s: %s must be positive', name, text)) end
  return n
end

local function list(name, text, parse)
  local out = {}
  for item in text:gmatch('[^,]+') do out[#out + 1] = parse(name, item) end
  if #out == 0 then die(fmt('--%s is empty', name)) end
  return out
end

local function count(name, text)
  local n = math.tointeger(tonumber(text))
  if not n or n < 1 then die(fmt("--%s: '%s' is not a positive whole number", name, text)) end
  return n
end

local size = bytes('size', o.size)
local block_sizes = list('block_sizes', o.block_sizes, bytes)
local queue_depths = list('queue_depths', o.queue_depths, count)
local threads = list('threads', o.threads, count)
for _, bs in ipairs(block_sizes) do
  if bs % 4096 ~= 0 then die(fmt('--block_sizes: %d is not a multiple of 4K', bs)) end
  for _, th in ipairs(threads) do
    -- fio's jobs each take size/threads from their own offset: whole blocks keep them equal.
    if size % (bs * th) ~= 0 then
      die(fmt('--size %d is not a whole number of %d-byte blocks per thread for %d threads', size, bs, th))
    end
  end
end

local function human(n)
  for _, u in ipairs({ 'T', 'G', 'M', 'K' }) do
    if n % UNITS[u] == 0 then return (n // UNITS[u]) .. u end
  end
  return tostring(n)
end

local median = require('zlua.util.stats').median

local mk_ok, mk_err = pcall(zl.core.mkdirs, o.folder)
if not mk_ok then die(message(mk_err)) end
local file = o.folder .. '/zlua_aio_bench.swp'

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local have_fio = false
if o.fio then
  have_fio = os.execute('command -v fio >/dev/null 2>&1') == true
  if not have_fio then
    print('aio_bench: fio is not installed; skipping the comparison (Debian: apt-get install fio)')
  end
end

-- One fio run: GB/s of a sequential read or write of the file.
local function fio(rw, bs, qd, th)
  local per = size // th
  local err = os.tmpname()
  local cmd = fmt('fio --name=zlua_%s --filename=%s --rw=%s --bs=%d --iodepth=%d --ioengine=libaio --direct=1 '
    .. '--size=%d --numjobs=%d --offset_increment=%d --thread --group_reporting --output-format=json 2>%s',
    rw, quote(file), rw, bs, qd, per, th, per, quote(err))
  local p = assert(io.popen(cmd))
  local out = p:read('a')
  p:close()
  local f = io.open(err)
  local stderr = f and f:read('a') or ''
  if f then f:close() end
  os.remove(err)
  local at = out:find('{', 1, true)
  local dok, v = pcall(json.decode, at and out:sub(at) or '')
  local job = dok and type(v) == 'table' and v.jobs and v.jobs[1]
  if not job or not job[rw] or not job[rw].bw_bytes then
    die(fmt('fio failed:\n%s\n%s%s', cmd, out, stderr))
  end
  return job[rw].bw_bytes / 1e9
end

local buf = aio.buffer(size, 'u8')
buf:fill_(90)

-- The timed rounds of one combination: write then read, --loops times.
local function run(bs, qd, th)
  local e = aio.new{ block_size = bs, queue_depth = qd, intra_op_parallelism = th }
  local w, r = {}, {}
  e:write(file, buf):wait()   -- untimed: the file's blocks are allocated once
  for i = 1, o.loops do
    local t0 = now()
    e:write(file, buf):wait()
    local t1 = now()
    e:read(file, buf):wait()
    local t2 = now()
    w[i], r[i] = size / (t1 - t0) / 1e9, size / (t2 - t1) / 1e9
  end
  local direct = e:is_direct()
  e:close()
  return median(w), median(r), direct
end

print(fmt('aio_bench: %s, a %s file, median of %d loops, GB/s = 1e9 bytes/s', o.folder, human(size), o.loops))
local head = fmt('%-10s %11s %7s  %10s %10s', 'block_size', 'queue_depth', 'threads', 'write GB/s', 'read GB/s')
if have_fio then head = head .. fmt('  %9s %9s  %7s %7s', 'fio write', 'fio read', 'w/fio', 'r/fio') end
print(head)

local best, warned = nil, false
for _, bs in ipairs(block_sizes) do
  for _, qd in ipairs(queue_depths) do
    for _, th in ipairs(threads) do
      local rok, w, r, direct = pcall(run, bs, qd, th)
      if not rok then os.remove(file) die(message(w)) end
      if not direct and not warned then
        print('note: this folder does not take O_DIRECT: figures include the page cache')
        warned = true
      end
      local line = fmt('%-10s %11d %7d  %10.3f %10.3f', human(bs), qd, th, w, r)
      if have_fio then
        local fw, fr = {}, {}
        for i = 1, o.loops do
          fw[i] = fio('write', bs, qd, th)
          fr[i] = fio('read', bs, qd, th)
        end
        local mw, mr = median(fw), median(fr)
        line = line .. fmt('  %9.3f %9.3f  %6.0f%% %6.0f%%', mw, mr, 100 * w / mw, 100 * r / mr)
      end
      print(line)
      -- The best is the fastest write-then-read of the file: a swap's round trip.
      local t = 1 / w + 1 / r
      if not best or t < best.t then best = { t = t, bs = bs, qd = qd, th = th, w = w, r = r } end
    end
  end
end
os.remove(file)

print(fmt('best (fastest write + read): block_size %s, queue_depth %d, intra_op_parallelism %d '
  .. '(write %.3f GB/s, read %.3f GB/s)', human(best.bs), best.qd, best.th, best.w, best.r))
print(fmt([[
"aio": {
  "block_size": %d,
  "queue_depth": %d,
  "intra_op_parallelism": %d,
  "single_submit": false,
  "overlap_events": true
}]], best.bs, best.qd, best.th))
