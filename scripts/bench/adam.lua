--[[ The Adam/AdamW benchmark: step time, params/s and GB/s of the fused CPU
  update, through the optimizer objects and through the raw kernel, against
  this machine's memory bandwidth measured in the same run and against
  torch.optim.AdamW when PyTorch is installed. Run by hand (CTest's
  bench.adam_quick runs it on 100K parameters only to see that it works):
    zlua scripts/bench/adam.lua [--threads N] [--sizes 10e6,100e6] [--repeat K]
        [--block SECONDS] [--wait SECONDS] [--tensors T] [--kernel NAME] [--no-torch]

  Bytes are counted as they cross the memory bus: Adam reads p, g, m, v and
  writes p, m, v back to the lines it read, 28 B per parameter. The ceiling is
  stream.c beside this file, built here with cc: threaded loops that move the
  same bytes with next to no arithmetic. Without a C compiler the ceiling falls
  back to the fastest streaming figure of zlua's own (a lower bound).

  The machine is shared, so the cases of one size run interleaved: K rounds,
  each timing one block of every case, each started when the rest of the
  machine has been quiet for half a second (or after --wait seconds). A burst
  of other work then slows one round of every case, not every round of one. ]]

local zl = require 'zlua'
local optim = require 'zlua.optim'
local core = zl.core
local fmt = string.format

local function usage(msg)
  io.stderr:write('adam.lua: ', msg, '\n',
    'usage: zlua scripts/bench/adam.lua [--threads N] [--sizes 10e6,100e6] [--repeat K]\n',
    '         [--block SECONDS] [--wait SECONDS] [--tensors T] [--kernel NAME] [--no-torch]\n')
  os.exit(2)
end

local function positive_int(opt, s)
  local v = math.tointeger(tonumber(s or ''))
  if not v or v < 1 then usage(fmt('%s needs a positive integer, got %s', opt, tostring(s))) end
  return v
end

local function positive_num(opt, s)
  local v = tonumber(s or '')
  if not v or v <= 0 then usage(fmt('%s needs a positive number of seconds, got %s', opt, tostring(s))) end
  return v
end

local opts = { threads = zl.get_num_threads(), sizes = { 10000000, 100000000 }, repeats = 10,
  block = 0.3, wait = 30, tensors = 4, torch = true }
do
  local i = 1
  while i <= #arg do
    local a, v = arg[i], arg[i + 1]
    i = i + 2
    if a == '--threads' then opts.threads = positive_int(a, v)
    elseif a == '--repeat' then opts.repeats = positive_int(a, v)
    elseif a == '--tensors' then opts.tensors = positive_int(a, v)
    elseif a == '--block' then opts.block = positive_num(a, v)
    elseif a == '--wait' then opts.wait = positive_num(a, v)
    elseif a == '--sizes' then
      opts.sizes = {}
      for s in (v or ''):gmatch('[^,]+') do opts.sizes[#opts.sizes + 1] = positive_int(a, s) end
      if #opts.sizes == 0 then usage('--sizes needs a comma-separated list, e.g. 10e6,100e6') end
    elseif a == '--kernel' then opts.kernel = v or usage('--kernel needs a name (avx512, avx2, scalar)')
    elseif a == '--no-torch' then opts.torch, i = false, i - 1   -- it takes no value
    else usage('unknown option ' .. tostring(a)) end
  end
end
for _, n in ipairs(opts.sizes) do
  if n < opts.tensors then usage(fmt('size %d is smaller than --tensors %d', n, opts.tensors)) end
end
zl.set_num_threads(opts.threads)
if opts.kernel then optim.kernel(opts.kernel) end

local function run(cmd)
  local f = assert(io.popen(cmd))
  local out = f:read('a')
  local ok, _, code = f:close()
  return out, ok and 0 or code
end

local median = require('zlua.util.stats').median

-- ---------------------------------------------------------------------------
-- Wall time: the engine's monotonic clock (os.clock() would add up the CPU
-- time of every thread). The cost of one reading is measured below and
-- printed; it is far below a block's --block seconds.

local function clock_ns()
  return math.floor(zl.core.now() * 1e9)
end

local clock_cost
do
  local d = {}
  for k = 1, 9 do
    local a = clock_ns()
    d[k] = clock_ns() - a
  end
  clock_cost = median(d) / 1e9
end

-- ---------------------------------------------------------------------------
-- Load: the machine's busy time from /proc/stat less this process's own CPU
-- time and that of its children (stream), in cores.

local ncpu = tonumber((run('nproc'):match('%d+'))) or 1
local hz = tonumber((run('getconf CLK_TCK'):match('%d+'))) or 100

local function read_line(path)
  local f = io.open(path)
  if not f then return nil end
  local line = f:read('l')
  f:close()
  return line
end

local function machine_busy()
  local line = read_line('/proc/stat')
  if not line then return nil end
  local v = {}
  for x in line:gmatch('%d+') do v[#v + 1] = tonumber(x) end
  local busy = 0
  for k = 1, 8 do busy = busy + (v[k] or 0) end   -- guest time is already in user
  return busy - v[4] - (v[5] or 0)
end

-- utime + stime + cutime + cstime: fields 14 to 17, after the ')' that ends the name.
local function own_busy()
  local line = read_line('/proc/self/stat')
  local f = {}
  for x in (line or ''):match('%)(.*)$'):gmatch('%S+') do f[#f + 1] = x end
  return tonumber(f[12]) + tonumber(f[13]) + tonumber(f[14]) + tonumber(f[15])
end

local function load_mark()
  return { busy = machine_busy(), own = own_busy(), wall = clock_ns() }
end

-- Cores kept busy by other work since the mark, or nil without /proc/stat.
local function others_since(m)
  if not m.busy then return nil end
  local wall = (clock_ns() - m.wall) / 1e9
  return math.max(((machine_busy() - m.busy) - (own_busy() - m.own)) / hz / wall, 0)
end

local quiet = 0.15   -- cores of other work below which the machine counts as quiet

-- Waits until other work used under `quiet` cores for half a second, or
-- opts.wait seconds have passed; returns the seconds waited.
local function wait_quiet()
  local t0 = clock_ns()
  while true do
    local m = load_mark()
    os.execute('sleep 0.5')
    local others = others_since(m)
    local waited = (clock_ns() - t0) / 1e9
    if not others or others < quiet or waited >= opts.wait then return waited end
  end
end

local function top_processes()
  local out = run('ps -eo pcpu,comm --sort=-pcpu 2>/dev/null | head -6')
  local busy = {}
  for pcpu, comm in out:gmatch('\n%s*([%d.]+)%s+([^\n]+)') do
    if tonumber(pcpu) >= 5 and comm ~= 'zlua' and comm ~= 'ps' then
      busy[#busy + 1] = fmt('%s %s%%', comm, pcpu)
    end
  end
  return #busy > 0 and table.concat(busy, ', ') or 'none above 5%'
end

-- ---------------------------------------------------------------------------
-- The ceiling program, built once per run from stream.c beside this script.

local stream_exe, stream_why
do
  local here = (arg[0] or ''):match('^(.*)/[^/]*$') or '.'
  local exe = os.tmpname()
  local out, rc = run(fmt('cc -O3 -march=native -fopenmp -o %s %s/stream.c 2>&1', exe, here))
  if rc == 0 then
    stream_exe = exe
  else
    os.remove(exe)
    stream_why = 'cannot build stream.c: ' .. (out:match('^([^\n]*)') or 'cc failed')
  end
end

-- ---------------------------------------------------------------------------
-- One size: every case, K interleaved rounds. The buffers are shared between
-- cases (only their traffic matters, and every update keeps values bounded),
-- so 100M parameters need about 5 GB here and 1.6 GB in stream.

local function label(n)
  if n % 1000000 == 0 then return (n // 1000000) .. 'M' end
  if n % 1000 == 0 then return (n // 1000) .. 'K' end
  return tostring(n)
end

local function bench_size(n)
  local cases, owned = {}, {}
  local function case(group, name, bytes, fn)
    local c = { group = group, name = name, bytes = bytes, fn = fn, times = {} }
    cases[#cases + 1] = c
    return c
  end
  local function new(t) owned[#owned + 1] = t return t end

  local stream = {}
  if stream_exe then
    stream.copy = case('ceiling', 'C loop, memcpy per thread (stream.c)', 8)
    stream.adam = case('ceiling', 'C loop, Adam\'s traffic (stream.c)', 28)
    stream.copy.stream, stream.adam.stream = 'copy', 'adam'
  end

  local src, dst = new(zl.randn(n)), new(zl.empty(n))
  case('copy', 'copy_ f32 -> f32 (glibc memcpy, 1 thread)', 8, function() dst:copy_(src) end)

  local p, g, m, v = new(zl.randn(n)), new(zl.randn(n)), new(zl.zeros(n)), new(zl.zeros(n))
  local sgd_hp = { lr = 1e-3, momentum = 0.9, step = 2 }
  case('reference', 'sgd momentum kernel (in place)', 20, function() core.optim_sgd(p, g, m, nil, sgd_hp) end)
  for _, adamw in ipairs({ false, true }) do
    local hp = { lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01,
      adamw_mode = adamw, step = 0 }
    case(adamw and 'adamw' or 'adam', 'core.optim_adam (raw kernel, 1 tensor)', 28, function()
      hp.step = hp.step + 1
      core.optim_adam(p, g, m, v, hp)
    end).raw = true
  end

  local params, each = {}, n // opts.tensors
  for k = 1, opts.tensors do
    local len = k < opts.tensors and each or n - each * (opts.tensors - 1)
    params[k] = new(zl.randn(len))
    params[k].grad = new(zl.randn(len))
  end
  local optimizers = {}
  for _, name in ipairs({ 'Adam', 'AdamW' }) do
    local opt = optim[name](params, { lr = 1e-3, weight_decay = 0.01 })
    optimizers[#optimizers + 1] = opt
    case(name:lower(), fmt('optim.%s (%d tensors)', name, opts.tensors), 28, function() opt:step() end)
  end

  -- Warm-up (first touches, optimizer state), then each block sized to --block.
  for _, c in ipairs(cases) do
    if c.fn then
      c.fn()
      c.fn()
      local t0 = clock_ns()
      c.fn()
      c.per = math.max(1, math.ceil(opts.block / math.max((clock_ns() - t0) / 1e9, 1e-6)))
    end
  end

  local others, waited = {}, 0
  for r = 1, opts.repeats do
    collectgarbage()
    waited = waited + wait_quiet()
    local mark = load_mark()
    if stream_exe then
      local out = run(fmt('%s %d %d 1 %s', stream_exe, n, opts.threads, opts.block))
      for what, med in out:gmatch('(%a+) %d+ (%S+) %S+ %S+') do
        if stream[what] then stream[what].times[r] = tonumber(med) end
      end
    end
    for _, c in ipairs(cases) do
      if c.fn then
        local a = clock_ns()
        for _ = 1, c.per do c.fn() end
        c.times[r] = (clock_ns() - a) / 1e9 / c.per
      end
    end
    others[#others + 1] = others_since(mark)
  end

  for _, opt in ipairs(optimizers) do
    for _, st in pairs(opt.state) do owned[#owned + 1] = st.exp_avg; owned[#owned + 1] = st.exp_avg_sq end
  end
  for _, t in ipairs(owned) do t:release() end
  collectgarbage()
  for _, c in ipairs(cases) do
    if #c.times ~= opts.repeats then error('adam.lua: stream.c gave no timing for ' .. c.name) end
    c.med, c.lo, c.hi = median(c.times)
  end
  return { cases = cases, others = others, waited = waited }
end

-- ---------------------------------------------------------------------------
-- PyTorch, in a child process, on the same sizes, tensor split and threads,
-- with the same wait for a quiet machine before each block.

local torch_program = [==[
import math, os, sys, time, warnings
warnings.filterwarnings('ignore', message='Failed to initialize NumPy')
import torch

sizes = [int(s) for s in sys.argv[1].split(',')]
threads, repeats, tensors = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
block, wait, quiet = float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
torch.set_num_threads(threads)
print('version', torch.__version__, torch.get_num_threads(), flush=True)
HZ = os.sysconf('SC_CLK_TCK')

def machine_busy():
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4]

def own_busy():
    t = os.times()
    return (t.user + t.system) * HZ

def others_since(mark):
    b, o, t = mark
    return max((machine_busy() - b - (own_busy() - o)) / HZ / (time.monotonic() - t), 0.0)

def mark():
    return machine_busy(), own_busy(), time.monotonic()

def wait_quiet():
    t0 = time.monotonic()
    while True:
        m = mark()
        time.sleep(0.5)
        if others_since(m) < quiet or time.monotonic() - t0 >= wait:
            return

variants = [('foreach=False', {'foreach': False}), ('foreach=True', {'foreach': True})]
try:
    probe = torch.zeros(64)
    probe.grad = torch.ones(64)
    torch.optim.AdamW([probe], fused=True).step()
    variants.append(('fused=True', {'fused': True}))
except (RuntimeError, TypeError, ValueError) as e:
    print('nofused', str(e).splitlines()[0] if str(e) else type(e).__name__, flush=True)

for n in sizes:
    each = n // tensors
    lens = [each] * (tensors - 1) + [n - each * (tensors - 1)]
    for name, kw in variants:
        params = [torch.randn(k) for k in lens]
        for p in params:
            p.grad = torch.randn(p.shape[0])
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)
        opt.step(); opt.step()
        t0 = time.perf_counter(); opt.step()
        per = max(1, math.ceil(block / max(time.perf_counter() - t0, 1e-6)))
        times, others = [], []
        for _ in range(repeats):
            wait_quiet()
            m = mark()
            t0 = time.perf_counter()
            for _ in range(per):
                opt.step()
            times.append((time.perf_counter() - t0) / per)
            others.append(others_since(m))
        times.sort()
        others.sort()
        h = len(times) // 2
        med = times[h] if len(times) % 2 else (times[h - 1] + times[h]) / 2
        print('result', name, n, repr(med), repr(times[0]), repr(times[-1]), repr(others[h]), flush=True)
        del opt, params
]==]

-- Returns {version=, threads=, nofused=, [n] = {{variant=, med=, lo=, hi=, others=}, ...}}, or nil and why.
local function bench_torch()
  local check, code = run('python3 -c "import torch" 2>&1')
  if code ~= 0 then
    local last = check:match('([^\n]+)\n?$') or 'python3 failed'
    return nil, last .. '; install PyTorch with `python3 -m pip install torch` to compare'
  end
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write(torch_program)
  f:close()
  local list = {}
  for k, n in ipairs(opts.sizes) do list[k] = tostring(n) end
  -- OpenBLAS settings a machine's environment may pin (bench/machine.lua's ENV) slow a PyPI build; zlua's
  -- Adam makes no BLAS call.
  local out, rc = run(fmt('env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 %s %s %d %d %d %s %s %s 2>&1',
    path, table.concat(list, ','), opts.threads, opts.repeats, opts.tensors, opts.block, opts.wait, quiet))
  os.remove(path)
  if rc ~= 0 then return nil, 'the torch run failed: ' .. (out:match('([^\n]+)\n?$') or 'no output') end
  local res = {}
  for line in out:gmatch('[^\n]+') do
    local ver, thr = line:match('^version (%S+) (%d+)')
    if ver then res.version, res.threads = ver, tonumber(thr) end
    local why = line:match('^nofused (.*)')
    if why then res.nofused = why end
    local variant, n, med, lo, hi, others = line:match('^result (%S+) (%d+) (%S+) (%S+) (%S+) (%S+)')
    if variant then
      n = math.tointeger(tonumber(n))
      res[n] = res[n] or {}
      table.insert(res[n], { variant = variant, med = tonumber(med), lo = tonumber(lo), hi = tonumber(hi),
        others = tonumber(others) })
    end
  end
  return res
end

-- ---------------------------------------------------------------------------
-- The run.

print(fmt('zlua %s, Adam/AdamW benchmark: %d threads, optimizer kernel %s, %d rounds of >= %.2f s blocks',
  zl.version, zl.get_num_threads(), optim.kernel(), opts.repeats, opts.block))
local cpu = run('lscpu 2>/dev/null'):match('Model name:%s*([^\n]+)') or 'unknown CPU'
print(fmt('cpu: %s, %d cores; clock: monotonic, %.4f ms a reading (%.4f%% of a %.2f s block)',
  cpu, ncpu, clock_cost * 1e3, clock_cost / opts.block * 100, opts.block))
do
  local m = load_mark()
  os.execute('sleep 1')
  local others = others_since(m)
  print(fmt('load at start: %s cores of other work; top processes: %s',
    others and fmt('%.2f', others) or 'unknown', top_processes()))
end

local results = {}
for k, n in ipairs(opts.sizes) do
  io.stderr:write(fmt('adam.lua: timing %s parameters ...\n', label(n)))
  results[k] = bench_size(n)
end

local torch, torch_why
if opts.torch then
  io.stderr:write('adam.lua: timing torch.optim.AdamW ...\n')
  torch, torch_why = bench_torch()
else
  torch_why = 'skipped (--no-torch)'
end
if torch then
  print(fmt('torch %s, %d threads, AdamW%s', torch.version, torch.threads,
    torch.nofused and ' (no fused CPU AdamW: ' .. torch.nofused .. ')' or ''))
else
  print('torch: ' .. torch_why)
end

local function gbs(c, t) return c.bytes * c.n / t / 1e9 end
local function row(name, med, lo, hi, n, bytes)
  print(fmt('  %-48s %9.2f (%7.2f-%7.2f) %10.1f %8.2f %5d', name, med * 1e3, lo * 1e3, hi * 1e3,
    n / med / 1e6, bytes * n / med / 1e9, bytes))
end

for k, n in ipairs(opts.sizes) do
  local res = results[k]
  local load = 'unknown (no /proc/stat)'
  if #res.others > 0 then
    local quiet_rounds = 0
    for _, o in ipairs(res.others) do if o < quiet then quiet_rounds = quiet_rounds + 1 end end
    local med, lo, hi = median(res.others)
    load = fmt('%.2f cores (median; %.2f-%.2f), %d of %d rounds quiet (< %.2f)', med, lo, hi, quiet_rounds,
      opts.repeats, quiet)
  end
  print()
  print(fmt('%s parameters (%d): other work during the rounds %s, %.0f s spent waiting', label(n), n, load,
    res.waited))
  print(fmt('  %-48s %26s %10s %8s %5s', 'what', 'ms per pass: median (min-max)', 'M/s', 'GB/s', 'B/el'))
  -- The ceiling is stream.c's Adam-traffic loop; failing that, the fastest
  -- streaming figure of zlua's own (a lower bound on the true ceiling).
  local ceiling, copy, best = nil, nil, {}
  for _, c in ipairs(res.cases) do
    c.n = n
    c.gbs = gbs(c, c.med)
    row(c.group .. ': ' .. c.name, c.med, c.lo, c.hi, n, c.bytes)
    if c.stream == 'adam' then ceiling = c end
    if (c.stream == 'copy' or c.group == 'copy') and (not copy or c.gbs > copy.gbs) then
      copy = c
    end
    best[c.group .. (c.raw and '.raw' or '')] = c
  end
  ceiling = ceiling or (copy.gbs >= best.reference.gbs and copy or best.reference)
  local tr = torch and torch[n] or {}
  for _, t in ipairs(tr) do
    row(fmt('torch: AdamW %s (other work %.2f)', t.variant, t.others), t.med, t.lo, t.hi, n, 28)
  end
  print(fmt('  ceiling: %s, %.2f GB/s%s', ceiling.name, ceiling.gbs,
    stream_exe and '' or ' (' .. stream_why .. '; a lower bound)'))
  for _, grp in ipairs({ 'adam', 'adamw' }) do
    local c, raw = best[grp], best[grp .. '.raw']
    -- Per round, the case against the ceiling timed beside it.
    local per_round = {}
    for r = 1, opts.repeats do per_round[r] = ceiling.times[r] * c.bytes / ceiling.bytes / c.times[r] end
    local _, rlo, rhi = median(per_round)
    local line = fmt('%s %s: %.1f GB/s (median of %d; %.1f-%.1f; raw kernel %.1f), copy %.1f GB/s, ' ..
      'ceiling %.1f GB/s, ratio %.2f (per round %.2f-%.2f)', grp, label(n), c.gbs, opts.repeats,
      gbs(c, c.hi), gbs(c, c.lo), raw.gbs, copy.gbs, ceiling.gbs, c.gbs / ceiling.gbs, rlo, rhi)
    if grp == 'adamw' then
      for _, t in ipairs(tr) do
        local x = t.med / c.med
        line = line .. fmt('; torch %s %.1f ms (zlua %.2fx %s)', t.variant, t.med * 1e3,
          x >= 1 and x or 1 / x, x >= 1 and 'faster' or 'slower')
      end
    end
    print(line)
  end
end
if stream_exe then os.remove(stream_exe) end
