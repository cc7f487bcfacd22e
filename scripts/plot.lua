--[[ scripts/plot.lua: a run's csv_monitor files drawn as one self-contained SVG:
  three stacked panels (training loss, learning rate, loss scale) against the
  CSV's step column (DeepSpeed logs by global samples), with axes, ticks, grid
  and a title. Plain Lua 5.4, no library: runs under zlua or lua5.4.

    zlua scripts/plot.lua RUN_DIR_OR_CSV_DIR OUT.svg

  The argument is the directory holding Train_Samples_train_loss.csv,
  Train_Samples_lr.csv and Train_Samples_loss_scale.csv (output_path/job_name),
  one of those files, or output_path when it holds a single such directory.
  A missing file (loss_scale without fp16) leaves its panel empty with a note.
  Header lines, which a resumed run repeats, are skipped; a step written twice
  keeps its last value (the resumed run's). nan and inf are counted, not drawn.
  Over 2 points per horizontal pixel, each pixel column keeps its lowest and
  highest point, so spikes survive. ]]

local fmt = string.format

local function die(msg, status)
  io.stderr:write('plot: ', msg, '\n')
  os.exit(status or 1)
end

local SERIES = {
  { file = 'Train_Samples_train_loss.csv', title = 'Training loss', ylabel = 'loss', color = '#1f5fbf' },
  { file = 'Train_Samples_lr.csv', title = 'Learning rate', ylabel = 'lr', color = '#c2571a' },
  { file = 'Train_Samples_loss_scale.csv', title = 'Loss scale', ylabel = 'loss scale', color = '#2a8a3e',
    log2 = true, missing = 'no Train_Samples_loss_scale.csv: the loss scale is logged with fp16 only' },
}

-- Finding the files -------------------------------------------------------------------------

local function exists(path)
  local f = io.open(path, 'r')
  if f then f:close() end
  return f ~= nil
end

local function has_csv(dir)
  for _, s in ipairs(SERIES) do
    if exists(dir .. '/' .. s.file) then return true end
  end
  return false
end

local function subdirs(dir)
  local p = io.popen("ls -1A -- '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  local out = {}
  for name in p:lines() do
    if exists(dir .. '/' .. name .. '/.') then out[#out + 1] = name end
  end
  p:close()
  table.sort(out)
  return out
end

local function csv_dir(path)
  if path:match('%.csv$') then
    if not exists(path) then die(fmt("cannot open '%s'", path)) end
    return path:match('^(.*)/[^/]*$') or '.'
  end
  path = path:gsub('(.)/+$', '%1')
  if not exists(path) then die(fmt("no such directory '%s'", path)) end
  if has_csv(path) then return path end
  local found = {}
  for _, name in ipairs(subdirs(path)) do
    if has_csv(path .. '/' .. name) then found[#found + 1] = name end
  end
  if #found == 1 then return path .. '/' .. found[1] end
  if #found == 0 then
    die(fmt("no Train_Samples_*.csv in '%s' nor in its subdirectories (was csv_monitor enabled?)", path))
  end
  die(fmt("'%s' holds several runs (%s): name one of them", path, table.concat(found, ', ')))
end

-- Reading a series --------------------------------------------------------------------------

local SPECIAL = { nan = 0 / 0, inf = math.huge, ['+inf'] = math.huge, ['-inf'] = -math.huge }

-- The rows of one file as sorted steps and values; nil when the file is absent. A last
-- line without its newline is the trace of a run killed mid-row: it is left out.
local function read_series(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local text = f:read('a')
  f:close()
  local by_step, lineno = {}, 0
  for line in text:gmatch('([^\n]*)\n') do
    lineno = lineno + 1
    line = line:gsub('\r$', '')
    local a, b = line:match('^([^,]*),([^,]*)$')
    local step = a and math.tointeger(tonumber(a))
    if step then
      local v = tonumber(b) or SPECIAL[b:lower()]
      if not v then die(fmt("%s:%d: the value is not a number: '%s'", path, lineno, b)) end
      by_step[step] = v
    elseif line ~= '' and a ~= 'step' then
      die(fmt("%s:%d: expected 'step,value', got '%s'", path, lineno, line))
    end
  end
  local steps = {}
  for s in pairs(by_step) do steps[#steps + 1] = s end
  table.sort(steps)
  local xs, ys, bad = {}, {}, 0
  for _, s in ipairs(steps) do
    local v = by_step[s]
    if v == v and v ~= math.huge and v ~= -math.huge then
      xs[#xs + 1], ys[#ys + 1] = s, v
    else
      bad = bad + 1
    end
  end
  return { xs = xs, ys = ys, nonfinite = bad, rows = #steps }
end

-- Axes ----------------------------------------------------------------------------------------

-- A step of 1, 2 or 5 times a power of ten near span / count.
local function nice_step(span, count)
  local raw = span / count
  local mag = 10 ^ math.floor(math.log(raw, 10))
  local f = raw / mag
  local m = f < 1.5 and 1 or f < 3.5 and 2 or f < 7.5 and 5 or 10
  return m * mag
end

local function trim_exp(s)
  return (s:gsub('e([-+])0*(%d)', function(sign, d) return 'e' .. (sign == '-' and '-' or '') .. d end))
end

local function num_label(v)
  if v == 0 then return '0' end
  return trim_exp(fmt('%.6g', v))
end

local function step_label(v)
  local a = math.abs(v)
  if a >= 1e6 then return trim_exp(fmt('%gM', v / 1e6)) end
  if a >= 1e4 then return fmt('%gk', v / 1e3) end
  return fmt('%d', math.floor(v + 0.5))
end

-- A linear axis over [lo, hi], widened to whole steps; a flat series gets room around it.
local function linear_axis(lo, hi)
  if hi - lo <= math.abs(hi) * 1e-12 then
    local pad = hi ~= 0 and math.abs(hi) * 0.1 or 1
    lo, hi = lo - pad, hi + pad
  end
  local step = nice_step(hi - lo, 5)
  lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
  local ticks = {}
  for k = 0, math.floor((hi - lo) / step + 0.5) do
    local v = lo + k * step
    if math.abs(v) < step * 1e-9 then v = 0 end
    ticks[#ticks + 1] = { v, num_label(v) }
  end
  return { lo = lo, hi = hi, ticks = ticks, map = function(v) return (v - lo) / (hi - lo) end }
end

-- A base-2 log axis (loss scales are powers of two), ticks at powers of two.
local function log2_axis(lo, hi)
  local a, b = math.floor(math.log(lo, 2)), math.ceil(math.log(hi, 2))
  if b == a then a, b = a - 1, b + 1 end
  local every = math.max(1, math.ceil((b - a) / 6))
  local ticks = {}
  for e = a, b do
    if (e - a) % every == 0 then
      local v = 2.0 ^ e
      ticks[#ticks + 1] = { v, (e >= 0 and e <= 20) and fmt('%d', math.tointeger(v)) or fmt('2^%d', e) }
    end
  end
  return { lo = 2.0 ^ a, hi = 2.0 ^ b, ticks = ticks, log = true,
           map = function(v) return (math.log(v, 2) - a) / (b - a) end }
end

local function y_axis(series, spec)
  local lo, hi = math.huge, -math.huge
  for _, y in ipairs(series.ys) do lo, hi = math.min(lo, y), math.max(hi, y) end
  if spec.log2 and lo > 0 and hi / lo >= 4 then return log2_axis(lo, hi) end
  return linear_axis(lo, hi)
end

-- The x axis: the data's own range (the lines span the panel), ticks at whole steps inside it.
local function x_axis(lo, hi)
  if hi <= lo then lo, hi = lo - 1, hi + 1 end
  local step = math.max(1, nice_step(hi - lo, 8))
  local ticks = {}
  local first = math.ceil(lo / step - 1e-9) * step
  for v = first, hi + step * 1e-9, step do ticks[#ticks + 1] = { v, step_label(v) } end
  return { lo = lo, hi = hi, ticks = ticks, map = function(v) return (v - lo) / (hi - lo) end }
end

-- Drawing -------------------------------------------------------------------------------------

local W, LEFT, RIGHT = 960, 96, 28
local TOP, PANEL_H, GAP, BOTTOM = 86, 210, 58, 56
local PLOT_W = W - LEFT - RIGHT
local Y_PAD = 0.04        -- the lines keep off the frame's top and bottom edges

local function esc(s)
  return (s:gsub('[&<>"]', { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;' }))
end

-- At most two points per pixel column: the lowest and highest of each, in step order.
local function decimate(xs, ys, xmap)
  if #xs <= 2 * PLOT_W then return xs, ys end
  local ox, oy = {}, {}
  local i, n = 1, #xs
  while i <= n do
    local col = math.floor(xmap(xs[i]) * PLOT_W)
    local lo, hi, j = i, i, i
    while j + 1 <= n and math.floor(xmap(xs[j + 1]) * PLOT_W) == col do
      j = j + 1
      if ys[j] < ys[lo] then lo = j end
      if ys[j] > ys[hi] then hi = j end
    end
    local a, b = math.min(lo, hi), math.max(lo, hi)
    ox[#ox + 1], oy[#oy + 1] = xs[a], ys[a]
    if b ~= a then ox[#ox + 1], oy[#oy + 1] = xs[b], ys[b] end
    i = j + 1
  end
  return ox, oy
end

local function panel(out, spec, series, xaxis, top, is_last)
  local x0, y0, h = LEFT, top, PANEL_H
  local function px(v) return x0 + xaxis.map(v) * PLOT_W end
  local title = spec.title
  if series and #series.xs > 0 then
    title = fmt('%s (last: %s at step %s)', title, num_label(series.ys[#series.ys]), step_label(series.xs[#series.xs]))
  end
  if series and series.nonfinite > 0 then
    title = fmt('%s, %d non-finite not drawn', title, series.nonfinite)
  end
  out[#out + 1] = fmt('<g class="panel" id="%s">', spec.ylabel:gsub(' ', '_'))
  out[#out + 1] = fmt('<text x="%d" y="%d" class="ptitle">%s</text>', x0, y0 - 10, esc(title))
  out[#out + 1] = fmt('<rect x="%d" y="%d" width="%d" height="%d" class="frame"/>', x0, y0, PLOT_W, h)

  -- x grid and tick labels (on every panel: they are read without a ruler).
  for _, t in ipairs(xaxis.ticks) do
    local x = px(t[1])
    out[#out + 1] = fmt('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="grid"/>', x, y0, x, y0 + h)
    out[#out + 1] = fmt('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="tick"/>', x, y0 + h, x, y0 + h + 5)
    out[#out + 1] = fmt('<text x="%.1f" y="%d" class="xt">%s</text>', x, y0 + h + 18, esc(t[2]))
  end
  if is_last then
    out[#out + 1] = fmt('<text x="%.1f" y="%d" class="axis">step (the CSV step column: global samples)</text>',
                        x0 + PLOT_W / 2, y0 + h + 40)
  end

  local cy = y0 + h / 2
  out[#out + 1] = fmt('<text x="%d" y="%.1f" class="axis" transform="rotate(-90 %d %.1f)">%s</text>',
                      22, cy, 22, cy, esc(spec.ylabel))
  if not series or #series.xs == 0 then
    local note = not series and (spec.missing or ('no ' .. spec.file)) or ('no finite values in ' .. spec.file)
    out[#out + 1] = fmt('<text x="%.1f" y="%.1f" class="note">%s</text>', x0 + PLOT_W / 2, cy, esc(note))
    out[#out + 1] = '</g>'
    return
  end

  local yaxis = y_axis(series, spec)
  local function py(v) return y0 + h - (Y_PAD + (1 - 2 * Y_PAD) * yaxis.map(v)) * h end
  for _, t in ipairs(yaxis.ticks) do
    local y = py(t[1])
    out[#out + 1] = fmt('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="grid"/>', x0, y, x0 + PLOT_W, y)
    out[#out + 1] = fmt('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="tick"/>', x0 - 5, y, x0, y)
    out[#out + 1] = fmt('<text x="%d" y="%.1f" class="yt">%s</text>', x0 - 8, y + 4, esc(t[2]))
  end
  if yaxis.log then
    out[#out + 1] = fmt('<text x="%d" y="%d" class="scale">log2 scale</text>', x0 + PLOT_W, y0 - 10)
  end

  local xs, ys = decimate(series.xs, series.ys, xaxis.map)
  local pts = {}
  for i = 1, #xs do pts[i] = fmt('%.1f,%.1f', px(xs[i]), py(ys[i])) end
  out[#out + 1] = fmt('<polyline class="series" stroke="%s" points="%s"/>', spec.color, table.concat(pts, ' '))
  if #xs == 1 then
    out[#out + 1] = fmt('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>', px(xs[1]), py(ys[1]), spec.color)
  end
  out[#out + 1] = '</g>'
end

local STYLE = [[
text { font-family: 'DejaVu Sans', Arial, Helvetica, sans-serif; fill: #222; }
.title { font-size: 18px; font-weight: bold; }
.subtitle { font-size: 12px; fill: #555; }
.ptitle { font-size: 14px; font-weight: bold; }
.axis { font-size: 12px; text-anchor: middle; fill: #444; }
.xt { font-size: 11px; text-anchor: middle; fill: #444; }
.yt { font-size: 11px; text-anchor: end; fill: #444; }
.scale { font-size: 11px; text-anchor: end; fill: #777; }
.note { font-size: 13px; text-anchor: middle; fill: #888; font-style: italic; }
.frame { fill: #fff; stroke: #888; stroke-width: 1; }
.grid { stroke: #e4e4e4; stroke-width: 1; }
.tick { stroke: #888; stroke-width: 1; }
.series { fill: none; stroke-width: 1.6; stroke-linejoin: round; stroke-linecap: round; }
]]

local function render(dir, all)
  local lo, hi = math.huge, -math.huge
  for _, s in pairs(all) do
    if #s.xs > 0 then lo, hi = math.min(lo, s.xs[1]), math.max(hi, s.xs[#s.xs]) end
  end
  if lo == math.huge then lo, hi = 0, 1 end
  local xaxis = x_axis(lo, hi)
  local height = TOP + 3 * PANEL_H + 2 * GAP + BOTTOM
  local name = dir:match('([^/]+)$') or dir
  local out = {
    '<?xml version="1.0" encoding="UTF-8"?>',
    fmt('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">', W, height, W, height),
    '<style>', STYLE, '</style>',
    fmt('<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>', W, height),
    fmt('<text x="%d" y="26" class="title">%s: loss, learning rate and loss scale</text>', LEFT, esc(name)),
    fmt('<text x="%d" y="44" class="subtitle">%s</text>', LEFT, esc(dir)),
  }
  for k, spec in ipairs(SERIES) do
    panel(out, spec, all[k], xaxis, TOP + (k - 1) * (PANEL_H + GAP), k == #SERIES)
  end
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

-- Main ----------------------------------------------------------------------------------------

local args = arg or {}
if #args ~= 2 or args[1] == '-h' or args[1] == '--help' then
  io.stderr:write('usage: zlua scripts/plot.lua RUN_DIR_OR_CSV_DIR OUT.svg\n',
                  '  draws Train_Samples_{train_loss,lr,loss_scale}.csv (csv_monitor) as one SVG\n')
  os.exit(2)
end
local dir = csv_dir(args[1])
local all, counts, any = {}, {}, false
for k, spec in ipairs(SERIES) do
  all[k] = read_series(dir .. '/' .. spec.file)
  any = any or all[k] ~= nil
  counts[#counts + 1] = fmt('%s %s', spec.ylabel, all[k] and (#all[k].xs .. ' points') or 'absent')
end
if not any then die(fmt("no Train_Samples_*.csv in '%s'", dir)) end
local svg = render(dir, all)
local f, err = io.open(args[2], 'w')
if not f then die(fmt('cannot write %s', err)) end
local ok, werr = f:write(svg)
if ok then ok, werr = f:close() end
if not ok then die(fmt("writing '%s': %s", args[2], tostring(werr))) end
print(fmt('plot: wrote %s (%s)', args[2], table.concat(counts, ', ')))
