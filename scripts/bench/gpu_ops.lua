--[[ Per-op micro benchmark on a GPU: the ops of a GPT-2 124M training step at
  its shapes (batch 8 x 1024, 768 channels, 12 heads of 64, vocabulary 50257),
  zlua against PyTorch eager on the same GPU (gpu_ops_torch.py beside this,
  same shapes and dtypes). Each figure is the median of --iters calls, each
  timed alone between two device synchronisations: forward, and forward plus
  backward. The ratio is PyTorch's forward+backward ms over zlua's (above 1:
  zlua is faster). Run by hand or by scripts/gpu_check.sh (CTest runs two
  ops on the host only to see that it works):
    zlua scripts/bench/gpu_ops.lua [--dtypes f32,bf16] [--iters 20] [--ops layer_norm,linear,...] [--torch=false]
  The AdamW step (over GPT-2 124M's parameter shapes, f32 masters) is timed
  in f32 alone; its forward column is the step. ]]

local zl = require 'zlua'
local fmt = string.format
local median = require('zlua.util.stats').median

local args = zl.args(nil, { dtypes = 'f32,bf16', iters = 20, ops = '', torch = true, device = 'cuda' })
local B, T, C, H, V = 8, 1024, 768, 12, 50257
local N = B * T
local dev = args.device

-- --device cpu runs the same ops on the host (a check of this script, and
-- the CPU's figures).
local on_gpu = dev ~= 'cpu'
if on_gpu then
  local n, why = zl.cuda.device_count()
  if n == 0 then
    print('SKIP ' .. tostring(why))
    os.exit(77)
  end
end
local sync = on_gpu and zl.cuda.synchronize or function() end
local empty_cache = on_gpu and zl.cuda.empty_cache or function() end

local function list(s)
  local out = {}
  for w in tostring(s):gmatch('[^,%s]+') do out[#out + 1] = w end
  return out
end

local function random_ids(seed, n, shape)
  local ids = {}
  math.randomseed(seed)
  for i = 1, n do ids[i] = math.random(0, V - 1) end
  return zl.tensor(ids, 'i64'):view(table.unpack(shape)):to(dev)
end

local function randn(shape, dtype, grad)
  local t = zl.randn(shape):to(dev, dtype)
  if grad then t:requires_grad(true) end
  return t
end

-- Each op: a setup(dtype) returning fwd() -> output and the leaves whose
-- gradients it makes; bwd runs fwd then backward with a fixed gradient.
local OPS = {
  { 'layer_norm', function(dt)
    local x, w, b = randn({ N, C }, dt, true), randn({ C }, dt, true), randn({ C }, dt, true)
    return function() return zl.layer_norm(x, C, w, b) end, { x, w, b }
  end },
  { 'linear', function(dt)
    local x, w, b = randn({ N, C }, dt, true), randn({ 4 * C, C }, dt, true), randn({ 4 * C }, dt, true)
    return function() return zl.linear(x, w, b) end, { x, w, b }
  end },
  { 'gelu', function(dt)
    local x = randn({ N, 4 * C }, dt, true)
    return function() return x:gelu() end, { x }
  end },
  { 'attention', function(dt)
    local q, k, v = randn({ B, H, T, C // H }, dt, true), randn({ B, H, T, C // H }, dt, true),
      randn({ B, H, T, C // H }, dt, true)
    return function() return zl.attention(q, k, v, { causal = true }) end, { q, k, v }
  end },
  { 'embedding', function(dt)
    local w, idx = randn({ V, C }, dt, true), random_ids(1, N, { B, T })
    return function() return zl.embedding(idx, w) end, { w }
  end },
  { 'cross_entropy', function(dt)
    local logits, tgt = randn({ N, V }, dt, true), random_ids(2, N, { N })
    return function() return zl.cross_entropy(logits, tgt, { dtype = 'f32' }) end, { logits }
  end },
}

local function timed(fn)
  local ts = {}
  for i = 1, args.iters + 3 do
    sync()
    local t0 = zl.core.now()
    fn()
    sync()
    if i > 3 then ts[#ts + 1] = (zl.core.now() - t0) * 1e3 end
  end
  return (median(ts))
end

local ours = {}
local wanted = args.ops ~= '' and list(args.ops) or nil
local function want(name)
  if not wanted then return true end
  for _, w in ipairs(wanted) do if w == name then return true end end
  return false
end

for _, dt in ipairs(list(args.dtypes)) do
  for _, op in ipairs(OPS) do
    local name = op[1]
    if want(name) then
      local ok, err = pcall(function()
        local fwd, leaves = op[2](dt)
        local y = fwd()
        local g = y:numel() > 1 and zl.randn(y:shape()):to(dev, y:dtype()) or nil
        y = nil
        local f = timed(function() fwd() end)
        local fb = timed(function()
          for _, l in ipairs(leaves) do l.grad = nil end
          fwd():backward(g)
        end)
        ours[name .. ' ' .. dt] = { f, fb }
      end)
      if not ok then ours[name .. ' ' .. dt] = { why = tostring(err):gsub('\n.*', '') } end
      collectgarbage()
      empty_cache()
    end
  end
  if dt == 'f32' and want('adamw') then
    local ok, err = pcall(function()
      local nn, optim = require 'zlua.nn', require 'zlua.optim'
      zl.manual_seed(1)
      local model = nn.GPT { vocab_size = V, block_size = T, n_layer = 12, n_head = H, n_embd = C }
      model:to(dev)
      local params = model:parameters()
      for _, p in ipairs(params) do p.grad = zl.randn(p:shape()):to(dev) end
      local opt = optim.AdamW(params, { lr = 1e-4, weight_decay = 0.01 })
      local s = timed(function() opt:step() end)
      ours['adamw f32'] = { s, s }
    end)
    if not ok then ours['adamw f32'] = { why = tostring(err):gsub('\n.*', '') } end
    collectgarbage()
    empty_cache()
  end
end

-- PyTorch's figures: lines "OP name dtype fwd_ms fwdbwd_ms".
local theirs, torch_note = {}, nil
if args.torch and on_gpu then
  local here = arg[0]:match('^(.*)/[^/]*$') or '.'
  local p = io.popen(fmt('python3 %s/gpu_ops_torch.py --dtypes %s --iters %d %s 2>&1', here, args.dtypes, args.iters,
    wanted and ('--ops ' .. args.ops) or ''))
  local out = p:read('a')
  local _, _, code = p:close()
  for name, dt, f, fb in out:gmatch('OP (%S+) (%S+) (%S+) (%S+)') do theirs[name .. ' ' .. dt] = { tonumber(f), tonumber(fb) } end
  if code ~= 0 then torch_note = (out:match('SKIP ([^\n]*)') or out:match('([^\n]+)\n?$') or 'no output') end
  local version = out:match('version (%S+)')
  if version then torch_note = torch_note or ('PyTorch ' .. version) end
end

print(fmt('GPU ops at GPT-2 124M shapes (B %d, T %d, C %d, H %d, V %d), median of %d calls', B, T, C, H, V,
  args.iters))
print(fmt('%-14s %-5s %10s %10s %10s %10s %8s', 'op', 'dtype', 'zlua fwd', 'zlua f+b', 'torch fwd', 'torch f+b',
  'ratio'))
local failed = false
for _, dt in ipairs(list(args.dtypes)) do
  for _, name in ipairs({ 'layer_norm', 'linear', 'gelu', 'attention', 'embedding', 'cross_entropy', 'adamw' }) do
    local key = name .. ' ' .. dt
    local o, t = ours[key], theirs[key]
    if o then
      if o.why then
        failed = true
        print(fmt('%-14s %-5s failed: %s', name, dt, o.why))
      else
        print(fmt('%-14s %-5s %10.3f %10.3f %10s %10s %8s', name, dt, o[1], o[2], t and fmt('%.3f', t[1]) or '-',
          t and fmt('%.3f', t[2]) or '-', t and fmt('%.2fx', t[2] / o[2]) or '-'))
      end
    end
  end
end
if torch_note then print('torch: ' .. torch_note) end
os.exit(failed and 1 or 0)
