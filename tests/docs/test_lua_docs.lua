-- The Lua API reference (docs/*.md) held to the API the zlua binary exports: an entry for
-- every public function, none for what is gone, every `zlua --help` option and ZLUA_
-- variable documented. Owns the rules of what is public and how an entry names a function.

local H = require 'harness'
local zl = require 'zlua'

local fmt = string.format

-- What is public. A module compiled into zlua (package.preload) named zlua.<name> is, but
-- for INTERNAL_MODULES. A nested one (zlua.<a>.<b>) is part of zlua.<a>, public through
-- what zlua.<a> hands out (its classes and functions are walked from there), but for
-- PUBLIC_NESTED, required by name.
local INTERNAL_MODULES = {
  ['zlua.core'] = 'the C binding: its functions reach scripts through zlua and the modules',
  ['zlua.print'] = 'tensor printing, reached through zlua.set_printoptions and tostring',
}
local PUBLIC_NESTED = {
  ['zlua.zero.estimate'] = "DeepSpeed's memory estimates, required by name (scripts/estimate_memory.lua)",
}

-- Names reachable from a public table that are not API, each with why.
local INTERNAL_NAMES = {
  ['zlua.optim.Optimizer.init'] = 'a step of every optimizer constructor (new), never called on an optimizer',
  ['zlua.optim.Optimizer.validate'] = 'the option check of init and add_param_group',
  ['engine.new'] = "zlua.initialize's constructor",
  ['engine.optimizer_from_config'] = "zlua.initialize's config-to-optimizer step, also read by zlua/ds_config.h",
}
-- A class's own extra_repr only says what it prints; Module:extra_repr() documents the hook.
local COVERED_BY_BASE = { extra_repr = true }

-- Objects the C binding makes (metatables zlua.<Name> with methods) that stay inside
-- zlua's own modules.
local INTERNAL_C_CLASSES = {
  ['zlua.Optimizer'] = 'the engine object inside a zlua.optim optimizer (opt.c)',
  ['zlua.LRSchedule'] = 'the engine object inside a zlua.lr schedule',
  ['zlua.LossScaler'] = "the fp16 loss scaler inside the engine's precision",
  ['zlua.Zero'] = "the model states inside the engine's ZeRO",
  ['zlua.ZeroInit'] = 'the partitions behind zlua.zero.Init',
  ['zlua.ZeroCheckpoint'] = 'the checkpoint reader behind engine:load_checkpoint',
  ['zlua.Aio'] = 'libaio behind NVMe offload (zlua.offload.aio)',
  ['zlua.AioRequest'] = 'libaio behind NVMe offload (zlua.offload.aio)',
}

local function read_lines(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do if type(k) == 'string' then out[#out + 1] = k end end
  table.sort(out)
  return out
end

local function callable(v)
  if type(v) == 'function' then return true end
  local mt = getmetatable(v)
  return type(mt) == 'table' and rawget(mt, '__call') ~= nil
end

local function short(path) return path:match('([^.]+)$') end

-- ---------------------------------------------------------------------------
-- The inventory: what the API exports, as items {owner =, short =, name =, kind =}.
-- kind 'ctor' (a callable class, named by owner), 'fn' (a namespace's function: owner.name
-- only) or 'method' (a class's: owner.name, owner:name, Short:name, Short.name).

local function public_modules()
  local out = {}
  for name in pairs(package.preload) do
    local nested = name:match('^zlua%.[^.]+%.')
    if name == 'zlua' or (name:match('^zlua%.') and not INTERNAL_MODULES[name]
        and (not nested or PUBLIC_NESTED[name])) then
      out[#out + 1] = name
    end
  end
  table.sort(out)
  return out
end

-- Live objects whose classes no module hands out, each with the receiver name its
-- entries use (engine:backward). Made here, as cheaply as a script makes them.
local function instances()
  local nn, optim, lr = require 'zlua.nn', require 'zlua.optim', require 'zlua.lr'
  local engine = H.with_accelerator('cpu', function()
    return (zl.initialize{ model = nn.Linear(2, 2), config = { train_batch_size = 1,
      optimizer = { type = 'SGD', params = { lr = 0.1 } } } })
  end)
  local scheduler = lr.WarmupLR(optim.SGD(nn.Linear(2, 2):parameters()))
  local monitor = require('zlua.monitor').from_config({})
  return { { 'engine', engine }, { 'scheduler', scheduler }, { 'monitor', monitor } }
end

-- The C classes a script holds: forced into being, then read from the registry.
local function c_classes()
  local dist = require 'zlua.dist'
  dist.barrier(true):wait()
  local path = os.tmpname()
  zl.save_safetensors(path, { a = zl.ones(2) })
  local f = zl.safetensors_open(path)
  local w = zl.safetensors_writer(path, f:info())
  w:abort()
  f:close()
  os.remove(path)
  zl.Generator(1)
  local out = {}
  for name, mt in pairs(debug.getregistry()) do
    if type(name) == 'string' and name:match('^zlua%.[%w_]+$') and type(mt) == 'table'
        and type(rawget(mt, '__index')) == 'table' and not INTERNAL_C_CLASSES[name] then
      out[#out + 1] = { short(name), rawget(mt, '__index') }
    end
  end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end

local function inventory()
  local items, owners = {}, {}     -- owners: table -> {path =, short =, class =}
  local seen = {}
  seen[zl.core] = true
  local function add(o, name, kind)
    local key = (o.path or o.short) .. '.' .. name
    if INTERNAL_NAMES[key] or (kind == 'method' and COVERED_BY_BASE[name] and o.path ~= 'zlua.nn.Module') then
      return
    end
    items[#items + 1] = { owner = o.path, short = o.short, name = name, kind = kind }
  end
  local function class_like(t)
    return callable(t) or rawget(t, '__index') ~= nil or t == zl.Tensor
  end
  -- Breadth first, so each table is named by its shortest path (zlua.nn.Module, not
  -- zlua.nn.Linear.super).
  local queue = {}
  for _, m in ipairs(public_modules()) do
    local t = require(m)
    if type(t) == 'function' then
      items[#items + 1] = { owner = m, short = short(m), kind = 'ctor' }
    elseif type(t) == 'table' and not seen[t] then
      seen[t] = true
      queue[#queue + 1] = { t, m }
    end
  end
  local i = 1
  while queue[i] do
    local t, path = queue[i][1], queue[i][2]
    i = i + 1
    local o = { path = path, short = short(path), class = class_like(t) }
    owners[t] = o
    if callable(t) and path:find('.', 1, true) then
      items[#items + 1] = { owner = path, short = o.short, kind = 'ctor' }
    end
    for _, k in ipairs(sorted_keys(t)) do
      local v = rawget(t, k)
      if k:sub(1, 1) ~= '_' then
        if type(v) == 'function' then
          add(o, k, o.class and 'method' or 'fn')
        elseif type(v) == 'table' and not seen[v] then
          seen[v] = true
          queue[#queue + 1] = { v, path .. '.' .. k }
        end
      end
    end
  end
  -- Methods reached through live objects: each class on the chain of __index tables,
  -- named by its path when a module hands it out, else by the display name.
  local function walk_class(t, display)
    while type(t) == 'table' do
      if not owners[t] then
        local o = { short = display, class = true }
        owners[t] = o
        for _, k in ipairs(sorted_keys(t)) do
          if k:sub(1, 1) ~= '_' and type(rawget(t, k)) == 'function' then add(o, k, 'method') end
        end
      end
      local mt = getmetatable(t)
      t = type(mt) == 'table' and rawget(mt, '__index') or nil
    end
  end
  for _, inst in ipairs(instances()) do
    local mt = getmetatable(inst[2])
    walk_class(type(mt) == 'table' and rawget(mt, '__index'), inst[1])
  end
  for _, c in ipairs(c_classes()) do walk_class(c[2], c[1]) end
  return items, owners
end

-- ---------------------------------------------------------------------------
-- The docs: the call forms of every `### ` line of docs/*.md, one per name it covers:
--   ### `zlua.randn(...)`                                        a module's function, in full
--   ### `zlua.nn.Linear(in, out [, bias])` `Linear:forward(x)`    a class and its method
--   ### `Tensor:add(other)` `engine:backward(loss)`               a method: Class:name
-- A method's receiver is its class's name (any case) or its full path; a call form's name
-- is what comes before its first '(', space or '['.

-- 'Tensor:add' -> 'tensor.add'; 'zlua.nn.GPT:generate' -> 'zlua.nn.GPT.generate'. A
-- receiver without dots compares in any case.
local function norm(name)
  local recv, f = name:match('^([%a_][%w_]*)[.:]([%a_][%w_]*)$')
  if recv and recv ~= 'zlua' then return recv:lower() .. '.' .. f end
  return (name:gsub(':', '.'))
end

-- A call form's name, or nil for what names no Lua function (a CLI form, prose), and
-- whether the form calls it (a '(' or '{' follows): a name neither called, nor under
-- zlua, nor on a class the API has (a config key such as zero_optimization.stage) is
-- not held to the API.
local function form_name(form)
  local name, after = form:match('^([%a_][%w_]*[.:][%w_.:]*)(.?)')
  if not name then return nil end
  return (name:gsub('[.:]$', '')), after == '(' or after == '{'
end

-- {file =, line =, forms = {...}} for every entry of the given markdown texts.
local function entries_of(docs)
  local out = {}
  for _, d in ipairs(docs) do
    local n = 0
    for line in (d.text .. '\n'):gmatch('([^\n]*)\n') do
      n = n + 1
      if line:match('^### ') then
        local forms = {}
        for f in line:gmatch('`([^`]+)`') do forms[#forms + 1] = f end
        out[#out + 1] = { file = d.file, line = n, forms = forms }
      end
    end
  end
  return out
end

local function read_docs(dir)
  local docs = {}
  for _, file in ipairs(read_lines('ls -1 ' .. H.quote(dir))) do
    if file:match('%.md$') then
      docs[#docs + 1] = { file = 'docs/' .. file, text = assert(H.read_file(dir .. '/' .. file)) }
    end
  end
  return docs
end

-- ---------------------------------------------------------------------------
-- The checks, as functions of the inventory and the entries, so the test can also
-- show that they catch what they are for.

local function accepted(item)
  if item.kind == 'ctor' then return { item.owner } end
  local out = {}
  if item.owner then out[#out + 1] = item.owner .. '.' .. item.name end
  if item.kind == 'method' then out[#out + 1] = item.short:lower() .. '.' .. item.name end
  return out
end

local function show_item(item)
  if item.kind == 'ctor' then return item.owner end
  if item.kind == 'fn' then return item.owner .. '.' .. item.name end
  return item.short .. ':' .. item.name
end

-- The items no entry names.
local function missing(items, entries)
  local named = {}
  for _, e in ipairs(entries) do
    for _, f in ipairs(e.forms) do
      local name = form_name(f)
      if name then named[norm(name)] = true end
    end
  end
  local out = {}
  for _, item in ipairs(items) do
    local found = false
    for _, a in ipairs(accepted(item)) do found = found or named[a] == true end
    if not found then out[#out + 1] = show_item(item) end
  end
  table.sort(out)
  return out
end

-- The value a dotted name starting with zlua leads to, through the longest module prefix.
local function resolve_path(name)
  local parts = {}
  for p in name:gmatch('[^.]+') do parts[#parts + 1] = p end
  for n = #parts, 1, -1 do
    local mod = table.concat(parts, '.', 1, n)
    if package.preload[mod] or package.loaded[mod] then
      local ok, v = pcall(require, mod)
      for k = n + 1, #parts do
        if not ok or (type(v) ~= 'table' and type(v) ~= 'userdata') then return nil end
        ok, v = pcall(function() return v[parts[k]] end)
      end
      return ok and v or nil
    end
  end
  return nil
end

-- Tensor fields read through __index (grad, is_leaf, grad_fn): present on a leaf with a
-- gradient or on an op's result.
local function tensor_field(k)
  local w = zl.ones(2):requires_grad_()
  local y = w * 2
  y:sum():backward()
  return w[k] ~= nil or y[k] ~= nil
end

-- Methods defined in lua/zlua as `function Class:name(` or `function Class.name(`, for
-- entries on objects of a class no module hands out: lower-case class -> set of names.
local function source_methods(src)
  local out = {}
  for _, path in ipairs(read_lines('find ' .. H.quote(src .. '/lua/zlua') .. " -name '*.lua'")) do
    for cls, name in assert(H.read_file(path)):gmatch('function%s+([%a_][%w_]*)[.:]([%a_][%w_]*)%s*%(') do
      local c = cls:lower()
      out[c] = out[c] or {}
      out[c][name] = true
    end
  end
  return out
end

-- Entries that name nothing the API has: "file:line: name".
local function stale(items, owners, entries, defined)
  local known = {}
  for _, item in ipairs(items) do
    for _, a in ipairs(accepted(item)) do known[a] = true end
  end
  for _, item in ipairs(items) do
    if item.kind == 'ctor' then known[item.owner] = true end
  end
  local by_short = {}
  for t, o in pairs(owners) do
    local s = o.short:lower()
    by_short[s] = by_short[s] or {}
    table.insert(by_short[s], t)
  end
  local function exists(name)
    local n = norm(name)
    if known[n] then return true end
    if name:match('^zlua[.:]') then return resolve_path(n) ~= nil end
    local recv, f = n:match('^([^.]+)%.([^.]+)$')
    if not recv then return false end
    for _, t in ipairs(by_short[recv] or {}) do
      if t[f] ~= nil then return true end
    end
    if recv == 'tensor' and tensor_field(f) then return true end
    return defined[recv] ~= nil and defined[recv][f] == true
  end
  local function held(name, called)
    return called or name:match('^zlua[.:]') or by_short[(norm(name):match('^([^.]+)%.[^.]+$'))] ~= nil
  end
  local out = {}
  for _, e in ipairs(entries) do
    for _, f in ipairs(e.forms) do
      local name, called = form_name(f)
      if name and held(name, called) and not exists(name) then
        out[#out + 1] = fmt('%s:%d: %s', e.file, e.line, name)
      end
    end
  end
  return out
end

-- ---------------------------------------------------------------------------

local docs = read_docs(H.source_dir .. '/docs')
local entries = entries_of(docs)
local items, owners = inventory()
local defined = source_methods(H.source_dir)

H.test('every public function and method has an entry', function()
  H.check(#items > 300, fmt('the inventory found only %d functions: the walk is broken', #items))
  local gone = missing(items, entries)
  H.check(#gone == 0, fmt('%d names have no `### ` entry in docs/*.md:\n  %s', #gone, table.concat(gone, '\n  ')))
end)

H.test('every entry names something that exists', function()
  local bad = stale(items, owners, entries, defined)
  H.check(#bad == 0, fmt('%d entries name nothing zlua has:\n  %s', #bad, table.concat(bad, '\n  ')))
end)

H.test('the checks catch a missing entry and a stale one', function()
  local pruned = {}
  for _, e in ipairs(entries) do
    local forms = {}
    for _, f in ipairs(e.forms) do
      local name = form_name(f)
      if not (name and (norm(name) == 'zlua.randn' or norm(name) == 'tensor.add')) then forms[#forms + 1] = f end
    end
    pruned[#pruned + 1] = { file = e.file, line = e.line, forms = forms }
  end
  pruned[#pruned + 1] = { file = 'x.md', line = 1, forms = { 'zlua.no_such_function(x)', 'Tensor:no_such_method()' } }
  local gone = table.concat(missing(items, pruned), ' ')
  H.check(gone:find('zlua.randn', 1, true) ~= nil, 'zlua.randn left out is not reported: ' .. gone)
  H.check(gone:find('Tensor:add', 1, true) ~= nil, 'Tensor:add left out is not reported: ' .. gone)
  local bad = table.concat(stale(items, owners, pruned, defined), ' ')
  H.check(bad:find('zlua.no_such_function', 1, true) ~= nil, 'a stale function is not reported: ' .. bad)
  H.check(bad:find('Tensor:no_such_method', 1, true) ~= nil, 'a stale method is not reported: ' .. bad)
end)

-- The command line: each option `zlua --help` lists has a `### ` entry whose call form
-- starts with `zlua`, and each option such an entry shows is one zlua takes (listed by
-- --help, or spelled in lua/src/launch.c or zlua.c, as --num_accelerators is).
H.test('the command line options are documented', function()
  local p = io.popen(H.quote(H.exe) .. ' --help 2>&1')
  local usage = p:read('a')
  p:close()
  local listed = {}
  for line in usage:gmatch('[^\n]+') do
    if line:match('^%s+%-') then
      for opt in (' ' .. line):gmatch('[%s,](%-%-?[%w_]*)') do listed[opt] = true end
    end
  end
  local n = 0
  for _ in pairs(listed) do n = n + 1 end
  H.check(n >= 10, fmt('only %d options read from zlua --help:\n%s', n, usage))
  local shown = {}
  for _, e in ipairs(entries) do
    for _, f in ipairs(e.forms) do
      if f == 'zlua' or f:match('^zlua%s') then
        for tok in f:gmatch('%S+') do
          local opt = tok:match('^(%-%-?[%w_]*)')
          if opt then shown[opt] = e.file .. ':' .. e.line end
        end
      end
    end
  end
  for _, opt in ipairs(sorted_keys(listed)) do
    H.check(shown[opt] ~= nil, fmt('zlua --help lists %s, which no `### \\`zlua ...\\`` entry shows', opt))
  end
  local sources = (H.read_file(H.source_dir .. '/lua/src/launch.c') or '')
    .. (H.read_file(H.source_dir .. '/lua/src/zlua.c') or '')
  for _, opt in ipairs(sorted_keys(shown)) do
    H.check(listed[opt] or sources:find('"' .. opt .. '"', 1, true) ~= nil,
      fmt('%s: option %s is not one zlua takes', shown[opt], opt))
  end
end)

-- Every ZLUA_ environment variable the sources read appears somewhere in docs/*.md.
H.test('the environment variables are documented', function()
  local text = {}
  for _, d in ipairs(docs) do text[#text + 1] = d.text end
  text = table.concat(text, '\n')
  local dirs = {}
  for _, d in ipairs({ 'engine', 'lua/src', 'lua/zlua' }) do dirs[#dirs + 1] = H.quote(H.source_dir .. '/' .. d) end
  local vars = read_lines('grep -rhoE ' .. H.quote([=[["']ZLUA_[A-Z0-9_]+["']]=]) .. ' ' .. table.concat(dirs, ' '))
  H.check(#vars > 5, 'no ZLUA_ variables found in the sources')
  local seen = {}
  for _, v in ipairs(vars) do
    local name = v:sub(2, -2)
    if not seen[name] then
      seen[name] = true
      H.check(text:find('%f[%w_]' .. name .. '%f[^%w_]') ~= nil, name .. ' is read by zlua but appears in no docs/*.md')
    end
  end
end)

H.done()
