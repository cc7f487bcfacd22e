--[[ zlua.profiling.report (internal to zlua.profiling): the FLOPS profiler's
  printout in DeepSpeed's layout (the profile summary, the top modules by
  depth, the module tree with each module's figures) and the number formats
  it uses (2 decimals, SI prefixes: "1.31 MMACs", "35.55 ms", "106.3 K"). ]]

local fmt, concat = string.format, table.concat

local M = {}

-- x rounded to `digits` decimals (2 by default), as Python's round.
local function round(x, digits)
  local s = 10 ^ (digits or 2)
  return math.floor(x * s + 0.5) / s
end

local PREFIXES = { { 1e12, 'T' }, { 1e9, 'G' }, { 1e6, 'M' }, { 1e3, 'K' } }

--- M.number(x): x with an SI prefix and 2 decimals, "14.27 M"; a plain
--- number keeps a trailing space ("12 "), as DeepSpeed's strings do.
function M.number(x)
  local scale, unit = 1, ''
  for _, p in ipairs(PREFIXES) do
    if x >= p[1] then scale, unit = p[1], p[2] break end
  end
  if scale == 1 and x ~= 0 and x < 1 then
    if x >= 1e-3 then scale, unit = 1e-3, 'm' else scale, unit = 1e-6, 'u' end
  end
  return fmt('%g %s', round(x / scale), unit)
end

function M.macs(x) return M.number(x) .. 'MACs' end
function M.flops(x) return M.number(x) .. 'FLOPS' end
function M.duration(x) return M.number(x) .. 's' end
--- Parameters say billions with B, and lose the trailing space.
function M.params(x) return (M.number(x):gsub('G', 'B'):gsub('%s+$', '')) end

-- A percentage of a total, "47.02%" (0 when the total is 0).
local function percent(part, total)
  return fmt('%g%%', total ~= 0 and round(100 * part / total) or 0)
end

-- A rate as a float rounded to 2 decimals, written as Python writes one (12.5, 3.0).
local function decimal(x)
  local s = fmt('%.2f', round(x)):gsub('0$', '')
  return s
end

local function line(w, label, value) w(fmt('%-70s  %-8s', label, tostring(value))) end

local function ratio(a, b) return b > 0 and a / b or 0 end

--- M.summary(w, p): the "Profile Summary at step N" block; w(line) writes a
--- line. p: profile_step, totals {params, macs, flops, duration},
--- recompute_fwd_factor, and engine (nil standalone) with world_size,
--- micro_batch_size, gas, forward, backward, step (seconds) and samples.
function M.summary(w, p)
  local t, e = p.totals, p.engine
  w('')
  w('-------------------------- DeepSpeed Flops Profiler --------------------------')
  w(fmt('Profile Summary at step %d:', p.profile_step))
  w('Notations:')
  w('data parallel size (dp_size), model parallel size (mp_size),')
  w('number of parameters (params), number of multiply-accumulate operations (MACs),')
  w('number of floating-point operations (flops), floating-point operations per second (FLOPS),')
  w('fwd latency (forward pass time), bwd latency (backward pass time),')
  w('step (weight update time), iter latency (fwd + bwd + step latency)')
  w('')
  if e then
    line(w, 'world size: ', e.world_size)
    line(w, 'data parallel size: ', e.world_size)
    line(w, 'model parallel size: ', 1)
    line(w, 'batch size per GPU: ', e.micro_batch_size)
    -- zlua's addition: the figures below add up every micro-step of the profiled step.
    if e.gas > 1 then line(w, 'gradient accumulation steps profiled: ', e.gas) end
  end
  line(w, 'params per GPU: ', M.params(t.params))
  line(w, 'params of model = params per GPU * mp_size: ', M.params(t.params))
  line(w, 'fwd MACs per GPU: ', M.macs(t.macs))
  line(w, 'fwd flops per GPU: ', M.number(t.flops))
  line(w, 'fwd flops of model = fwd flops per GPU * mp_size: ', M.number(t.flops))
  local fwd = e and e.forward or t.duration
  line(w, 'fwd latency: ', M.duration(fwd))
  line(w, 'fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ', M.flops(ratio(t.flops, fwd)))
  if not e then return end
  local factor = 2 + p.recompute_fwd_factor
  line(w, 'bwd latency: ', M.duration(e.backward))
  line(w, fmt('bwd FLOPS per GPU = %g * fwd flops per GPU / bwd latency: ', factor),
    M.flops(ratio(factor * t.flops, e.backward)))
  line(w, fmt('fwd+bwd FLOPS per GPU = %g * fwd flops per GPU / (fwd+bwd latency): ', factor + 1),
    M.flops(ratio((factor + 1) * t.flops, fwd + e.backward)))
  line(w, 'step latency: ', M.duration(e.step))
  local iter = fwd + e.backward + e.step
  line(w, 'iter latency: ', M.duration(iter))
  line(w, fmt('FLOPS per GPU = %g * fwd flops per GPU / iter latency: ', factor + 1),
    M.flops(ratio((factor + 1) * t.flops, iter)))
  line(w, 'samples/second: ', decimal(ratio(e.samples, iter)))
end

-- {'A': 'x', 'B': 'y'}, as Python prints a dict of strings.
local function dict(pairs_list)
  local parts = {}
  for i, kv in ipairs(pairs_list) do parts[i] = fmt("'%s': '%s'", kv[1], kv[2]) end
  return '{' .. concat(parts, ', ') .. '}'
end

--- M.aggregated(w, levels, module_depth, top_modules): the top modules by
--- class at each depth. levels[d + 1] is the list, in the order first met,
--- of {class, macs, params, duration} summed over the modules of that class at
--- depth d. module_depth -1 prints every depth; d >= 0 the depths 0..d-1.
function M.aggregated(w, levels, module_depth, top_modules)
  w(fmt('Top %d modules in terms of params, MACs or fwd latency at different model depths:', top_modules))
  local last = module_depth == -1 and #levels or math.min(module_depth, #levels)
  for d = 1, last do
    local function top(field, show)
      local order = {}
      for i, c in ipairs(levels[d]) do order[i] = { c = c, i = i } end
      -- Ties keep the order first met, as Python's stable sort does.
      table.sort(order, function(a, b)
        if a.c[field] ~= b.c[field] then return a.c[field] > b.c[field] end
        return a.i < b.i
      end)
      local out = {}
      for i = 1, math.min(top_modules, #order) do out[i] = { order[i].c.class, show(order[i].c[field]) } end
      return dict(out)
    end
    w(fmt('depth %d:', d - 1))
    w('    params      - ' .. top('params', M.params))
    w('    MACs        - ' .. top('macs', M.macs))
    w('    fwd latency - ' .. top('duration', M.duration))
  end
end

local function indent(s) return (s:gsub('\n', '\n  ')) end

--- M.tree(m, figures, totals): the module tree as zlua prints a model, with
--- each module's figures before its own description: params and their share,
--- MACs and their share, forward latency and its share, FLOP/s.
--- figures(m) gives {params, macs, flops, duration} of m's subtree.
function M.tree(m, figures, totals)
  local f = figures(m)
  local items = {
    fmt('%s = %s Params', M.params(f.params), percent(f.params, totals.params)),
    fmt('%s = %s MACs', M.macs(f.macs), percent(f.macs, totals.macs)),
    fmt('%s = %s latency', M.duration(f.duration), percent(f.duration, totals.duration)),
    M.flops(f.duration > 0 and round(f.flops / f.duration) or 0),
  }
  local extra = m:extra_repr() or ''
  if extra ~= '' then items[#items + 1] = extra end
  local head = concat(items, ', ')
  local lines = {}
  for name, c in m:named_children() do
    lines[#lines + 1] = '  (' .. name .. '): ' .. indent(M.tree(c, figures, totals))
  end
  if #lines == 0 then return m.__name .. '(' .. head .. ')' end
  return m.__name .. '(\n  ' .. indent(head) .. '\n' .. concat(lines, '\n') .. '\n)'
end

--- M.detailed(w, model, figures, totals): the detailed profile section.
function M.detailed(w, model, figures, totals)
  w('')
  w('------------------------------ Detailed Profile per GPU ------------------------------')
  w('Each module lists, after its name: params, % of all params, MACs, % of all MACs, fwd latency, '
    .. '% of the total fwd latency, fwd FLOPS.')
  w('')
  w('Note: 1. Work a module does in its own forward outside its submodules (a loss, a residual sum) '
    .. 'is in its figures but in no submodule, so a parent can exceed the sum of its children.')
  w('2. FLOPs are counted from shapes, not measured: FLOPS can exceed what the machine reaches.')
  w('3. The top module\'s latency is taken around its forward call, so it is below the engine\'s '
    .. 'fwd latency above.')
  w('')
  w(M.tree(model, figures, totals))
end

return M
