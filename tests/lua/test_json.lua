-- Tests zlua.json: every RFC 8259 form (escapes, \u surrogate pairs, numbers keeping whether
-- they were integers, nesting), the comments and trailing commas DeepSpeed's reader allows,
-- each syntax error with its line:column and what was expected, duplicate keys with their
-- path and both lines, and the encoder's round trip.

local json = require 'zlua.json'

local H = require 'harness'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local function decode(text) return json.decode(text, 't.json') end

-- The error json.decode raises for text, which must be exactly want.
local function check_decode_error(text, want)
  local ok, err = pcall(json.decode, text, 't.json')
  if ok then
    check(false, 'no error for ' .. string.format('%q', text) .. ', expected ' .. want)
    return
  end
  check_eq(err, want, 'error for ' .. string.format('%q', text))
end

test('scalars_and_integer_kind', function()
  check_eq(decode('true'), true)
  check_eq(decode('false'), false)
  check_eq(decode('null'), json.null)
  check_eq(decode('"x"'), 'x')
  local cases = {
    { '0', 0, 'integer' }, { '-0', 0, 'integer' }, { '42', 42, 'integer' },
    { '-17', -17, 'integer' }, { '9223372036854775807', math.maxinteger, 'integer' },
    { '-9223372036854775808', math.mininteger, 'integer' },
    { '9223372036854775808', 9223372036854775808.0, 'float' },
    { '1.0', 1.0, 'float' }, { '2e8', 2e8, 'float' }, { '0.94e6', 940000.0, 'float' },
    { '1E+2', 100.0, 'float' }, { '1e-2', 0.01, 'float' }, { '-0.5', -0.5, 'float' },
    { '3e-5', 3e-5, 'float' }, { '15099494.4', 15099494.4, 'float' },
  }
  for _, c in ipairs(cases) do
    local v = decode(c[1])
    check_eq(v, c[2], c[1])
    check_eq(math.type(v), c[3], c[1] .. ' kind')
  end
end)

test('strings_and_escapes', function()
  check_eq(decode([["a\"b\\c\/d\b\f\n\r\t"]]), 'a"b\\c/d\b\f\n\r\t')
  check_eq(decode([["\u0041\u00e9\u4e2d"]]), 'A\u{e9}\u{4e2d}')
  check_eq(decode([["\uD83D\uDE00"]]), '\u{1F600}', 'surrogate pair')
  check_eq(decode([["\ud834\udd1e"]]), '\u{1D11E}', 'lower-case surrogate pair')
  check_eq(decode('"中文 ok"'), '中文 ok', 'raw UTF-8')
  check_eq(decode([["\u0000"]]), '\0', 'NUL escape')
  check_eq(decode('""'), '')
  check_eq(decode('"\127"'), '\127', 'DEL needs no escape')
end)

test('containers', function()
  local v = decode('{"a": [1, 2.5, "x", null, true, {"b": []}], "c": {}}')
  check_eq(#v.a, 6)
  check_eq(v.a[1], 1)
  check_eq(v.a[4], json.null, 'null keeps its place')
  check_eq(getmetatable(v.a), json.array)
  check_eq(getmetatable(v.a[6].b), json.array, 'an empty array stays an array')
  check_eq(next(v.a[6].b), nil)
  check_eq(getmetatable(v.c), nil)
  check_eq(next(v.c), nil)
  local deep = string.rep('[', 150) .. string.rep(']', 150)
  local d = decode(deep)
  for _ = 1, 149 do d = d[1] end
  check_eq(#d, 0, '150 levels')
end)

test('comments_trailing_commas_bom', function()
  local text = '\239\187\191// leading comment\n{\n  /* block\n comment */ "a": 1, // one\n'
    .. '  "b": [1, 2,],\n}\n// end'
  local v, meta = decode(text)
  check_eq(v.a, 1)
  check_eq(#v.b, 2)
  check_eq(meta[v].lines.a, 4, 'line of a after a multi-line comment')
  check_eq(meta[v].lines.b, 5)
  check_eq(meta[v].line, 2)
  check_eq(meta[v.b].line, 5)
  check_eq(decode('[1 /* x */ , 2]')[2], 2)
end)

test('syntax_errors', function()
  check_decode_error('', 't.json:1:1: expected a JSON value, got end of input')
  check_decode_error('  \n ', 't.json:2:2: expected a JSON value, got end of input')
  check_decode_error('{"a": 1', "t.json:1:8: expected ',' or '}' after the value of \"a\", got end of input")
  check_decode_error('{"a": 1 "b": 2}', "t.json:1:9: expected ',' or '}' after the value of \"a\", got '\"'")
  check_decode_error('{"a" 1}', "t.json:1:6: expected ':' after the key \"a\", got '1'")
  check_decode_error('{a: 1}', "t.json:1:2: expected a key in double quotes, got 'a'")
  check_decode_error("{'a': 1}", "t.json:1:2: expected a key in double quotes, got '''")
  check_decode_error('{,}', "t.json:1:2: expected a key in double quotes, got ','")
  check_decode_error('[1,,2]', "t.json:1:4: expected a value (object, array, string, number, "
    .. "true, false or null), got ','")
  check_decode_error('[1 2]', "t.json:1:4: expected ',' or ']' after an array element, got '2'")
  check_decode_error('{"a": tru}', "t.json:1:7: expected a value (object, array, string, "
    .. "number, true, false or null), got 'tru'")
  check_decode_error('{"a": True}', "t.json:1:7: expected a value (object, array, string, "
    .. "number, true, false or null), got 'True'")
  check_decode_error('{"a": 1} x', "t.json:1:10: unexpected 'x' after the JSON value")
  check_decode_error('{"a": 01}', 't.json:1:7: leading zeros are not allowed in a number')
  check_decode_error('{"a": 1.}', "t.json:1:9: expected a digit after the decimal point, got '}'")
  check_decode_error('{"a": .5}', "t.json:1:7: expected a value (object, array, string, number, "
    .. "true, false or null), got '.'")
  check_decode_error('[1e]', "t.json:1:4: expected a digit in the exponent, got ']'")
  check_decode_error('[-]', "t.json:1:3: expected a digit after '-', got ']'")
  check_decode_error('[+1]', "t.json:1:2: expected a value (object, array, string, number, "
    .. "true, false or null), got '+'")
  check_decode_error('[1e999]', 't.json:1:2: number 1e999 is out of range')
  check_decode_error('[NaN]', "t.json:1:2: expected a value (object, array, string, number, "
    .. "true, false or null), got 'NaN'")
  check_decode_error('{\n  "a": "x\n"}', 't.json:2:10: control character U+000A in a string '
    .. '(write it as an escape such as \\n)')
  check_decode_error('{"a": "abc', 't.json:1:7: unterminated string (it opens here)')
  check_decode_error([["\x"]], 't.json:1:2: invalid escape \\x (valid: \\" \\\\ \\/ \\b \\f \\n '
    .. '\\r \\t \\uXXXX)')
  check_decode_error([["\u12G4"]], "t.json:1:4: expected 4 hexadecimal digits after \\u, got '12G4'")
  check_decode_error([["\uD800"]], 't.json:1:2: unpaired surrogate \\uD800: a high surrogate must '
    .. 'be followed by a \\u escape in DC00..DFFF')
  check_decode_error([["\uD800\u0041"]], 't.json:1:2: unpaired surrogate \\uD800: a high '
    .. 'surrogate must be followed by a \\u escape in DC00..DFFF')
  check_decode_error([["\uDC00"]], 't.json:1:2: unpaired surrogate \\uDC00: a low surrogate must '
    .. 'follow a high one')
  check_decode_error('{\n /* never closed\n "a": 1}', 't.json:2:2: unterminated /* comment')
  check_decode_error('[1, / 2]', "t.json:1:5: unexpected '/' (comments are written // or /* */)")
  check_decode_error('["\255"]', 't.json:1:3: invalid UTF-8 (byte 0xFF)')
  check_decode_error('{"é": x}', "t.json:1:7: expected a value (object, array, string, number, "
    .. "true, false or null), got 'x'")
  check_decode_error(string.rep('[', 201), 't.json:1:201: nesting deeper than 200 levels')
  check_error(function() json.decode(42) end, 'json.decode: expected a string, got number')
end)

test('duplicate_keys', function()
  check_decode_error('{"a": 1,\n "a": 2}',
    't.json:2:2: duplicate key "a" (first at line 1, again at line 2)')
  check_decode_error('{\n "zero_optimization": {\n  "stage": 2,\n  "reduce_bucket_size": 5,\n'
    .. '  "stage": 3\n }\n}',
    't.json:5:3: duplicate key "zero_optimization.stage" (first at line 3, again at line 5)')
  check_decode_error('{"a": [{"b": 1, "b": 2}]}',
    't.json:1:17: duplicate key "a[1].b" (first at line 1, again at line 1)')
  -- The same key in two different objects is not a duplicate.
  local v = decode('{"a": {"x": 1}, "b": {"x": 2}}')
  check_eq(v.b.x, 2)
end)

test('default_name', function()
  local ok, err = pcall(json.decode, '[')
  check(not ok)
  check_eq(err, 'json:1:2: expected a value (object, array, string, number, true, false or '
    .. 'null), got end of input')
end)

test('encode_round_trip', function()
  local v = {
    name = 'a "quoted" \\ line\n\t\1', n = 42, f = 2.0, g = 0.1, h = 3e-5, big = 2e8,
    list = { 1, 2.5, true, false, json.null }, empty_object = {},
    empty_array = setmetatable({}, json.array), nested = { x = { y = { 'z' } } },
    uni = 'é中\u{1F600}',
  }
  for _, indent in ipairs({ false, 2 }) do
    local text = json.encode(v, indent or nil)
    local back = json.decode(text)
    check_eq(back.name, v.name)
    check_eq(back.n, 42)
    check_eq(math.type(back.n), 'integer')
    check_eq(math.type(back.f), 'float', 'a float stays a float')
    check_eq(back.f, 2.0)
    check_eq(back.g, 0.1)
    check_eq(back.h, 3e-5)
    check_eq(math.type(back.big), 'float')
    check_eq(back.list[2], 2.5)
    check_eq(back.list[5], json.null)
    check_eq(getmetatable(back.empty_object), nil)
    check_eq(getmetatable(back.empty_array), json.array)
    check_eq(back.nested.x.y[1], 'z')
    check_eq(back.uni, v.uni)
    check_eq(json.encode(back, indent or nil), text, 'stable text')
  end
  check_eq(json.encode({ b = 1, a = { 1, 2 } }), '{"a":[1,2],"b":1}')
  check_eq(json.encode({ a = 1 }, 2), '{\n  "a": 1\n}')
  check_eq(json.encode(1 / 3), '0.3333333333333333')
  check_error(function() json.encode(0 / 0) end, 'has no JSON form')
  check_error(function() json.encode({ [1] = 1, x = 2 }) end, 'object keys must be strings')
  check_error(function() json.encode({ f = print }) end, 'cannot encode a function')
  local cyc = {}
  cyc.self = cyc
  check_error(function() json.encode(cyc) end, 'a table contains itself')
end)

H.done()
