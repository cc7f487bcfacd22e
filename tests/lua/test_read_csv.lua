-- zl.read_csv from Lua: values and shape from plain and gzipped files written
-- here, the header flag, and each bad file raising the engine's message
-- (missing, corrupt gzip, bad number, ragged row, empty).
local zl = require 'zlua'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local written = {}
local function write(bytes)
  local path = os.tmpname()
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
  written[#written + 1] = path
  return path
end

-- The gzip of "1,2\n3,4\n" (made with gzip -n), so the test needs no compressor.
local GZ = '\31\139\8\0\0\0\0\0\0\3\51\212\49\226\50\214\49\225\2\0\71\147\108\175\8\0\0\0'

test('plain_values_and_header', function()
  local t = zl.read_csv(write('0.5,-2,3e2\n4,5,6\n'))
  check_eq(t:dtype(), 'f32')
  check_eq(t:size(1), 2)
  check_eq(t:size(2), 3)
  check_close(t, { 0.5, -2, 300, 4, 5, 6 })
  local h = zl.read_csv(write('a,b\n1,2\n'), true)
  check_close(h, { 1, 2 })
  check_eq(h:dim(), 2)
end)

test('gzip', function()
  local t = zl.read_csv(write(GZ))
  check_close(t, { 1, 2, 3, 4 })
  check_eq(t:size(1), 2)
end)

test('errors', function()
  local missing = os.tmpname()
  os.remove(missing)
  check_error(function() return zl.read_csv(missing) end,
              "cannot open '" .. missing .. "': No such file or directory")
  local bad = write(GZ:sub(1, 10) .. '\255' .. GZ:sub(12))
  check_error(function() return zl.read_csv(bad) end, bad .. ': corrupt gzip stream near uncompressed offset 0: invalid block type')
  local cut = write(GZ:sub(1, 14))
  check_error(function() return zl.read_csv(cut) end, cut .. ': corrupt gzip stream')
  local num = write('1,2\n3,x4\n')
  check_error(function() return zl.read_csv(num) end, num .. ":2: field 2 is not a number: 'x4'")
  local ragged = write('1,2\n3\n')
  check_error(function() return zl.read_csv(ragged) end, ragged .. ':2: row has 1 fields, expected 2 (as on line 1)')
  local empty = write('')
  check_error(function() return zl.read_csv(empty) end, empty .. ': no data rows')
  check_error(function() return zl.read_csv() end, 'string expected')
end)

for _, p in ipairs(written) do os.remove(p) end
H.done()
