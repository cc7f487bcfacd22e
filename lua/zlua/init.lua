--[[ zlua: tensors and their ops for Lua scripts, over the C engine (zlua.core).

  local zl = require 'zlua'
  local x = zl.randn(4, 8)                      -- sizes as varargs ...
  local w = zl.zeros({8, 2}, 'bf16')            -- ... or one table, then a dtype
  local g = zl.zeros(8, 2, {device = 'cuda'})   -- on a GPU (x:cuda(), x:cpu(), x:to('cuda'))
  local y = (x:matmul(w:float()) * 2 + 1):relu()
  y:sum():backward()

Conventions (read these once):
  * Dimensions are 1-based, as Lua is: x:sum(1) sums the first dimension;
    negative dims count from the end (-1 is the last). 0 is an error. Index
    arguments are 1-based too: x:narrow(dim, start, len), x:select(dim, i),
    x:get(i, j), x[i]. The conversion lives only in this file; zlua.core is
    0-based, as the C engine is.
  * Index TENSORS are 0-based, as in PyTorch: the targets of cross_entropy
    are class ids 0..C-1, the indices of embedding and index_select are row
    ids 0..N-1, and argmax returns 0-based positions, so that
    logits:argmax(-1):eq(targets) works and data files need no rewriting.
  * dtypes are named 'f32' (the default), 'f16', 'bf16', 'i32', 'i64', 'u8',
    'bool'. zl.tensor infers i64 when every entry is a Lua integer, bool when
    every entry is a boolean, f32 otherwise; zl.arange gives i64 for integer
    arguments. Arithmetic on integer tensors works: the engine computes through
    f32 and casts back, so integers are exact up to 2^24. `/` always gives a
    float tensor, as Lua's `/` gives a float.
  * a == b is identity (the same engine tensor, whichever Lua value holds it;
    t.grad == t.grad). Use a:eq(b) for elementwise equality; < and <= are not
    defined (use lt, le, gt, ge, which give bool tensors).
  * Arithmetic operators + - * / ^ and unary minus work between tensors (with
    broadcasting) and between a tensor and a number in either order.
  * Tensors free their memory when collected; t:release() (or `local t <close>`)
    frees it at once. Using a released tensor raises "tensor was released".
    Engine memory, host and device, presses on the collector: growth by 64 MB
    (zl.set_gc_step) or by half the memory in use after the last collection,
    whichever is more, runs a full collection, and an allocation about to
    fail runs one first.
  * Errors are raised at the script's line, in these terms (1-based dims).
]]

local core = require 'zlua.core'

local type, select, getmetatable, error, tostring = type, select, getmetatable, error, tostring
local tointeger = math.tointeger
local fmt = string.format

local zl = {}
local Tensor = core.Tensor         -- the metatable of every tensor userdata
local methods = {}                 -- tensor methods; zl.Tensor, open for extension
local getters = {}                 -- read-only fields: t.grad, t.is_leaf, t.grad_fn
zl.Tensor = methods
zl.core = core
zl.version = core.version

local function is_tensor(x) return getmetatable(x) == Tensor end
zl.is_tensor = is_tensor

-- ---------------------------------------------------------------------------
-- Errors name the script's line: raise() points at the innermost caller that
-- is not one of zlua's own modules, however deep the wrappers go.

local getinfo = debug and debug.getinfo
--- zl.raise(msg): error() for zlua's modules, positioned at the script's line.
local function raise(msg)
  local level = 2
  while getinfo do
    local info = getinfo(level, 'Sl')
    if not info then break end
    if info.currentline > 0 and not info.source:find('^@zlua/') then error(msg, level) end
    level = level + 1
  end
  error(msg, 0)
end
zl.raise = raise

-- Argument conversion.

local function to_int(op, what, v)
  local i = tointeger(v)
  if not i then
    raise(fmt('%s: %s must be an integer, got %s', op, what,
              type(v) == 'number' and tostring(v) or type(v)))
  end
  return i
end

-- A 1-based (or negative) dim of a tensor with nd dims -> 0-based.
local function D(op, d, nd)
  d = to_int(op, 'dimension', d)
  if d > 0 and d <= nd then return d - 1 end
  if d < 0 and d >= -nd then return nd + d end
  if nd == 0 then
    raise(fmt('%s: dimension %d is out of range for a 0-d tensor (it has no dimensions)', op, d))
  end
  if d == 0 then
    raise(fmt('%s: dimension 0 is invalid: dimensions are 1-based (expected 1..%d or -%d..-1)',
              op, nd, nd))
  end
  raise(fmt('%s: dimension %d is out of range for a %d-d tensor (expected 1..%d or -%d..-1)',
            op, d, nd, nd, nd))
end

-- A 1-based (or negative) index into a dimension of size n -> 0-based.
local function I(op, i, n, what)
  what = what or 'index'
  i = to_int(op, what, i)
  if i > 0 and i <= n then return i - 1 end
  if i < 0 and i >= -n then return n + i end
  if i == 0 then
    raise(fmt('%s: %s 0 is invalid: indices are 1-based (expected 1..%d or -%d..-1)', op, what, n, n))
  end
  raise(fmt('%s: %s %d is out of range for a dimension of size %d (expected 1..%d or -%d..-1)',
            op, what, i, n, n, n))
end

-- An options table ({dtype=, device=}) rather than a table of sizes.
local function is_options(a)
  return type(a) == 'table' and not is_tensor(a) and (a.dtype ~= nil or a.device ~= nil)
end

-- Sizes as varargs or one table (not a tensor), then optional trailing
-- dtype string, generator and options table ({dtype=, device=}) in any order.
-- min is 0 for new tensors, -1 where -1 means "infer" or "keep" (reshape,
-- view, expand).
local Generator = core.Generator
local function shape_args(op, min, ...)
  local n = select('#', ...)
  local args = {...}
  local dtype, gen, device
  while n > 0 do
    local a = args[n]
    if a == nil then
      n = n - 1
    elseif type(a) == 'string' and not dtype then
      dtype, n = a, n - 1
    elseif getmetatable(a) == Generator and not gen then
      gen, n = a, n - 1
    elseif is_options(a) and not device then
      dtype, device, n = dtype or a.dtype, a.device or 'cpu', n - 1
    else
      break
    end
  end
  local src = args
  if n == 1 and type(args[1]) == 'table' and not is_tensor(args[1]) then
    src, n = args[1], #args[1]
  end
  local shape = {}
  for i = 1, n do
    local v = tointeger(src[i])
    if not v or v < min then
      raise(fmt('%s: size %d must be %s, got %s', op, i,
                min == 0 and 'a non-negative integer' or 'an integer >= -1', tostring(src[i])))
    end
    shape[i] = v
  end
  return shape, dtype, gen, device
end

-- A new tensor made on the host, moved to `device` when one was asked for.
local function on(t, device)
  if device and device ~= 'cpu' then return core.to_device(t, device) end
  return t
end

-- Dims as varargs or one table, each converted to 0-based.
local function dims_args(op, nd, ...)
  local src, n = {...}, select('#', ...)
  if n == 1 and type(src[1]) == 'table' then src, n = src[1], #src[1] end
  local out = {}
  for i = 1, n do out[i] = D(op, src[i], nd) end
  return out
end

-- The options each op takes: a key outside its list is an error naming it,
-- so a misspelt option is not silently ignored.
local OPTIONS = {
  var = { 'correction', 'unbiased', 'keepdim' }, std = { 'correction', 'unbiased', 'keepdim' },
  cross_entropy = { 'ignore_index', 'reduction', 'dtype', 'weight', 'label_smoothing' },
  mse_loss = { 'reduction' }, embedding = { 'padding_idx' },
  conv2d = { 'stride', 'padding', 'dilation', 'groups' }, max_pool2d = { 'stride', 'padding' },
  avg_pool2d = { 'stride', 'padding', 'count_include_pad', 'ceil_mode', 'divisor_override' },
  attention = { 'causal', 'is_causal', 'scale', 'mask', 'attn_mask' },
}

local function opts_or_empty(op, o)
  if o == nil then return {} end
  if type(o) ~= 'table' then raise(fmt('%s: options must be a table, got %s', op, type(o))) end
  local known = OPTIONS[op]
  for k in pairs(o) do
    local ok = false
    for _, name in ipairs(known) do ok = ok or k == name end
    if not ok then
      raise(fmt('%s: unknown option %s (expected %s)', op, tostring(k), table.concat(known, ', ')))
    end
  end
  return o
end

-- ---------------------------------------------------------------------------
-- Creation

--- zl.tensor(value [, dtype]): a tensor from a number, a boolean, a nested
--- table (ragged tables are an error naming the position), or a copy of a tensor.
function zl.tensor(value, dtype)
  if is_tensor(value) then
    local c = core.clone(core.detach(value))
    if dtype then c = core.to(c, dtype) end
    return c
  end
  return core.from_table(value, dtype)
end

function zl.zeros(...)
  local shape, dtype, _, device = shape_args('zeros', 0, ...)
  return on(core.zeros(shape, dtype), device)
end

function zl.ones(...)
  local shape, dtype, _, device = shape_args('ones', 0, ...)
  return on(core.full(shape, 1, dtype), device)
end

function zl.empty(...)
  local shape, dtype, _, device = shape_args('empty', 0, ...)
  return on(core.empty(shape, dtype), device)
end

--- zl.full(sizes..., value [, dtype | {dtype=, device=}]): zl.full(2, 3, 0.5) or zl.full({2, 3}, 0.5, 'bf16');
--- a boolean value gives a bool tensor unless a dtype is given, as torch.full.
function zl.full(...)
  local n = select('#', ...)
  local args = {...}
  local dtype, device
  if is_options(args[n]) then dtype, device, n = args[n].dtype, args[n].device, n - 1 end
  if type(args[n]) == 'string' then dtype, n = args[n], n - 1 end
  local value = args[n]
  if type(value) ~= 'number' and type(value) ~= 'boolean' then
    raise(fmt('full: the fill value must be a number or a boolean, got %s', type(value)))
  end
  -- As torch.full: a boolean fills a bool tensor unless a dtype is given.
  if type(value) == 'boolean' and dtype == nil then dtype = 'bool' end
  local shape = shape_args('full', 0, table.unpack(args, 1, n - 1))
  return on(core.full(shape, value, dtype), device)
end

--- zl.rand(sizes... [, dtype] [, generator]): uniform in [0, 1).
function zl.rand(...)
  local shape, dtype, gen, device = shape_args('rand', 0, ...)
  return on(core.rand(shape, dtype, gen), device)
end

--- zl.randn(sizes... [, dtype] [, generator]): standard normal.
function zl.randn(...)
  local shape, dtype, gen, device = shape_args('randn', 0, ...)
  return on(core.randn(shape, dtype, gen), device)
end

-- The values of zl.arange from its n leading arguments, on the host.
local function arange_values(n, args, dtype)
  local start, stop, step = 0, args[1], 1
  if n >= 2 then start, stop = args[1], args[2] end
  if n >= 3 then step = args[3] end
  if type(start) ~= 'number' or type(stop) ~= 'number' or type(step) ~= 'number' then
    raise('arange: expected numbers: arange(n) or arange(start, stop [, step])')
  end
  if step == 0 then raise('arange: step must not be zero') end
  local ints = tointeger(start) and tointeger(stop) and tointeger(step)
  dtype = dtype or (ints and 'i64' or 'f32')
  local count = math.max(0, math.ceil((stop - start) / step))
  if start == 0 and step == 1 then return core.arange(count, dtype) end
  if ints then
    local t = core.arange(count, dtype)
    return core.add(core.mul(t, core.scalar(step, dtype)), core.scalar(start, dtype))
  end
  return core.to(core.affine(core.arange(count, 'f32'), step, start), dtype)
end

--- zl.arange(n [, dtype]) is 0, 1, ..., n-1; zl.arange(start, stop [, step] [, dtype])
--- is start, start+step, ... below stop. i64 when the arguments are integers, else f32.
--- An options table {dtype=, device=} may stand in place of the dtype.
function zl.arange(...)
  local n = select('#', ...)
  local args = {...}
  local dtype, device
  if type(args[n]) == 'string' then dtype, n = args[n], n - 1
  elseif is_options(args[n]) then dtype, device, n = args[n].dtype, args[n].device, n - 1 end
  return on(arange_values(n, args, dtype), device)
end

--- zl.randperm(n [, generator]): a random permutation of 0..n-1 (i64).
function zl.randperm(n, gen) return core.randperm(n, gen) end

local function like(fill)
  return function(t, dtype, ...)
    local shape = core.shape(t)
    return fill(shape, dtype or core.dtype(t), ...)
  end
end
zl.zeros_like = like(function(s, d) return core.zeros(s, d) end)
zl.ones_like = like(function(s, d) return core.full(s, 1, d) end)
zl.empty_like = like(function(s, d) return core.empty(s, d) end)
zl.rand_like = like(function(s, d, g) return core.rand(s, d, g) end)
zl.randn_like = like(function(s, d, g) return core.randn(s, d, g) end)
function zl.full_like(t, value, dtype) return core.full(core.shape(t), value, dtype or core.dtype(t)) end

-- ---------------------------------------------------------------------------
-- Inspection and element access

-- A shape prints as [2, 3] (at the prompt too) and equals another shape of
-- the same sizes, as torch.Size does; it is still a list of integers.
local Size = { __name = 'zlua.Size' }
function Size.__tostring(s)
  local out = {}
  for i, v in ipairs(s) do out[i] = tostring(v) end
  return '[' .. table.concat(out, ', ') .. ']'
end
function Size.__eq(a, b)
  if getmetatable(a) ~= Size or getmetatable(b) ~= Size or #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

--- t:shape(): the sizes as a list ({2, 3}), printed as [2, 3].
function methods.shape(t) return setmetatable(core.shape(t), Size) end
methods.numel = core.numel
methods.dim = core.dim
methods.dtype = core.dtype
methods.is_float = core.is_float
methods.is_contiguous = core.is_contiguous
methods.storage_offset = core.storage_offset
methods.device = core.device
methods.category = core.category
methods.set_category = core.set_category
methods.set_data = core.set_data
methods.shares_storage = core.shares_storage
methods.id = core.id
methods.item = core.item
methods.totable = core.totable
methods.release = core.release
methods.is_released = core.is_released

--- t:size() is the shape (t:shape()); t:size(dim) one size.
function methods.size(t, d)
  if d == nil then return methods.shape(t) end
  return core.size(t, D('size', d, core.dim(t)))
end

--- t:stride() is the strides (in elements) as a table; t:stride(dim) one stride.
function methods.stride(t, d)
  local s = core.strides(t)
  if d == nil then return s end
  return s[D('stride', d, #s) + 1]
end

-- Linear (0-based) position of a 1-based full index or a 1-based linear index.
local function position(op, t, idx, n)
  local shape = core.shape(t)
  local nd = #shape
  if n == 1 and nd ~= 1 then return I(op, idx[1], core.numel(t)) end
  if n ~= nd then
    raise(fmt('%s: expected %d indices (or one linear index) for a %d-d tensor, got %d',
              op, nd, nd, n))
  end
  local lin = 0
  for k = 1, nd do lin = lin * shape[k] + I(op, idx[k], shape[k]) end
  return lin
end

--- t:get(i) by linear index or t:get(i, j, ...) by full index, 1-based.
function methods.get(t, ...)
  return core.get(t, position('get', t, {...}, select('#', ...)))
end

--- t:set(i, value) or t:set(i, j, ..., value).
function methods.set(t, ...)
  local n = select('#', ...)
  local args = {...}
  core.set(t, position('set', t, args, n - 1), args[n])
  return t
end

-- ---------------------------------------------------------------------------
-- Views and copies

function methods.reshape(t, ...)
  return core.reshape(t, (shape_args('reshape', -1, ...)))
end

function methods.view(t, ...)
  return core.view(t, (shape_args('view', -1, ...)))
end

function methods.expand(t, ...)
  return core.expand(t, (shape_args('expand', -1, ...)))
end

function methods.expand_as(t, other) return core.expand(t, core.shape(other)) end
function methods.view_as(t, other) return core.view(t, core.shape(other)) end

function methods.transpose(t, a, b)
  local nd = core.dim(t)
  return core.transpose(t, D('transpose', a, nd), D('transpose', b, nd))
end

--- t:t(): the transpose of a 2-d tensor (a 1-d one is returned as is).
function methods.t(t)
  local nd = core.dim(t)
  if nd > 2 then raise(fmt('t: expects a tensor of at most 2 dims, got %d-d (use transpose)', nd)) end
  if nd < 2 then return t end
  return core.transpose(t, 0, 1)
end

function methods.permute(t, ...)
  local dims = dims_args('permute', core.dim(t), ...)
  -- A repeated dimension, said as the script counts (the engine counts from 0).
  local seen = {}
  for i, d in ipairs(dims) do
    if seen[d] then raise(fmt('permute: dimension %d appears twice (positions %d and %d)', d + 1, seen[d], i)) end
    seen[d] = i
  end
  return core.permute(t, dims)
end

--- t:narrow(dim, start, length): elements start .. start+length-1 along dim;
--- start may be one past the last element for an empty slice (torch's x[n:n]).
function methods.narrow(t, d, start, len)
  local nd = core.dim(t)
  local d0 = D('narrow', d, nd)
  local n = core.size(t, d0)
  len = to_int('narrow', 'length', len)
  start = to_int('narrow', 'start', start)
  local s0 = start >= 1 and start <= n + 1 and start - 1 or start < 0 and start >= -n and n + start
  if not s0 then
    raise(fmt('narrow: start %d is out of range for a dimension of size %d (expected 1..%d%s%s)', start, n, n + 1,
      n > 0 and fmt(' or -%d..-1', n) or '', start == 0 and '; indices are 1-based' or ''))
  end
  if len < 0 or s0 + len > n then
    raise(fmt('narrow: start %d and length %d run past the end of dimension %d (size %d)',
              s0 + 1, len, d0 + 1, n))
  end
  return core.narrow(t, d0, s0, len)
end

--- t:select(dim, i): the slice at index i along dim, with that dim removed.
function methods.select(t, d, i)
  local d0 = D('select', d, core.dim(t))
  return core.select(t, d0, I('select', i, core.size(t, d0)))
end

--- t:squeeze() drops every size-1 dim; t:squeeze(dim) that one if it has size 1.
function methods.squeeze(t, d)
  if d == nil then return core.squeeze(t) end
  return core.squeeze(t, D('squeeze', d, core.dim(t)))
end

--- t:unsqueeze(dim): a new size-1 dim at position dim (1..ndim+1, or negative).
function methods.unsqueeze(t, d)
  return core.unsqueeze(t, D('unsqueeze', d, core.dim(t) + 1))
end

--- t:flatten([start [, stop]]): dims start..stop merged into one (default all).
function methods.flatten(t, start, stop)
  local shape = core.shape(t)
  local nd = #shape
  if nd == 0 then return core.reshape(t, {1}) end
  local a = start and D('flatten', start, nd) or 0
  local b = stop and D('flatten', stop, nd) or nd - 1
  local out, m = {}, 1
  for k = 1, a do out[#out + 1] = shape[k] end
  for k = a + 1, b + 1 do m = m * shape[k] end
  out[#out + 1] = m
  for k = b + 2, nd do out[#out + 1] = shape[k] end
  return core.reshape(t, out)
end

methods.contiguous = core.contiguous
methods.clone = core.clone
methods.detach = core.detach

local function is_device_name(s) return s == 'cpu' or s:match('^cuda$') or s:match('^cuda:%d+$') end

--- t:to(dtype), t:to(device), t:to(device, dtype) or t:to{device=, dtype=}: a
--- copy in another dtype (differentiable between float dtypes) and/or on
--- another device ('cpu', 'cuda', 'cuda:N'; t itself when it is there).
function methods.to(t, a, b)
  local device, dtype
  if type(a) == 'table' then
    device, dtype = a.device, a.dtype
  else
    for _, v in ipairs({ a, b }) do
      if type(v) ~= 'string' then
        raise(fmt('to: expected a dtype (\'bf16\') or a device (\'cuda\', \'cpu\'), got %s', type(v)))
      end
      if is_device_name(v) then device = v else dtype = v end
    end
  end
  if not device and not dtype then raise('to: expected a dtype (\'bf16\') or a device (\'cuda\', \'cpu\')') end
  -- A dtype change runs on the CPU, so it happens on the host side of the move.
  if device and device ~= 'cpu' then
    if dtype then t = core.to(t, dtype) end
    return core.to_device(t, device)
  end
  if device then t = core.to_device(t, device) end
  if dtype then t = core.to(t, dtype) end
  return t
end
--- t:cuda([index]) and t:cpu(): t on that device (itself when it is there).
function methods.cuda(t, index) return core.to_device(t, 'cuda:' .. math.tointeger(index or 0)) end
function methods.cpu(t) return core.to_device(t, 'cpu') end
function methods.is_cuda(t) return core.device(t) ~= 'cpu' end
function methods.float(t) return core.to(t, 'f32') end
function methods.half(t) return core.to(t, 'f16') end
function methods.bf16(t) return core.to(t, 'bf16') end
methods.bfloat16 = methods.bf16
function methods.long(t) return core.to(t, 'i64') end
function methods.int(t) return core.to(t, 'i32') end
function methods.byte(t) return core.to(t, 'u8') end
function methods.bool(t) return core.to(t, 'bool') end

--- In place (no autograd); each returns t.
methods.copy_ = core.copy_
--- t:add_(src [, alpha]): t += alpha * src in place (src broadcast; any dtypes), no autograd.
methods.add_ = core.add_
methods.fill_ = core.fill_
function methods.zero_(t) return core.fill_(t, 0) end
function methods.uniform_(t, lo, hi, gen) return core.uniform_(t, lo or 0, hi or 1, gen) end
function methods.normal_(t, mean, std, gen) return core.normal_(t, mean or 0, std or 1, gen) end

-- ---------------------------------------------------------------------------
-- Arithmetic. A number operand is folded into one engine pass (x*s + a) when
-- the result is float; an integer tensor with an integer number stays integer
-- (the number becomes a 0-d tensor of the tensor's dtype).

local int_dtypes = { i32 = true, i64 = true, u8 = true }

local function int_pair(t, s)
  return tointeger(s) and int_dtypes[core.dtype(t)]
end

local function scalar_like(t, s)
  return core.scalar(s, core.is_float(t) and core.dtype(t) or (int_pair(t, s) and core.dtype(t) or 'f32'))
end

local function add(a, b)
  if type(a) == 'number' then a, b = b, a end
  if type(b) == 'number' then
    if int_pair(a, b) then return core.add(a, core.scalar(b, core.dtype(a))) end
    return core.affine(a, 1, b)
  end
  return core.add(a, b)
end

local function sub(a, b)
  if type(b) == 'number' then
    if int_pair(a, b) then return core.sub(a, core.scalar(b, core.dtype(a))) end
    return core.affine(a, 1, -b)
  end
  if type(a) == 'number' then
    if int_pair(b, a) then return core.sub(core.scalar(a, core.dtype(b)), b) end
    return core.affine(b, -1, a)
  end
  return core.sub(a, b)
end

local function mul(a, b)
  if type(a) == 'number' then a, b = b, a end
  if type(b) == 'number' then
    if int_pair(a, b) then return core.mul(a, core.scalar(b, core.dtype(a))) end
    return core.affine(a, b, 0)
  end
  return core.mul(a, b)
end

local function div(a, b)
  if type(b) == 'number' then return core.affine(a, 1 / b, 0) end
  if type(a) == 'number' then return core.div(scalar_like(b, a + 0.0), b) end
  if not core.is_float(a) and not core.is_float(b) then a = core.to(a, 'f32') end
  return core.div(a, b)
end

local function pow(a, b)
  if type(b) == 'number' then return core.pow_scalar(a, b) end
  if type(a) == 'number' then return core.pow(scalar_like(b, a + 0.0), b) end
  return core.pow(a, b)
end

local function compare(cfn)
  return function(a, b)
    if type(b) == 'number' then b = scalar_like(a, b) end
    return cfn(a, b)
  end
end

methods.add, methods.sub, methods.mul, methods.div, methods.pow = add, sub, mul, div, pow
methods.eq, methods.lt, methods.gt = compare(core.eq), compare(core.lt), compare(core.gt)
methods.ne, methods.le, methods.ge = compare(core.ne), compare(core.le), compare(core.ge)
methods.neg = core.neg
methods.exp = core.exp
methods.log = core.log
methods.sqrt = core.sqrt
methods.tanh = core.tanh
methods.sigmoid = core.sigmoid
methods.relu = core.relu
methods.abs = core.abs
methods.matmul = core.matmul

--- t:gelu([approximate]): exact (erf) GELU, or the tanh form when approximate
--- is true or 'tanh'.
function methods.gelu(t, approximate)
  return core.gelu(t, approximate == true or approximate == 'tanh')
end
methods.silu = core.silu
methods.sin = core.sin
methods.cos = core.cos
methods.log1p = core.log1p

local function number_or(op, what, v, default)
  if v == nil then return default end
  if type(v) ~= 'number' then raise(fmt('%s: %s must be a number, got %s', op, what, type(v))) end
  return v
end

--- t:softplus([beta = 1 [, threshold = 20]]): log(1 + exp(beta x)) / beta, and
--- x itself where beta x > threshold.
function methods.softplus(t, beta, threshold)
  return core.softplus(t, number_or('softplus', 'beta', beta, 1), number_or('softplus', 'threshold', threshold, 20))
end
--- t:leaky_relu([negative_slope = 0.01]).
function methods.leaky_relu(t, slope) return core.leaky_relu(t, number_or('leaky_relu', 'negative_slope', slope, 0.01)) end

--- t:clamp(min, max) or t:clamp{min =, max =}: either bound may be nil (no
--- bound on that side), not both. Integers stay integers for whole bounds.
--- The gradient passes strictly inside the bounds (torch's for number bounds).
function methods.clamp(t, lo, hi)
  if type(lo) == 'table' and hi == nil then lo, hi = lo.min, lo.max end
  if lo == nil and hi == nil then raise('clamp: at least one of min and max must be given') end
  return core.clamp(t, number_or('clamp', 'min', lo, -math.huge), number_or('clamp', 'max', hi, math.huge))
end

-- ---------------------------------------------------------------------------
-- Reductions: t:sum() over everything, t:sum(dim [, keepdim]) over one dim.

local ALL = core.ALL_DIMS
local function reducer(name, cfn)
  return function(t, d, keepdim)
    if d == nil then return cfn(t, ALL, keepdim and true or false) end
    return cfn(t, D(name, d, core.dim(t)), keepdim and true or false)
  end
end
-- A dim or a list of dims ({1, 3}), each 1-based, to a list of 0-based dims.
local function dims_list(op, t, d)
  local nd = core.dim(t)
  if type(d) ~= 'table' then return { D(op, d, nd) } end
  local out, seen = {}, {}
  for i = 1, #d do
    local d0 = D(op, d[i], nd)
    if seen[d0] then raise(fmt('%s: dimension %d appears more than once in the list of dims', op, d0 + 1)) end
    seen[d0], out[i] = true, d0
  end
  return out
end

-- sum and mean also take a list of dims: t:sum({1, 3} [, keepdim]).
local function dims_reducer(name, cfn, dims_cfn)
  local one = reducer(name, cfn)
  return function(t, d, keepdim)
    if type(d) == 'table' then return dims_cfn(t, dims_list(name, t, d), keepdim and true or false) end
    return one(t, d, keepdim)
  end
end
methods.sum = dims_reducer('sum', core.sum, core.sum_dims)
methods.mean = dims_reducer('mean', core.mean, core.mean_dims)
--- t:min([dim [, keepdim]]) and t:argmin(...): the minimal values, and the
--- 0-based positions (i64) of the first minimum.
methods.min = reducer('min', core.min)
methods.argmin = reducer('argmin', core.argmin)

-- var and std: t:var([dim or {dims}] [, {correction = 1, unbiased =, keepdim = false}]).
local function spread(op, cfn)
  return function(t, d, opts)
    if opts == nil and type(d) == 'table' and not is_tensor(d) and d[1] == nil and next(d) ~= nil then
      d, opts = nil, d
    end
    local o = opts_or_empty(op, opts)
    if o.correction ~= nil and o.unbiased ~= nil then raise(fmt('%s: give correction or unbiased, not both', op)) end
    local correction = number_or(op, 'correction', o.correction, 1)
    if o.unbiased ~= nil then correction = o.unbiased and 1 or 0 end
    return cfn(t, d == nil and {} or dims_list(op, t, d), correction, o.keepdim and true or false)
  end
end
--- t:var(...): the sum of squared deviations over count - correction (inf or
--- NaN where that is not positive, as torch's); t:std(...) its square root.
methods.var = spread('var', core.var)
methods.std = spread('std', core.std)
--- t:cumsum(dim): running sums along dim; integers give i64.
function methods.cumsum(t, d) return core.cumsum(t, D('cumsum', d, core.dim(t))) end
--- t:max([dim [, keepdim]]): the maximal values (use argmax for positions).
methods.max = reducer('max', core.max)
--- t:argmax([dim [, keepdim]]): 0-based positions (i64) of the first maximum.
methods.argmax = reducer('argmax', core.argmax)

--- t:softmax([dim]) and t:log_softmax([dim]); dim defaults to the last.
function methods.softmax(t, d) return core.softmax(t, D('softmax', d or -1, core.dim(t))) end
function methods.log_softmax(t, d) return core.log_softmax(t, D('log_softmax', d or -1, core.dim(t))) end

--- t:masked_fill(mask, value): value where mask (bool, broadcast to t) is true.
function methods.masked_fill(t, mask, value) return core.masked_fill(t, mask, value) end

-- A core error's message without the location Lua put before it (raise
-- gives the script's own).
local function bare(msg) return (tostring(msg):gsub('^[^\n]-:%d+: ', '', 1)) end

-- core's call, its message's dimensions counted from 1 as the script counts them.
local function dims_from_1(fn, ...)
  local ok, r = pcall(fn, ...)
  if ok then return r end
  raise((bare(r):gsub('dimension (%d+)', function(n)
    return 'dimension ' .. (tointeger(n) + 1)
  end)))
end

--- t:gather(dim, index): out[i][j] = t[index[i][j]][j] for dim 1 (and so on);
--- index (i64, 0-based values) has t's number of dims, no larger outside dim.
function methods.gather(t, d, index)
  return dims_from_1(core.gather, t, D('gather', d, core.dim(t)), index)
end
--- t:scatter(dim, index, src): a copy of t with src's elements (or a number)
--- written where index points along dim; t:scatter_add adds them instead.
function methods.scatter(t, d, index, src)
  if type(src) == 'number' and is_tensor(index) then src = core.full(core.shape(index), src, core.dtype(t)) end
  return dims_from_1(core.scatter, t, D('scatter', d, core.dim(t)), index, src)
end
function methods.scatter_add(t, d, index, src)
  return dims_from_1(core.scatter_add, t, D('scatter_add', d, core.dim(t)), index, src)
end

--- t:index_select(dim, index): rows picked along dim by a 1-d i64 tensor of
--- 0-based ids.
function methods.index_select(t, d, index)
  local d0 = D('index_select', d, core.dim(t))
  local ok, r = pcall(core.index_select, t, d0, index)
  if ok then return r end
  -- The engine counts dimensions from 0; the script from 1.
  raise((bare(r):gsub('for dimension %d+ of size', 'for dimension ' .. d0 + 1
    .. ' of size', 1)))
end

-- ---------------------------------------------------------------------------
-- Autograd

--- t:requires_grad() returns the flag; t:requires_grad(on) sets it, returns t.
function methods.requires_grad(t, on)
  if on == nil then return core.requires_grad(t) end
  core.set_requires_grad(t, on)
  return t
end
function methods.requires_grad_(t, on)
  core.set_requires_grad(t, on == nil or on)
  return t
end

--- t:backward([grad [, retain_graph]]): grad may be omitted for one element.
function methods.backward(t, grad, retain_graph)
  core.backward(t, grad, retain_graph)
end

function methods.zero_grad(t) core.set_grad(t, nil) end
--- t:set_grad_dtype(dtype): keep t's gradient in dtype (t's own or 'f32').
methods.set_grad_dtype = core.set_grad_dtype

--- t:register_hook(fn): fn(t) runs once per backward, when t's gradient is
--- complete (t must be a leaf). Returns a handle for t:remove_hook. An error
--- raised by fn aborts the backward with "backward: grad-ready hook failed: ...".
--- The engine keeps fn until the hook is removed or t is freed: read the
--- tensor from fn's argument, since a closure over t would keep t alive.
function methods.register_hook(t, fn)
  local ok, r = pcall(core.add_grad_ready_hook, t, fn)
  if ok then return r end
  -- The engine names its own function; the script called register_hook.
  raise((bare(r):gsub('^add_grad_ready_hook:', 'register_hook:', 1)
    :gsub("'zlua%.core%.add_grad_ready_hook'", "'register_hook'", 1)))
end
--- t:register_use_hook(fn): fn(t, event, op) runs around every op reading t;
--- event is 'before_forward', 'after_forward', 'before_backward' or
--- 'after_backward', op the op's name ('matmul'). An error raised by fn aborts
--- the op (or the backward) with "<op>: <event> hook failed: ...".
function methods.register_use_hook(t, fn) return core.add_use_hook(t, fn) end
methods.remove_hook = core.remove_hook

getters.grad = core.grad
getters.is_leaf = core.is_leaf
getters.grad_fn = core.grad_fn

--- zl.no_grad(fn, ...): runs fn with grad mode off, restores the previous mode
--- even when fn raises, and returns fn's results.
local function with_grad_mode(on, fn, ...)
  local prev = core.set_grad_enabled(on)
  local res = table.pack(pcall(fn, ...))
  core.set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end
function zl.no_grad(fn, ...) return with_grad_mode(false, fn, ...) end
function zl.enable_grad(fn, ...) return with_grad_mode(true, fn, ...) end
function zl.set_grad_enabled(on) return core.set_grad_enabled(on) end
zl.is_grad_enabled = core.is_grad_enabled

-- ---------------------------------------------------------------------------
-- Functional ops (methods double as functions: zl.sum(t, 1) == t:sum(1))

for _, name in ipairs({'add', 'sub', 'mul', 'div', 'pow', 'eq', 'lt', 'gt', 'neg', 'exp', 'log',
                       'sqrt', 'tanh', 'sigmoid', 'relu', 'gelu', 'abs', 'matmul', 'sum', 'mean',
                       'max', 'argmax', 'softmax', 'log_softmax', 'masked_fill', 'index_select',
                       'reshape', 'view', 'transpose', 'permute', 'narrow', 'select', 'squeeze',
                       'unsqueeze', 'flatten', 'clone', 'detach'}) do
  zl[name] = methods[name]
end
for _, name in ipairs({'ne', 'le', 'ge', 'silu', 'sin', 'cos', 'log1p', 'softplus', 'leaky_relu', 'clamp', 'min',
                       'argmin', 'var', 'std', 'cumsum', 'gather', 'scatter', 'scatter_add'}) do
  zl[name] = methods[name]
end

--- zl.linear(x, w [, b]): x [..., in] . w[out, in]^T + b[out].
function zl.linear(x, w, b) return core.linear(x, w, b) end

local function reduction_of(op, o)
  local r = o.reduction or 'mean'
  if r ~= 'mean' and r ~= 'sum' and r ~= 'none' then
    raise(fmt("%s: reduction must be 'mean', 'sum' or 'none', got %s", op, tostring(r)))
  end
  return r
end

--- zl.cross_entropy(logits [N, C] or [C], target [N] or [] of 0-based class ids
--- [, {ignore_index = -100, reduction = 'mean', dtype = the logits',
--- weight = nil, label_smoothing = 0}]). dtype is the loss's: 'f32' from bf16
--- logits is cross_entropy(logits:float()) bit for bit, without the f32 copy
--- of the logits (as autocast does). weight [C] scales each class's loss (the
--- mean divides by the targets' weights summed); label_smoothing in [0, 1]
--- mixes the target with the uniform distribution, as PyTorch's.
-- The result of pcall(core.<op>, ...): an engine message that names an id's
-- place ("at position N", counted from 0 in the flattened ids, as C hosts
-- count) is raised with N counted from 1, as the script counts.
local function positions_from_1(ok, r, ...)
  if ok then return r, ... end
  raise((bare(r):gsub('at position (%d+)',
    function(n) return 'at position ' .. math.tointeger(n) + 1 end, 1)))
end

function zl.cross_entropy(logits, target, opts)
  local o = opts_or_empty('cross_entropy', opts)
  local eps, w = o.label_smoothing or 0, o.weight
  if type(eps) ~= 'number' or not (eps >= 0 and eps <= 1) then
    raise(fmt('cross_entropy: label_smoothing must be a number in [0, 1], got %s', tostring(eps)))
  end
  if w ~= nil and not is_tensor(w) then raise(fmt('cross_entropy: weight must be a tensor, got %s', type(w))) end
  if w ~= nil and is_tensor(logits) then
    local ws, ls = core.shape(w), core.shape(logits)
    if #ws ~= 1 or ws[1] ~= ls[#ls] then
      raise(fmt('cross_entropy: weight must be 1-d with one entry per class ({%s}), got shape {%s}',
                tostring(ls[#ls]), table.concat(ws, ', ')))
    end
  end
  return positions_from_1(pcall(core.cross_entropy, logits, target, o.ignore_index or -100,
    reduction_of('cross_entropy', o), o.dtype, w, eps))
end

--- zl.mse_loss(input, target [, {reduction = 'mean'}]) (or the reduction name).
function zl.mse_loss(input, target, opts)
  if type(opts) == 'string' then opts = { reduction = opts } end
  return core.mse_loss(input, target, reduction_of('mse_loss', opts_or_empty('mse_loss', opts)))
end

--- zl.layer_norm(x, normalized_shape [, weight [, bias [, eps = 1e-5]]]):
--- normalises over the trailing dims given by normalized_shape (a size or a table).
function zl.layer_norm(x, normalized_shape, weight, bias, eps)
  local ns = type(normalized_shape) == 'table' and normalized_shape or { normalized_shape }
  local shape = core.shape(x)
  local nd = #shape
  for k = 1, #ns do
    if shape[nd - #ns + k] ~= ns[k] then
      raise(fmt('layer_norm: normalized_shape {%s} does not match the trailing dims of a tensor of shape {%s}',
                table.concat(ns, ', '), table.concat(shape, ', ')))
    end
  end
  return core.layer_norm(x, #ns, weight, bias, eps or 1e-5)
end

--- zl.rms_norm(x, normalized_shape [, weight [, eps]]): x / sqrt(mean(x^2) +
--- eps) over the trailing dims given by normalized_shape (a size or a table),
--- in f32 and rounded to x's dtype, times weight (Hugging Face's
--- LlamaRMSNorm; the result's dtype is x's and weight's promoted). eps nil is
--- f32's machine epsilon, as torch's F.rms_norm takes it for every float dtype.
function zl.rms_norm(x, normalized_shape, weight, eps)
  local ns = type(normalized_shape) == 'table' and normalized_shape or { normalized_shape }
  local shape = core.shape(x)
  local nd = #shape
  if #ns == 0 or #ns > nd then
    raise(fmt('rms_norm: normalized_shape must name 1 to %d trailing dims of a tensor of shape {%s}, got %d',
              nd, table.concat(shape, ', '), #ns))
  end
  for k = 1, #ns do
    if shape[nd - #ns + k] ~= ns[k] then
      raise(fmt('rms_norm: normalized_shape {%s} does not match the trailing dims of a tensor of shape {%s}',
                table.concat(ns, ', '), table.concat(shape, ', ')))
    end
  end
  if eps ~= nil and math.type(eps) == nil then raise(fmt('rms_norm: eps must be a number, got %s', type(eps))) end
  return core.rms_norm(x, #ns, weight, eps or 2 ^ -23)
end

--- zl.rotary(x, cos, sin): x * cos + rotate_half(x) * sin, rotate_half(x)
--- being cat(-x[..., D/2+1:], x[..., :D/2]), with x [..., T, D] (D even) and
--- cos, sin broadcast to it ([T, D] or [B, 1, T, D] for x [B, H, T, D]); x
--- may be a strided view. cos and sin get no gradient.
function zl.rotary(x, cos, sin) return core.rotary(x, cos, sin) end

--- zl.apply_rotary_pos_emb(q, k, cos, sin [, unsqueeze_dim = 2]): Hugging
--- Face's function: cos and sin ([B, T, D] as HF's rotary embedding gives
--- them) get a dim of size 1 at unsqueeze_dim, then both q and k are rotated.
function zl.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
  local d = unsqueeze_dim or 2
  local c, s = cos:unsqueeze(d), sin:unsqueeze(d)
  return core.rotary(q, c, s), core.rotary(k, c, s)
end

--- zl.embedding(indices, weight [, {padding_idx = nil}]): rows of weight [V, D]
--- picked by 0-based ids (i64, any shape) -> [..., D]. The argument order is
--- PyTorch's. Row padding_idx (negative: counted from the end) gets no gradient.
function zl.embedding(indices, weight, opts)
  local pad = opts_or_empty('embedding', opts).padding_idx
  if pad == nil then return positions_from_1(pcall(core.embedding, weight, indices)) end
  pad = to_int('embedding', 'padding_idx', pad)
  if is_tensor(weight) and core.dim(weight) == 2 then
    local v = core.shape(weight)[1]
    if pad < -v or pad >= v then
      raise(fmt('embedding: padding_idx %d is out of range for a weight of %d rows (expected %d..%d)', pad, v, -v,
                v - 1))
    end
    if pad < 0 then pad = pad + v end
  end
  return positions_from_1(pcall(core.embedding, weight, indices, pad))
end

--- zl.dropout(x [, p = 0.5 [, training = true [, generator]]]).
function zl.dropout(x, p, training, gen)
  if training == nil then training = true end
  return core.dropout(x, p or 0.5, training, gen)
end

local function pair(op, what, v, default)
  if v == nil then v = default end
  if type(v) == 'table' then
    return to_int(op, what, v[1]), to_int(op, what, v[2])
  end
  v = to_int(op, what, v)
  return v, v
end

--- zl.conv2d(x [N, C, H, W], w [O, C / groups, kh, kw] [, b [O]] [, {stride = 1,
--- padding = 0, dilation = 1, groups = 1}]); stride, padding and dilation are
--- a number or {h, w}.
function zl.conv2d(x, w, b, opts)
  local o = opts_or_empty('conv2d', opts)
  local sh, sw = pair('conv2d', 'stride', o.stride, 1)
  local ph, pw = pair('conv2d', 'padding', o.padding, 0)
  local dh, dw = pair('conv2d', 'dilation', o.dilation, 1)
  return core.conv2d(x, w, b, sh, sw, ph, pw, dh, dw, to_int('conv2d', 'groups', o.groups or 1))
end

--- zl.max_pool2d(x [N, C, H, W], kernel_size [, {stride = kernel_size, padding = 0}]).
function zl.max_pool2d(x, kernel, opts)
  local o = opts_or_empty('max_pool2d', opts)
  local kh, kw = pair('max_pool2d', 'kernel_size', kernel)
  local sh, sw = pair('max_pool2d', 'stride', o.stride, { kh, kw })
  local ph, pw = pair('max_pool2d', 'padding', o.padding, 0)
  return core.max_pool2d(x, kh, kw, sh, sw, ph, pw)
end

--- zl.avg_pool2d(x [N, C, H, W], kernel_size [, {stride = kernel_size, padding = 0,
--- count_include_pad = true}]): each window's mean, the padding counted as
--- zeros, or left out of the divisor when count_include_pad is false.
function zl.avg_pool2d(x, kernel, opts)
  local o = opts_or_empty('avg_pool2d', opts)
  if o.ceil_mode then raise('avg_pool2d: ceil_mode is not supported') end
  if o.divisor_override ~= nil then raise('avg_pool2d: divisor_override is not supported') end
  local kh, kw = pair('avg_pool2d', 'kernel_size', kernel)
  local sh, sw = pair('avg_pool2d', 'stride', o.stride, { kh, kw })
  local ph, pw = pair('avg_pool2d', 'padding', o.padding, 0)
  return core.avg_pool2d(x, kh, kw, sh, sw, ph, pw, o.count_include_pad ~= false)
end

--- zl.attention(q, k, v [, {causal = false, scale = 1/sqrt(D), mask = nil}])
--- with q [..., H, Tq, D] and k, v [..., Hkv, Tk, D], Hkv dividing H
--- (grouped-query attention: query head h reads key/value head
--- (h - 1) // (H / Hkv) + 1): softmax(q k^T * scale, masked) v. causal (or
--- is_causal) lets query i see keys up to i + Tk - Tq; mask (or attn_mask),
--- bool and broadcast to [..., H, Tq, Tk], lets a query see a key only where
--- it is true. A query that sees no key gets zeros.
function zl.attention(q, k, v, opts)
  local o = type(opts) == 'boolean' and { causal = opts } or opts_or_empty('attention', opts)
  local causal = o.causal
  if causal == nil then causal = o.is_causal end
  local scale = o.scale
  if scale ~= nil and (math.type(scale) == nil or not (scale > 0) or scale == math.huge) then
    raise(fmt('attention: scale must be a positive number, got %s', tostring(scale)))
  end
  local mask = o.mask
  if mask == nil then mask = o.attn_mask end
  if mask ~= nil and not is_tensor(mask) then
    raise(fmt('attention: mask must be a bool tensor, got a %s', type(mask)))
  end
  return core.attention(q, k, v, causal and true or false, scale or 0, mask)
end
zl.scaled_dot_product_attention = zl.attention

-- The list's shapes against its first, said as the script counts: tensors
-- and dimensions from 1 (the engine's own message counts from 0). `skip` is
-- the 0-based dimension that may differ (cat), or nil (stack).
local function same_shapes(op, list, skip)
  local first = core.shape(list[1])
  for i = 2, #list do
    local t = list[i]
    if not is_tensor(t) then raise(fmt('%s: entry %d of the list is a %s, not a tensor', op, i, type(t))) end
    local s, differ = core.shape(t), false
    if #s ~= #first then differ = true end
    for k = 1, #first do
      if k - 1 ~= skip and s[k] ~= first[k] then differ = true end
    end
    if differ then
      local show = function(sh) return '[' .. table.concat(sh, ', ') .. ']' end
      local how = skip and fmt('differs from tensor 1 outside dimension %d', skip + 1)
        or 'has a different shape from tensor 1'
      raise(fmt('%s: tensor %d %s (shapes %s and %s)', op, i, how, show(s), show(first)))
    end
  end
end

--- zl.cat(list [, dim = 1]) joins along an existing dim; zl.stack(list [, dim = 1])
--- along a new one.
function zl.cat(list, d)
  if type(list) ~= 'table' or not is_tensor(list[1]) then
    raise('cat: expected a non-empty list of tensors')
  end
  local d0 = D('cat', d or 1, core.dim(list[1]))
  same_shapes('cat', list, d0)
  return core.cat(list, d0)
end
function zl.stack(list, d)
  if type(list) ~= 'table' or not is_tensor(list[1]) then
    raise('stack: expected a non-empty list of tensors')
  end
  same_shapes('stack', list, nil)
  return core.stack(list, D('stack', d or 1, core.dim(list[1]) + 1))
end

--- zl.where(cond, a, b): a where cond is true, else b; a or b may be numbers.
function zl.where(cond, a, b)
  if type(a) == 'number' then a = is_tensor(b) and scalar_like(b, a) or core.scalar(a) end
  if type(b) == 'number' then b = scalar_like(a, b) end
  return core.where(cond, a, b)
end

-- ---------------------------------------------------------------------------
-- The metatable

local print_mod = require 'zlua.print'

Tensor.__index = function(t, k)
  local m = methods[k]
  if m ~= nil then return m end
  local g = getters[k]
  if g then return g(t) end
  if type(k) == 'number' then
    local nd = core.dim(t)
    if nd == 0 then raise('index: a 0-d tensor cannot be indexed (use item())') end
    local i = I('index', k, core.size(t, 0))
    if nd == 1 then return core.get(t, i) end
    return core.select(t, 0, i)
  end
  return nil
end

-- For the REPL's completion, which reads tables and never calls __index: the
-- getters' names, then (through this table's __index) every method, those a
-- script adds to zl.Tensor included.
Tensor.__fields = setmetatable({ grad = true, is_leaf = true, grad_fn = true }, { __index = methods })

Tensor.__newindex = function(t, k, v)
  if k == 'grad' then
    core.set_grad(t, v)
    return
  end
  if type(k) == 'number' then
    local nd = core.dim(t)
    if nd == 0 then raise('index: a 0-d tensor cannot be indexed (use fill_())') end
    local i = I('index', k, core.size(t, 0))
    if nd == 1 then core.set(t, i, v) return end
    local row = core.select(t, 0, i)
    if is_tensor(v) then core.copy_(row, v) else core.fill_(row, v) end
    return
  end
  local hint = k == 'requires_grad' and ' (use t:requires_grad(true))' or ''
  raise(fmt("zlua.Tensor: cannot assign field '%s': only .grad can be assigned%s", tostring(k), hint))
end

Tensor.__add = add
Tensor.__sub = sub
Tensor.__mul = mul
Tensor.__div = div
Tensor.__pow = pow
Tensor.__unm = core.neg
Tensor.__eq = core.same
-- Lua turns what __lt and __le return into a boolean, so x > 0 cannot give a
-- tensor; it says which method does.
local function compare(name, method)
  return function() raise(fmt("a tensor cannot be compared with Lua's %s (its result is one boolean): "
    .. 'x:%s(y) compares element by element', name, method)) end
end
Tensor.__lt = compare('< or >', 'lt(y) or x:gt')
Tensor.__le = compare('<= or >=', 'le(y) or x:ge')
Tensor.__len = function(t)
  if core.dim(t) == 0 then raise('len: a 0-d tensor has no length') end
  return core.size(t, 0)
end
Tensor.__tostring = print_mod.tostring

-- ---------------------------------------------------------------------------
-- Engine: memory, seeds, generators, threads. All of it is this Lua state's
-- own (its engine context): another state in the process has its own.

--- zl.memory(): { params = {current =, peak =}, grads =, optimizer =,
--- activations =, comm =, other = } in bytes.
zl.memory = core.memory
zl.reset_peak_memory = core.reset_peak
--- zl.set_memory_release(bytes): tensors of at least this many bytes give their
--- memory back to the system when freed (0, the default: kept for reuse,
--- faster). For runs under a memory limit; about a third slower on a step
--- that allocates gigabytes, from the page faults.
zl.set_memory_release = core.set_memory_release
--- Freed tensors of 64 KiB and more wait in a cache for the next tensor of
--- their size class, so a training step takes no fresh pages from the system
--- after its first run. zl.memory_cache(): {cached =, hits =, misses =,
--- limit =} (bytes, counts); zl.empty_cache() gives the cached blocks back
--- (as torch.cuda.empty_cache) and returns the bytes; zl.set_cache_limit(bytes)
--- caps what the cache holds (default half the machine's memory, or an eighth
--- of a lower limit the process runs under; 0 turns it off, nil restores the
--- default). Cached bytes count in no zl.memory() category.
zl.memory_cache = core.memory_cache
--- zl.memory_limit() -> bytes, source: the most memory this process may use
--- (the machine's, a memory cgroup's limit at any level above it, RLIMIT_AS or
--- RLIMIT_DATA, whichever is smallest) and where that limit comes from.
zl.memory_limit = core.memory_limit
zl.empty_cache = core.empty_cache
zl.set_cache_limit = core.set_cache_limit
zl.manual_seed = core.manual_seed
zl.set_num_threads = core.set_num_threads
zl.get_num_threads = core.get_num_threads
--- zl.set_gc_step(megabytes): engine memory growth that triggers a Lua
--- collection (default 64; half the memory in use after the last collection
--- when that is more); returns the previous value.
zl.set_gc_step = core.set_gc_step
zl.set_printoptions = print_mod.set_options
--- zl.read_csv(path [, skip_header]): a numeric CSV (plain or .gz) as f32 [rows, cols].
zl.read_csv = core.read_csv

--- zl.checkpoint(fn, ...): fn(...) computed again in backward instead of
--- keeping its activations (see zlua.activation_checkpointing).
function zl.checkpoint(fn, ...) return require('zlua.activation_checkpointing').checkpoint(fn, ...) end

--- zl.initialize{model=, config=, ...}: DeepSpeed's initialize (see zlua.engine).
function zl.initialize(t) return require('zlua.engine').initialize(t) end
--- zl.args([argv [, defaults]]): the script's command line with DeepSpeed's
--- options (see zlua.args).
function zl.args(argv, defaults) return require('zlua.args').parse(argv, defaults) end
--- Dataset files, plain or gzip (zlua.data.datasets builds datasets from them);
--- a bad file raises an error naming the file and the byte offset.
--- zl.read_idx(path): an idx (MNIST) file with its own shape: u8, i32 or f32.
zl.read_idx = core.read_idx
--- zl.read_cifar10(path) -> images u8 [N, 3, 32, 32], labels i64 [N] (0..9).
zl.read_cifar10 = core.read_cifar10
--- zl.read_tokens(path, bytes_per_token): little-endian uint16 (2) or uint32 (4)
--- token ids as i64 [N].
zl.read_tokens = core.read_tokens
--- zl.read_text(path): the file's bytes as u8 [n].
zl.read_text = core.read_text
--- zl.text_vocab(text) -> vocab, size: the distinct bytes of text (a u8 tensor
--- or a string) in increasing order, as a string; id i (0-based, as every index
--- tensor) stands for the byte vocab:byte(i + 1).
zl.text_vocab = core.text_vocab
--- zl.text_encode(text, vocab): the i64 id of each byte of text (tensor or string).
zl.text_encode = core.text_encode

--- zl.text_decode(ids, vocab): the string spelled by 0-based ids (an integer
--- tensor of any shape, read in order, or a Lua array) in a vocab string.
function zl.text_decode(ids, vocab)
  if type(vocab) ~= 'string' then
    raise(fmt('text_decode: vocab must be a string (as text_vocab returns), got %s', type(vocab)))
  end
  local list = ids
  if is_tensor(ids) then
    list = core.totable(core.reshape(ids, { core.numel(ids) }))
  elseif type(ids) ~= 'table' then
    raise(fmt('text_decode: ids must be a tensor or a table, got %s', type(ids)))
  end
  local chars, n, out = {}, #vocab, {}
  for i = 1, n do chars[i - 1] = vocab:sub(i, i) end
  for k = 1, #list do
    local c = chars[list[k]]
    if not c then
      raise(fmt('text_decode: id %s at position %d is out of range for a vocabulary of %d (expected 0..%d)',
                tostring(list[k]), k, n, n - 1))
    end
    out[k] = c
  end
  return table.concat(out)
end

--- Checkpoint files. safetensors (what other tools read): every check runs
--- before any data is read, and a bad file raises an error naming it and the
--- offset. Writes go to a temporary beside the file, fsynced and renamed over
--- it, so a failed or killed write leaves the old file as it was.
--- zl.save_safetensors(path, {name = tensor, ...} (name order) or
---   {{name, tensor}, ...} (this order) [, metadata {string = string}])
zl.save_safetensors = core.save_safetensors
--- zl.load_safetensors(path [, names]) -> {name = tensor}, metadata
zl.load_safetensors = core.load_safetensors
--- zl.safetensors_info(path) -> {{name=, dtype=, shape=, numel=}, ...} in file
--- order, metadata; nothing but the header is read.
zl.safetensors_info = core.safetensors_info
--- zl.safetensors_open(path) -> f: f:info(), f:metadata(), f:read(name) (whole),
--- f:read(name, offset [, count]) (count elements after skipping offset, as 1-d),
--- f:close().
zl.safetensors_open = core.safetensors_open
--- zl.safetensors_writer(path, entries [, metadata]) -> w, entries as info
--- lists them: w:write(t) appends t's elements (pieces may cross tensors),
--- w:commit() replaces the file, w:abort() (or collection) discards it.
zl.safetensors_writer = core.safetensors_writer
--- zl.write_file_atomic(path, bytes): replace a small file (a checkpoint's `latest`).
zl.write_file_atomic = core.write_file_atomic

local gen_methods = {}
function gen_methods.seed(g, seed) core.generator_seed(g, seed) return g end
function gen_methods.get_seed(g) return (core.generator_state(g)) end
function gen_methods.get_offset(g) return select(2, core.generator_state(g)) end
function gen_methods.set_offset(g, off) core.generator_set_offset(g, off) return g end
--- g:randint(n): one uniform integer in 1..n (1-based, as Lua's math.random).
function gen_methods.randint(g, n) return core.randint(n, g) + 1 end
Generator.__index = gen_methods
Generator.__tostring = function(g)
  local seed, offset = core.generator_state(g)
  return fmt('zlua.Generator(seed=%d, offset=%d)', seed, offset)
end

--- zl.Generator(seed): an independent random stream for rand/randn/randperm/dropout.
function zl.Generator(seed) return core.generator_new(seed or 0) end


-- ---------------------------------------------------------------------------
-- CUDA devices, named as PyTorch's torch.cuda names them

local function cuda_name(i) return 'cuda:' .. math.tointeger(i or 0) end

zl.cuda = {}
--- zl.cuda.device_count(): the visible devices, and when there is none the
--- reason as a second value ("no CUDA device: ...").
function zl.cuda.device_count() return core.device_count('cuda') end
function zl.cuda.is_available() return (core.device_count('cuda')) > 0 end
function zl.cuda.synchronize(i) core.device_synchronize(cuda_name(i)) end
--- zl.cuda.empty_cache([i]): cached, unused blocks go back to the driver.
function zl.cuda.empty_cache(i) core.device_empty_cache(cuda_name(i)) end
--- Bytes charged to tensors on device i, all categories or one ('params',
--- 'grads', 'optimizer', 'activations', 'comm', 'other'), and their peak.
function zl.cuda.memory_allocated(i, category) return (core.device_memory(cuda_name(i), category)) end
function zl.cuda.max_memory_allocated(i, category) return select(2, core.device_memory(cuda_name(i), category)) end
--- Bytes the caching allocator holds from the driver (in use and cached).
function zl.cuda.memory_reserved(i) return core.device_reserved(cuda_name(i)) end

-- ---------------------------------------------------------------------------
-- The submodules as fields, loaded on first use: zl.nn.Linear as torch.nn.Linear
-- (require 'zlua.nn' is the same table).

local SUBMODULES = { nn = true, optim = true, lr = true, data = true, dist = true, tokenizer = true, lora = true,
  utils = true, profiling = true, zero = true, config = true, monitor = true, json = true,
  activation_checkpointing = true }
-- __fields: the REPL's completion offers their names before they are loaded.
setmetatable(zl, { __fields = SUBMODULES, __index = function(t, k)
  if not SUBMODULES[k] then return nil end
  local m = require('zlua.' .. k)
  rawset(t, k, m)
  return m
end })

return zl
