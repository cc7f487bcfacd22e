--[[ zlua.monitor.csv: DeepSpeed's csv_monitor. One file per event name under
  output_path/job_name, the name with '/' and ' ' turned into '_' plus
  '.csv' (Train/Samples/train_loss -> Train_Samples_train_loss.csv).

  local csv = require 'zlua.monitor.csv'
  local w = csv.new{output_path = 'runs', job_name = 'digits'}
  w:write_events({{'Train/Samples/train_loss', 0.25, 64}})
  w:close()

  The bytes are those of DeepSpeed's writer (Python's csv module): rows end
  in "\r\n"; the first row a writer gives a file is the header
  "step,<last part of the name>"; every row is "<step>,<value>", the value
  as Python prints it (a Lua integer as an int, a float as repr() writes a
  float: 0.25, 65536.0, 1e-05, nan, inf). Files are appended to, so a
  resumed run adds a second header line where it starts, as DeepSpeed does
  (scripts/plot.lua skips it). ]]

local util = require 'zlua.monitor.util'

local fmt, mtype, tointeger = string.format, math.type, math.tointeger

local csv = {}

local Writer = {}
Writer.__index = Writer

--- csv.format_value(v): a number as Python's str() writes it: an integer as
--- is, a float as the shortest decimal that reads back to the same double,
--- in Python's layout (fixed point with at least one decimal when the
--- decimal exponent is in -5..15, else d.ddde+XX).
function csv.format_value(v)
  if mtype(v) == 'integer' then return fmt('%d', v) end
  if v ~= v then return 'nan' end
  if v == math.huge then return 'inf' end
  if v == -math.huge then return '-inf' end
  if v == 0 then return 1 / v < 0 and '-0.0' or '0.0' end
  local s
  for p = 0, 16 do
    s = fmt('%.' .. p .. 'e', v)
    if tonumber(s) == v then break end
  end
  local sign, lead, rest, exp = s:match('^(%-?)(%d)%.?(%d*)e([-+]%d+)$')
  local digits = (lead .. rest):gsub('0+$', '')
  if digits == '' then digits = '0' end
  local e = tointeger(tonumber(exp))
  local n, point = #digits, e + 1     -- the decimal point sits after `point` digits
  if point <= -4 or point > 16 then
    local mant = n > 1 and digits:sub(1, 1) .. '.' .. digits:sub(2) or digits
    return fmt('%s%se%s%02d', sign, mant, e < 0 and '-' or '+', math.abs(e))
  end
  if point <= 0 then return sign .. '0.' .. ('0'):rep(-point) .. digits end
  if point >= n then return sign .. digits .. ('0'):rep(point - n) .. '.0' end
  return sign .. digits:sub(1, point) .. '.' .. digits:sub(point + 1)
end

--- csv.file_name(event_name): the file's name without '.csv'.
function csv.file_name(name)
  return (name:gsub('[/ ]', '_'))
end

--- csv.new{output_path = '', job_name = 'DeepSpeedJobName'}: a writer whose
--- files go to output_path/job_name (created now; relative to the current
--- directory when output_path is empty, as DeepSpeed's default).
function csv.new(opts)
  local dir = util.join(opts.output_path or '', opts.job_name or 'DeepSpeedJobName')
  util.make_dir('csv_monitor', dir)
  return setmetatable({ dir = dir, headed = {}, closed = false }, Writer)
end

--- w:write_events({{name, value, step}, ...}): appends one row per event,
--- each file opened and closed around its row, as DeepSpeed's writer does,
--- so the rows are on disk when the call returns.
function Writer:write_events(events)
  local who = 'csv_monitor: write_events'
  if self.closed then util.raise(who .. ': the monitor is closed') end
  util.events(who, events)
  for i = 1, #events do
    local name, value, step = util.event(who, events, i)
    local base = csv.file_name(name)
    local path = self.dir .. '/' .. base .. '.csv'
    util.check_file(who, path)
    local f, err = io.open(path, 'ab')
    if not f then util.raise(fmt('%s: cannot open %s', who, err)) end
    if not self.headed[base] then
      self.headed[base] = true
      f:write('step,', name:match('[^/]*$'), '\r\n')
    end
    f:write(fmt('%d', step), ',', csv.format_value(value), '\r\n')
    local ok, werr = f:close()
    if not ok then util.raise(fmt("%s: writing '%s': %s", who, path, tostring(werr))) end
  end
end

--- w:flush(): nothing to do (every row is written through); for symmetry
--- with the TensorBoard writer.
function Writer:flush() end

--- w:close(): further writes are an error; closing twice is harmless.
function Writer:close()
  self.closed = true
end

return csv
