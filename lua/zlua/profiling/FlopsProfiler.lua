--[[ zlua.profiling.FlopsProfiler: DeepSpeed's FLOPS profiler for zlua.nn
  models. While a profile runs, every module's forward is timed and the
  counted ops it calls itself (zlua.profiling.ops) are added to it, so a
  module's figures are its own plus its descendants': parameters, forward
  MACs and FLOPs, forward latency.

  local prof = FlopsProfiler.new(model)
  prof:start_profile()
  local logits = model(idx)
  prof:stop_profile()                 -- the ops and forwards are the originals again
  print(prof:get_total_macs(), prof:module_profile('blocks.1.attn').macs)
  prof:print_model_profile{profile_step = 1, top_modules = 3}
  prof:end_profile()                  -- the figures are dropped

  Design: a module's forward is hooked by giving the instance its own
  `forward` field (Module's __call reads self.forward), which a stop removes;
  the classes are never touched. Each hooked call pushes a frame the counted
  ops add to and pops it into the module's own figures, as DeepSpeed's
  forward hooks do; the figures live in the profiler, keyed by module, never
  on the model. ]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local zero = require 'zlua.zero'
local ops = require 'zlua.profiling.ops'
local report = require 'zlua.profiling.report'

local core = zl.core
local fmt = string.format
local now = core.now

local FlopsProfiler = {}
FlopsProfiler.__index = FlopsProfiler
FlopsProfiler.__name = 'zlua.profiling.FlopsProfiler'

-- who: 'FlopsProfiler:<method>', or the config section for the engine's printout.
local function raise(who, msg, ...)
  zl.raise(fmt('%s: ' .. msg, who, ...))
end

local function method_name(name) return 'FlopsProfiler:' .. name end

-- opts: a table of the known keys only, each checked by the caller.
local function options(method, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then raise(method, 'options must be a table, got %s', type(opts)) end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      raise(method, 'unknown option %s (expected %s)', tostring(k), table.concat(names, ', '))
    end
  end
  return opts
end

local function check_int(method, name, v, min)
  if math.tointeger(v) == nil or v < min then
    raise(method, '%s must be an integer >= %d, got %s', name, min, tostring(v))
  end
  return math.tointeger(v)
end

--- FlopsProfiler.new(model [, {recompute_fwd_factor = 0}]): a profiler of a
--- zlua.nn module; recompute_fwd_factor is the share of the forward that
--- backward computes again (activation checkpointing), used in the engine's
--- backward FLOPS line.
function FlopsProfiler.new(model, opts)
  if not Module.is_module(model) then
    zl.raise(fmt('FlopsProfiler.new: model must be a zlua.nn module, got %s', type(model)))
  end
  local o = options('FlopsProfiler.new', opts, { recompute_fwd_factor = true })
  local r = o.recompute_fwd_factor or 0
  if type(r) ~= 'number' or r < 0 then
    zl.raise(fmt('FlopsProfiler.new: recompute_fwd_factor must be a number >= 0, got %s', tostring(r)))
  end
  return setmetatable({ model = model, recompute_fwd_factor = r, started = false, records = nil,
    hooked = nil, stack = {} }, FlopsProfiler)
end

local function params_of(m)
  local n = 0
  for _, p in ipairs(m:parameters()) do n = n + zero.numel(p) end
  return n
end

--- prof:reset_profile(): every module's figures back to zero (parameters
--- recounted); a running profile goes on counting from zero.
function FlopsProfiler:reset_profile()
  -- The same record tables are kept: the hooks of a running profile hold them.
  local old, records = self.records or {}, {}
  for _, m in self.model:named_modules() do
    local r = old[m] or {}
    r.flops, r.macs, r.duration, r.params = 0, 0, 0, params_of(m)
    records[m] = r
  end
  self.records = records
  local stack = self.stack
  for i = #stack, 1, -1 do stack[i] = nil end
end

-- A device model's kernels run asynchronously: a module's time is taken
-- between synchronisations, as DeepSpeed does.
local function synchronizer(model)
  for _, p in ipairs(model:parameters()) do
    local d = p:device()
    if d ~= 'cpu' then
      local index = tonumber(d:match(':(%d+)$') or 0)
      return function() zl.cuda.synchronize(index) end
    end
    break
  end
  return function() end
end

local function hook(self, rec, forward, sync)
  return function(this, ...)
    local stack = self.stack
    local n = #stack + 1
    local frame = { flops = 0, macs = 0 }
    stack[n] = frame
    sync()
    local t0 = now()
    local out = table.pack(forward(this, ...))
    sync()
    rec.duration = rec.duration + (now() - t0)
    rec.flops, rec.macs = rec.flops + frame.flops, rec.macs + frame.macs
    -- Frames a failed call below left behind go with this one.
    for i = #stack, n, -1 do stack[i] = nil end
    return table.unpack(out, 1, out.n)
  end
end

-- Swaps the counted ops and hooks every module (but those of an ignored
-- class, whose ops then count for their parent, as in DeepSpeed); the
-- figures so far are kept.
function FlopsProfiler:_patch(ignore)
  if self.hooked then return end
  local stack = self.stack
  ops.swap(function(flops, macs)
    local top = stack[#stack]
    if top then top.flops, top.macs = top.flops + flops, top.macs + macs end
  end)
  local sync = synchronizer(self.model)
  self.hooked = {}
  for _, m in self.model:named_modules() do
    local rec = self.records[m]
    if rec and not (ignore and ignore[getmetatable(m)]) then
      local own = rawget(m, 'forward')
      self.hooked[#self.hooked + 1] = { m, own }
      rawset(m, 'forward', hook(self, rec, m.forward, sync))
    end
  end
end

--- prof:start_profile([{ignore_list = {Class, ...}}]): resets the figures and
--- starts counting: the counted ops are swapped for counting ones and every
--- module's forward is hooked, except modules of the listed classes.
function FlopsProfiler:start_profile(opts)
  local o = options(method_name('start_profile'), opts, { ignore_list = true })
  local ignore = nil
  if o.ignore_list ~= nil then
    if type(o.ignore_list) ~= 'table' then
      raise(method_name('start_profile'), 'ignore_list must be a list of module classes, got %s', type(o.ignore_list))
    end
    ignore = {}
    for _, cls in ipairs(o.ignore_list) do ignore[cls] = true end
  end
  if self.hooked then self:stop_profile() end
  self:reset_profile()
  self:_patch(ignore)
  self.started = true
end

--- prof:stop_profile(): the original ops and forwards back in place; the
--- figures stay readable until end_profile().
function FlopsProfiler:stop_profile()
  if not self.hooked then return end
  ops.restore()
  for _, h in ipairs(self.hooked) do rawset(h[1], 'forward', h[2]) end
  self.hooked = nil
end

--- prof:end_profile(): stops, and drops the figures.
function FlopsProfiler:end_profile()
  if not self.started then return end
  self:stop_profile()
  self.started = false
  self.records = nil
end

local function need_records(self, method)
  if not self.records then raise(method, 'nothing profiled (call start_profile first)') end
  return self.records
end

-- The figures of m's subtree: its own and its descendants' (each once).
local function figures(self, m)
  local records = self.records
  local f = { flops = 0, macs = 0, params = records[m] and records[m].params or params_of(m) }
  for _, d in m:named_modules() do
    local r = records[d]
    if r then f.flops, f.macs = f.flops + r.flops, f.macs + r.macs end
  end
  -- A container never called itself (a ModuleList) takes its children's time.
  local function duration(x)
    local r = records[x]
    local t = r and r.duration or 0
    if t == 0 then
      for _, c in x:named_children() do t = t + duration(c) end
    end
    return t
  end
  f.duration = duration(m)
  return f
end

local function total(self, method, field, as_string, show)
  need_records(self, method_name(method))
  local v = field == 'params' and self.records[self.model].params or figures(self, self.model)[field]
  if as_string then return show(v) end
  return v
end

--- prof:get_total_flops([as_string]): the forward FLOPs of the model.
function FlopsProfiler:get_total_flops(as_string)
  return total(self, 'get_total_flops', 'flops', as_string, report.number)
end

--- prof:get_total_macs([as_string]): the forward multiply-accumulates of the model.
function FlopsProfiler:get_total_macs(as_string)
  return total(self, 'get_total_macs', 'macs', as_string, report.macs)
end

--- prof:get_total_params([as_string]): the model's parameters (each tensor
--- once, whole also where ZeRO-3 keeps a chunk on this rank).
function FlopsProfiler:get_total_params(as_string)
  return total(self, 'get_total_params', 'params', as_string, report.params)
end

--- prof:get_total_duration([as_string]): seconds in the model's forward.
function FlopsProfiler:get_total_duration(as_string)
  return total(self, 'get_total_duration', 'duration', as_string, report.duration)
end

-- The dotted name of every module, the model being ''.
local function names_of(model)
  local names = {}
  for name, m in model:named_modules() do names[m] = name end
  return names
end

local function profile_of(self, m, name)
  local f = figures(self, m)
  local depth = 0
  if name ~= '' then depth = select(2, name:gsub('%.', '')) + 1 end
  return { name = name, class = m.__name, depth = depth, params = f.params, macs = f.macs, flops = f.flops,
    duration = f.duration }
end

--- prof:module_profile(name_or_module): {name, class, depth, params, macs,
--- flops, duration} of one module's subtree; name as the model's
--- named_modules() gives it ('' or nil for the model itself).
function FlopsProfiler:module_profile(which)
  need_records(self, method_name('module_profile'))
  local names = names_of(self.model)
  if which == nil or which == '' then return profile_of(self, self.model, '') end
  if Module.is_module(which) then
    if not names[which] then raise(method_name('module_profile'), 'the module is not part of the profiled model') end
    return profile_of(self, which, names[which])
  end
  for m, name in pairs(names) do
    if name == which then return profile_of(self, m, name) end
  end
  raise(method_name('module_profile'), 'no module named %s in the model', tostring(which))
end

--- prof:module_profiles(): the profile of every module, in named_modules() order.
function FlopsProfiler:module_profiles()
  need_records(self, method_name('module_profiles'))
  local out = {}
  for name, m in self.model:named_modules() do out[#out + 1] = profile_of(self, m, name) end
  return out
end

-- Per depth, the modules' figures summed by class, classes in the order met.
local function levels_of(self)
  local levels = {}
  local function walk(m, d)
    local level = levels[d + 1]
    if not level then level = { index = {} } levels[d + 1] = level end
    local entry = level.index[m.__name]
    if not entry then
      entry = { class = m.__name, macs = 0, params = 0, duration = 0 }
      level.index[m.__name] = entry
      level[#level + 1] = entry
    end
    local f = figures(self, m)
    entry.macs, entry.params, entry.duration = entry.macs + f.macs, entry.params + f.params,
      entry.duration + f.duration
    for _, c in m:named_children() do walk(c, d + 1) end
  end
  walk(self.model, 0)
  return levels
end

local print_known = { profile_step = true, module_depth = true, top_modules = true, detailed = true,
  output_file = true }

-- Where a printout goes: stdout, or output_file (its folder made, the file
-- rewritten each time).
local function sink_for(method, path)
  if path == nil or path == '' then
    return function(s) io.stdout:write(s, '\n') end, function() io.stdout:flush() end
  end
  if type(path) ~= 'string' then raise(method, 'output_file must be a string path, got %s', type(path)) end
  local dir = path:match('^(.*)/[^/]*$')
  if dir and dir ~= '' then pcall(core.mkdirs, dir) end
  local f, err = io.open(path, 'w')
  if not f then raise(method, "cannot write output_file '%s': %s", path, tostring(err)) end
  return function(s) f:write(s, '\n') end, function()
    local ok, cerr = f:close()
    if not ok then raise(method, "cannot write output_file '%s': %s", path, tostring(cerr)) end
  end
end

local function check_print_opts(method, opts)
  local o = options(method, opts, print_known)
  local depth = o.module_depth == nil and -1 or check_int(method, 'module_depth', o.module_depth, -1)
  local top = o.top_modules == nil and 1 or check_int(method, 'top_modules', o.top_modules, 1)
  if o.detailed ~= nil and type(o.detailed) ~= 'boolean' then
    raise(method, 'detailed must be true or false, got %s', tostring(o.detailed))
  end
  return o, depth, top
end

--- prof:print_model_aggregated_profile([{module_depth = -1, top_modules = 1}]):
--- prints, for each depth of the model, the top_modules classes by
--- parameters, by MACs and by forward latency (module_depth -1: every depth;
--- d: depths 0..d-1).
function FlopsProfiler:print_model_aggregated_profile(opts)
  local method = method_name('print_model_aggregated_profile')
  local o, depth, top = check_print_opts(method, opts)
  if o.profile_step ~= nil or o.detailed ~= nil or o.output_file ~= nil then
    raise(method, 'takes module_depth and top_modules only')
  end
  need_records(self, method)
  report.aggregated(function(s) io.stdout:write(s, '\n') end, levels_of(self), depth, top)
end

--- prof:print_model_profile([{profile_step = 1, module_depth = -1,
--- top_modules = 1, detailed = true, output_file = nil}]): prints the
--- profile summary, the top modules by depth and, when detailed, the module
--- tree with every module's figures, to stdout or to output_file.
function FlopsProfiler:print_model_profile(opts)
  return self:_print(opts, method_name('print_model_profile'))
end

-- print_model_profile, its errors prefixed with `method`.
function FlopsProfiler:_print(opts, method)
  local o, depth, top = check_print_opts(method, opts)
  local step = o.profile_step == nil and 1 or check_int(method, 'profile_step', o.profile_step, 0)
  need_records(self, method)
  local totals = figures(self, self.model)
  local write, close = sink_for(method, o.output_file)
  local ok, err = pcall(function()
    report.summary(write, { profile_step = step, totals = totals, recompute_fwd_factor = self.recompute_fwd_factor,
      engine = self.engine_figures })
    write('')
    write('----------------------------- Aggregated Profile per GPU -----------------------------')
    report.aggregated(write, levels_of(self), depth, top)
    if o.detailed ~= false then
      report.detailed(write, self.model, function(m) return figures(self, m) end, totals)
    end
    write('------------------------------------------------------------------------------')
  end)
  close()
  if not ok then error(err, 0) end
end

return FlopsProfiler
