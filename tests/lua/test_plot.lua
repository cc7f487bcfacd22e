-- scripts/plot.lua run as a user runs it, on CSV files written here (through
-- zlua.monitor, and by hand with a resumed run's repeated header and steps): the
-- SVG is well-formed (a small tag checker below), has the title and the three
-- panel titles, and one polyline per present series with one point per distinct
-- finite row; a long run is thinned to at most two points per pixel column; bad
-- arguments give their messages.
local H = require 'harness'
local monitor = require 'zlua.monitor'
local test, check, check_eq = H.test, H.check, H.check_eq

local fmt = string.format

local q = H.quote
local src = H.source_dir
local PLOT = src .. '/scripts/plot.lua'

local root = os.tmpname()
os.remove(root)
assert(os.execute('mkdir -p ' .. q(root)))

local read, write = H.read_file, H.write_file

local function plot(...) return H.run_script(PLOT, ...) end

-- Well-formed enough for a browser: every tag closed in order, attributes quoted,
-- no stray '<' or unescaped '&' in text. Returns nil or the first problem.
local function xml_problem(s)
  local stack, pos = {}, 1
  s = s:gsub('^<%?xml[^>]*%?>%s*', '')
  while pos <= #s do
    local lt = s:find('<', pos, true)
    local text = s:sub(pos, (lt or #s + 1) - 1)
    if text:find('&', 1, true) and text:gsub('&[#%w]+;', ''):find('&', 1, true) then
      return 'unescaped & in text near ' .. pos
    end
    if not lt then break end
    local gt = s:find('>', lt, true)
    if not gt then return 'unclosed tag at ' .. lt end
    local tag = s:sub(lt + 1, gt - 1)
    if tag:find('<', 1, true) then return 'stray < at ' .. lt end
    local close = tag:match('^/([%w:_-]+)%s*$')
    if close then
      local open = table.remove(stack)
      if open ~= close then return fmt('</%s> closes <%s> at %d', close, tostring(open), lt) end
    else
      local name, attrs, selfclose = tag:match('^([%w:_-]+)(.-)(/?)$')
      if not name then return 'bad tag <' .. tag .. '>' end
      local rest = attrs:gsub('%s+[%w:_-]+="[^"<]*"', '')
      if rest:find('%S') then return fmt('bad attributes in <%s>: %s', name, rest) end
      if selfclose == '' then stack[#stack + 1] = name end
    end
    pos = gt + 1
  end
  if #stack > 0 then return 'unclosed <' .. stack[#stack] .. '>' end
  if not s:match('^%s*<svg[ >]') then return 'the root is not <svg>' end
  return nil
end

-- The points of every polyline, as counts, in document order.
local function polylines(svg)
  local counts = {}
  for pts in svg:gmatch('<polyline[^>]-points="([^"]*)"') do
    local n = 0
    for x, y in pts:gmatch('(%-?[%d.]+),(%-?[%d.]+)') do
      n = n + 1
      assert(tonumber(x) and tonumber(y))
    end
    counts[#counts + 1] = n
  end
  return counts
end

test('xml_checker_fails_on_bad_input', function()
  check(xml_problem('<svg><g></svg>') ~= nil, 'mismatched')
  check(xml_problem('<svg><text>a & b</text></svg>') ~= nil, 'bare &')
  check(xml_problem('<svg><rect x=1/></svg>') ~= nil, 'unquoted attribute')
  check(xml_problem('<svg><g>') ~= nil, 'unclosed')
  check_eq(xml_problem('<?xml version="1.0"?>\n<svg a="1"><g><rect x="1"/></g><text>a &amp; b</text></svg>'), nil)
end)

test('plot_from_monitor_run', function()
  local out = root .. '/run'
  local mon = monitor.from_config({ csv_monitor = { enabled = true, output_path = out, job_name = 'gpt & co' } })
  for step = 1, 50 do
    mon:write_events({ { 'Train/Samples/train_loss', 3 * math.exp(-step / 20) + 0.5, step * 8 },
                       { 'Train/Samples/lr', step < 10 and 1e-4 * step or 1e-3, step * 8 },
                       { 'Train/Samples/loss_scale', 2.0 ^ (16 - step // 10), step * 8 } })
  end
  mon:close()
  -- The run directory (output_path) finds its one job directory.
  local svg_path = root .. '/run.svg'
  local status, msg = plot(out, svg_path)
  check_eq(status, 0, 'exit status: ' .. msg)
  check(msg:find('plot: wrote ' .. svg_path .. ' (loss 50 points, lr 50 points, loss scale 50 points)', 1, true),
        'summary line: ' .. msg)
  local svg = read(svg_path) or ''
  check_eq(xml_problem(svg), nil, 'well-formed')
  check(svg:find('gpt &amp; co: loss, learning rate and loss scale', 1, true), 'title')
  for _, t in ipairs({ 'Training loss', 'Learning rate', 'Loss scale' }) do
    check(svg:find('>' .. t .. ' (last: ', 1, true), 'panel title ' .. t)
  end
  check(svg:find('log2 scale', 1, true), 'loss scale on a log axis')
  check(svg:find('>65536<', 1, true) and svg:find('>4096<', 1, true), 'powers of two as ticks')
  local counts = polylines(svg)
  check_eq(#counts, 3, 'polylines')
  for i = 1, 3 do check_eq(counts[i], 50, 'points of polyline ' .. i) end
  -- The job directory itself, and one of its files, give the same picture.
  local again = root .. '/again.svg'
  check_eq((plot(out .. '/gpt & co/', again)), 0)
  check_eq(read(again), svg, 'from the CSV directory')
  check_eq((plot(out .. '/gpt & co/Train_Samples_lr.csv', again)), 0)
  check_eq(read(again), svg, 'from a CSV file')
end)

test('resumed_run_and_missing_series', function()
  local dir = root .. '/resumed'
  os.execute('mkdir -p ' .. q(dir))
  -- A run logged steps 8..40, crashed, resumed from 24: the rows of 32 and 40
  -- are written again; one nan; killed again in the middle of a row; no
  -- loss_scale file (no fp16).
  write(dir .. '/Train_Samples_train_loss.csv',
        'step,train_loss\r\n8,2.5\r\n16,2.25\r\n24,nan\r\n32,2.1\r\n40,2.0\r\n'
        .. 'step,train_loss\r\n32,2.05\r\n40,inf\r\n48,1.9\r\n5')
  write(dir .. '/Train_Samples_lr.csv', 'step,lr\n8,1e-05\n16,2e-05\n24,3e-05\n')
  local svg_path = root .. '/resumed.svg'
  local status, msg = plot(dir, svg_path)
  check_eq(status, 0, 'exit status: ' .. msg)
  local svg = read(svg_path) or ''
  check_eq(xml_problem(svg), nil, 'well-formed')
  local counts = polylines(svg)
  check_eq(#counts, 2, 'two series present')
  check_eq(counts[1], 4, 'loss: steps 8, 16, 32, 48 (24 nan, 40 inf)')
  check_eq(counts[2], 3, 'lr points')
  check(svg:find('2 non-finite not drawn', 1, true), 'non-finite count')
  check(svg:find('last: 1.9 at step 48', 1, true), 'last loss')
  check(svg:find('no Train_Samples_loss_scale.csv: the loss scale is logged with fp16 only', 1, true), 'missing note')
  check(svg:find('>Loss scale<', 1, true), 'loss scale panel title')
end)

test('long_run_is_thinned', function()
  local dir = root .. '/long'
  os.execute('mkdir -p ' .. q(dir))
  local rows = { 'step,train_loss' }
  for s = 1, 20000 do
    rows[#rows + 1] = fmt('%d,%.6f', s, s == 12345 and 50 or 1 + 1 / s)
  end
  write(dir .. '/Train_Samples_train_loss.csv', table.concat(rows, '\r\n') .. '\r\n')
  local svg_path = root .. '/long.svg'
  check_eq((plot(dir, svg_path)), 0)
  local svg = read(svg_path) or ''
  check_eq(xml_problem(svg), nil, 'well-formed')
  local counts = polylines(svg)
  check_eq(#counts, 1)
  check(counts[1] and counts[1] <= 2 * 836 and counts[1] >= 836, fmt('thinned to %s points', tostring(counts[1])))
  check(svg:find('last: 1.00005 at step 20k', 1, true), 'last value kept')
  -- The spike survives thinning: some point sits at the panel's top padding.
  local top = math.huge
  for y in svg:match('<polyline[^>]-points="([^"]*)"'):gmatch(',([%d.]+)') do top = math.min(top, tonumber(y)) end
  check(top < 110, 'spike kept (highest point at y=' .. top .. ')')
end)

test('errors', function()
  local status, msg = plot()
  check_eq(status, 2, 'usage status')
  check(msg:find('usage: zlua scripts/plot.lua RUN_DIR_OR_CSV_DIR OUT.svg', 1, true), msg)
  status, msg = plot(root .. '/nope', root .. '/x.svg')
  check_eq(status, 1)
  check(msg:find("plot: no such directory '" .. root .. "/nope'", 1, true), msg)
  local empty = root .. '/empty'
  os.execute('mkdir -p ' .. q(empty))
  status, msg = plot(empty, root .. '/x.svg')
  check_eq(status, 1)
  check(msg:find("no Train_Samples_*.csv in '" .. empty .. "' nor in its subdirectories (was csv_monitor enabled?)",
                 1, true), msg)
  local two = root .. '/two'
  for _, j in ipairs({ 'a', 'b' }) do
    os.execute('mkdir -p ' .. q(two .. '/' .. j))
    write(two .. '/' .. j .. '/Train_Samples_lr.csv', 'step,lr\r\n1,0.1\r\n')
  end
  status, msg = plot(two, root .. '/x.svg')
  check_eq(status, 1)
  check(msg:find("'" .. two .. "' holds several runs (a, b): name one of them", 1, true), msg)
  write(two .. '/a/Train_Samples_lr.csv', 'step,lr\r\n1,0.1\r\n2,abc\r\n')
  status, msg = plot(two .. '/a', root .. '/x.svg')
  check_eq(status, 1)
  check(msg:find("Train_Samples_lr.csv:3: the value is not a number: 'abc'", 1, true), msg)
  check(not io.open(root .. '/x.svg'), 'nothing written on error')
end)

os.execute('rm -rf ' .. q(root))
H.done()
