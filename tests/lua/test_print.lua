-- Tensor printing (zlua.print): exact text for integers, floats with a scale
-- line, exponent notation, 3-d and 4-d slices, wrapped columns, summarised
-- large tensors, scalars, empty tensors, and the footer's dtype and autograd notes.
local zl = require 'zlua'
local H = require 'harness'
local test, check, check_eq = H.test, H.check, H.check_eq

local function lines(...) return table.concat({...}, '\n') end

test('integers', function()
  check_eq(tostring(zl.tensor{{1, 2, 3}, {4, 5, 6}}), lines(
    '1  2  3',
    '4  5  6',
    '[zlua.Tensor i64 of size 2x3 on cpu]'))
  check_eq(tostring(zl.tensor{{-1, 20}, {300, 4}}), lines(
    ' -1   20',
    '300    4',
    '[zlua.Tensor i64 of size 2x2 on cpu]'), 'columns right-aligned to one width')
  check_eq(tostring(zl.tensor{1, 2, 3}:float()), lines(
    '1',
    '2',
    '3',
    '[zlua.Tensor f32 of size 3 on cpu]'), 'a 1-d tensor is a column; integral floats have no decimals')
end)

test('floats', function()
  check_eq(tostring(zl.tensor{{1.5, -2.25}, {1000.125, 3}}), lines(
    '   1.5000    -2.2500',
    '1000.1250     3.0000',
    '[zlua.Tensor f32 of size 2x2 on cpu]'))
  check_eq(tostring(zl.tensor{{0.001, 0.0025}, {-0.004, 0.0005}}), lines(
    '1e-03 *',
    ' 1.0000   2.5000',
    '-4.0000   0.5000',
    '[zlua.Tensor f32 of size 2x2 on cpu]'), 'small magnitudes share a scale line')
  check_eq(tostring(zl.tensor{123456.7, 234567.8}), lines(
    '1e+05 *',
    '1.2346',
    '2.3457',
    '[zlua.Tensor f32 of size 2 on cpu]'), 'large magnitudes share a scale line')
  check_eq(tostring(zl.tensor{1e-6, 1}), lines(
    '1.0000e-06',
    '1.0000e+00',
    '[zlua.Tensor f32 of size 2 on cpu]'), 'a wide range of magnitudes uses exponents')
  check_eq(tostring(zl.tensor{0 / 0, 1.5, 1 / 0}), lines(
    '   nan',
    '1.5000',
    '   inf',
    '[zlua.Tensor f32 of size 3 on cpu]'))
end)

test('slices', function()
  check_eq(tostring(zl.arange(8):reshape(2, 2, 2)), lines(
    '(1,.,.) =',
    '0  1',
    '2  3',
    '',
    '(2,.,.) =',
    '4  5',
    '6  7',
    '[zlua.Tensor i64 of size 2x2x2 on cpu]'))
  check_eq(tostring(zl.arange(8):reshape(2, 1, 2, 2) * 2), lines(
    '(1,1,.,.) =',
    ' 0   2',
    ' 4   6',
    '',
    '(2,1,.,.) =',
    ' 8  10',
    '12  14',
    '[zlua.Tensor i64 of size 2x1x2x2 on cpu]'), 'one width across every slice')
end)

test('wrapping', function()
  check_eq(tostring(zl.arange(30):reshape(2, 15):float() * 0.5), lines(
    'Columns 1 to 9',
    ' 0.0000   0.5000   1.0000   1.5000   2.0000   2.5000   3.0000   3.5000   4.0000',
    ' 7.5000   8.0000   8.5000   9.0000   9.5000  10.0000  10.5000  11.0000  11.5000',
    '',
    'Columns 10 to 15',
    ' 4.5000   5.0000   5.5000   6.0000   6.5000   7.0000',
    '12.0000  12.5000  13.0000  13.5000  14.0000  14.5000',
    '[zlua.Tensor f32 of size 2x15 on cpu]'))
  zl.set_printoptions{ linewidth = 7 }
  local ok, text = pcall(tostring, zl.tensor{{1, 2, 3}})
  zl.set_printoptions{ linewidth = 80 }
  check_eq(ok and text, lines(
    '1  2  3',
    '[zlua.Tensor i64 of size 1x3 on cpu]'), 'a row exactly as wide as the line is not wrapped')
  zl.set_printoptions{ linewidth = 4 }
  ok, text = pcall(tostring, zl.tensor{{1, 2, 3}})
  zl.set_printoptions{ linewidth = 80 }
  check_eq(ok and text, lines(
    'Columns 1 to 2',
    '1  2',
    '',
    'Column 3',
    '3',
    '[zlua.Tensor i64 of size 1x3 on cpu]'), 'a single column has its own header')
  H.check_error(function() zl.set_printoptions{ width = 3 } end, "set_printoptions: unknown option 'width'")
end)

test('summarised', function()
  check_eq(tostring(zl.arange(1200):reshape(30, 40)), lines(
    '   0     1     2   ...    37    38    39',
    '  40    41    42   ...    77    78    79',
    '  80    81    82   ...   117   118   119',
    '...',
    '1080  1081  1082   ...  1117  1118  1119',
    '1120  1121  1122   ...  1157  1158  1159',
    '1160  1161  1162   ...  1197  1198  1199',
    '[zlua.Tensor i64 of size 30x40 on cpu]'))
  check_eq(tostring(zl.arange(1001)), lines(
    '   0', '   1', '   2', ' ...', ' 998', ' 999', '1000',
    '[zlua.Tensor i64 of size 1001 on cpu]'))
  check_eq(tostring(zl.arange(1000)):sub(1, 7), lines('  0', '  1'), '1000 elements are not summarised')
  local text = tostring(zl.zeros(8, 10, 20))
  local heads = {}
  for h in text:gmatch('%(([%d,]+),%.,%.%) =') do heads[#heads + 1] = h end
  check_eq(table.concat(heads, ' '), '1 2 3 6 7 8', 'summarised slices: the first and last three')
  check_eq(select(2, text:gsub('\n%.%.%.\n', '')), 7, 'one elided block of slices and one per slice')
  check_eq(text:match('[^\n]*'), '(1,.,.) =')
  zl.set_printoptions{ linewidth = 4 }
  local ok, wrapped = pcall(tostring, zl.arange(2000):reshape(2, 1000))
  zl.set_printoptions{ linewidth = 80 }
  check(ok and wrapped:find('Column 1\n   0\n1000\n\n', 1, true) == 1
        and wrapped:find('\n\n...\n ...\n ...\n\nColumn 998\n', 1, true) ~= nil,
        'wrapping a summarised tensor column by column: ' .. tostring(wrapped))
end)

test('footer', function()
  check_eq(tostring(zl.tensor({{1.5, 2}, {3, 4}}, 'bf16')), lines(
    '1.5000  2.0000',
    '3.0000  4.0000',
    '[zlua.Tensor bf16 of size 2x2 on cpu]'))
  check_eq(tostring(zl.tensor(2.5)), lines('2.5000', '[zlua.Tensor f32 scalar on cpu]'))
  check_eq(tostring(zl.tensor(7)), lines('7', '[zlua.Tensor i64 scalar on cpu]'))
  check_eq(tostring(zl.tensor(true)), lines('true', '[zlua.Tensor bool scalar on cpu]'))
  check_eq(tostring(zl.zeros(0, 3)), '[zlua.Tensor f32 of size 0x3 on cpu]')
  local x = zl.tensor{1, 2}:float():requires_grad(true)
  check_eq(tostring(x), lines('1', '2', '[zlua.Tensor f32 of size 2 on cpu] (requires_grad)'))
  check_eq(tostring(x * 2), lines('2', '4', '[zlua.Tensor f32 of size 2 on cpu] grad_fn=<affine>'))
  check_eq(tostring(zl.tensor{{true, false}}), lines(' true  false', '[zlua.Tensor bool of size 1x2 on cpu]'))
end)

H.done()
