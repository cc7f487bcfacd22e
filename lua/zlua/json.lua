-- zlua.json: JSON text to Lua values and back, for DeepSpeed config files and the engine's
-- own metadata. RFC 8259, plus what DeepSpeed's reader (hjson) tolerates in the configs
-- people write: // and /* */ comments and trailing commas. Pure Lua 5.4.
--
--   local value, meta = json.decode(text [, name])
--   local text = json.encode(value [, indent])
--
-- decode: objects become tables with string keys, arrays become sequences carrying the
-- metatable json.array (so an empty array stays an array), null becomes json.null (so a
-- key given as null is still there and arrays keep their length). A number written as an
-- integer (no fraction, no exponent) that fits in 64 bits is a Lua integer, any other a
-- float: "2e8" is the float 2e8 and the caller decides whether an integer was meant.
-- A duplicate key is an error naming its path and both lines. Errors are raised as
-- "name:line:column: what was expected, got what" (name defaults to "json").
-- meta maps each decoded object and array to { line =, col =, lines = { [key] = line } }
-- (lines: the line of each key of an object), so a caller can point at a key's line.

local json = {}

json.null = setmetatable({}, {
  __name = 'json.null',
  __tostring = function() return 'null' end,
})

json.array = { __name = 'json.array' }

local byte, sub, find, fmt = string.byte, string.sub, string.find, string.format
local mtype = math.type

-- Nesting deeper than this is refused with a message rather than left to overflow the stack,
-- by decode and by encode alike, so that what encodes decodes.
local MAX_DEPTH = 200
json.MAX_DEPTH = MAX_DEPTH

local ESCAPES = {
  [byte('"')] = '"', [byte('\\')] = '\\', [byte('/')] = '/', [byte('b')] = '\b',
  [byte('f')] = '\f', [byte('n')] = '\n', [byte('r')] = '\r', [byte('t')] = '\t',
}

local function show_path(path, n)
  local parts = {}
  for i = 1, n do
    local p = path[i]
    if mtype(p) == 'integer' then
      parts[#parts + 1] = '[' .. p .. ']'
    else
      parts[#parts + 1] = (i > 1 and '.' or '') .. p
    end
  end
  return table.concat(parts)
end

--- json.decode(text [, name]) -> value, meta. See the top of this file.
function json.decode(text, name)
  if type(text) ~= 'string' then
    error(fmt('json.decode: expected a string, got %s', type(text)), 2)
  end
  name = name or 'json'
  local pos = 1
  local line, line_start = 1, 1
  local meta = setmetatable({}, { __mode = 'k' })
  local path, depth = {}, 0

  -- The column of byte p on the current line, counted in characters. The parse moves
  -- forward, so the count goes on from the last position asked (col_p, column col_n) rather
  -- than from the line's start: a long line costs its length once, not once per value.
  local col_start, col_p, col_n = 1, 1, 1
  local function column(p)
    if col_start ~= line_start or p < col_p then col_start, col_p, col_n = line_start, line_start, 1 end
    col_n = col_n + (utf8.len(text, col_p, p - 1, true) or (p - col_p))
    col_p = p
    return col_n
  end

  -- Raises "name:line:col: msg" at byte position p (default: the current position), with
  -- p's line worked out afresh when p lies before the current line.
  local function fail_at(p, l, ls, msg)
    line_start = ls
    error(fmt('%s:%d:%d: %s', name, l, column(p), msg), 0)
  end

  local function fail(msg, p)
    p = p or pos
    if p >= line_start then fail_at(p, line, line_start, msg) end
    local l, ls = 1, 1
    for nl in text:gmatch('()\n') do
      if nl >= p then break end
      l, ls = l + 1, nl + 1
    end
    fail_at(p, l, ls, msg)
  end

  -- What stands at p, for "got ..." in messages: a word, one character, or the end.
  local function got(p)
    p = p or pos
    if p > #text then return 'end of input' end
    local w = text:match('^[%w_]+', p)
    if w then return "'" .. w:sub(1, 20) .. "'" end
    local c = byte(text, p)
    if c < 32 then return fmt('control character U+%04X', c) end
    return "'" .. text:match('^' .. utf8.charpattern, p) .. "'"
  end

  local function skip()
    while true do
      local _, e = find(text, '^[ \t\r]*', pos)
      pos = e + 1
      local c = byte(text, pos)
      if c == 10 then
        pos = pos + 1
        line, line_start = line + 1, pos
      elseif c == 47 then -- '/'
        local c2 = byte(text, pos + 1)
        if c2 == 47 then
          local nl = find(text, '\n', pos + 2, true)
          pos = nl or #text + 1
        elseif c2 == 42 then
          local open, open_line, open_start = pos, line, line_start
          local close = find(text, '*/', pos + 2, true)
          if not close then
            fail_at(open, open_line, open_start, 'unterminated /* comment')
          end
          for nl in text:sub(pos, close):gmatch('()\n') do
            line, line_start = line + 1, pos + nl
          end
          pos = close + 2
        else
          fail("unexpected '/' (comments are written // or /* */)")
        end
      else
        return
      end
    end
  end

  local function parse_string()
    local open, parts = pos, {}
    local p = pos + 1
    while true do
      local s = find(text, '[\0-\31"\\]', p)
      if not s then
        fail('unterminated string (it opens here)', open)
      end
      parts[#parts + 1] = sub(text, p, s - 1)
      local c = byte(text, s)
      if c == 34 then
        pos = s + 1
        return table.concat(parts)
      elseif c == 92 then
        local e = byte(text, s + 1)
        if ESCAPES[e] then
          parts[#parts + 1] = ESCAPES[e]
          p = s + 2
        elseif e == 117 then -- 'u'
          local function hex4(q)
            local h = text:match('^%x%x%x%x', q)
            if not h then
              fail('expected 4 hexadecimal digits after \\u, got ' .. got(q), q)
            end
            return tonumber(h, 16)
          end
          local cp = hex4(s + 2)
          p = s + 6
          if cp >= 0xD800 and cp <= 0xDBFF then
            local lo = text:sub(p, p + 1) == '\\u' and hex4(p + 2)
            if not lo or lo < 0xDC00 or lo > 0xDFFF then
              fail(fmt('unpaired surrogate \\u%04X: a high surrogate must be followed by a '
                .. '\\u escape in DC00..DFFF', cp), s)
            end
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
            p = p + 6
          elseif cp >= 0xDC00 and cp <= 0xDFFF then
            fail(fmt('unpaired surrogate \\u%04X: a low surrogate must follow a high one', cp), s)
          end
          parts[#parts + 1] = utf8.char(cp)
        else
          fail('invalid escape \\' .. (e and string.char(e) or '') ..
            ' (valid: \\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)', s)
        end
      else
        fail(fmt('control character U+%04X in a string (write it as an escape such as \\n)', c), s)
      end
    end
  end

  local function parse_number()
    local start, p = pos, pos
    if byte(text, p) == 45 then p = p + 1 end -- '-'
    local c = byte(text, p)
    if c == 48 then
      p = p + 1
      if find(text, '^%d', p) then fail('leading zeros are not allowed in a number', start) end
    elseif c and c >= 49 and c <= 57 then
      p = select(2, find(text, '^%d+', p)) + 1
    else
      fail('expected a digit after \'-\', got ' .. got(p), p)
    end
    if byte(text, p) == 46 then -- '.'
      local _, e = find(text, '^%d+', p + 1)
      if not e then fail('expected a digit after the decimal point, got ' .. got(p + 1), p + 1) end
      p = e + 1
    end
    c = byte(text, p)
    if c == 101 or c == 69 then -- 'e', 'E'
      local _, e = find(text, '^[+-]?%d+', p + 1)
      if not e then fail('expected a digit in the exponent, got ' .. got(p + 1), p + 1) end
      p = e + 1
    end
    local s = sub(text, start, p - 1)
    local v = tonumber(s) -- an integer for integral text within 64 bits, else a float
    if v == math.huge or v == -math.huge then
      fail('number ' .. s .. ' is out of range', start)
    end
    pos = p
    return v
  end

  local parse_value

  local function enter(p)
    depth = depth + 1
    if depth > MAX_DEPTH then fail(fmt('nesting deeper than %d levels', MAX_DEPTH), p) end
  end

  local function parse_object()
    local obj, info = {}, { line = line, col = column(pos), lines = {} }
    meta[obj] = info
    enter(pos)
    pos = pos + 1
    skip()
    if byte(text, pos) == 125 then -- '}'
      pos = pos + 1
      depth = depth - 1
      return obj
    end
    while true do
      if byte(text, pos) ~= 34 then
        fail('expected a key in double quotes, got ' .. got())
      end
      local key_pos, key_line = pos, line
      local key = parse_string()
      path[depth] = key
      local first = info.lines[key]
      if first then
        fail(fmt('duplicate key "%s" (first at line %d, again at line %d)',
          show_path(path, depth), first, key_line), key_pos)
      end
      info.lines[key] = key_line
      skip()
      if byte(text, pos) ~= 58 then -- ':'
        fail(fmt('expected \':\' after the key "%s", got %s', key, got()))
      end
      pos = pos + 1
      skip()
      obj[key] = parse_value()
      skip()
      local c = byte(text, pos)
      if c == 44 then -- ','
        pos = pos + 1
        skip()
        if byte(text, pos) == 125 then
          pos = pos + 1
          break
        end
      elseif c == 125 then
        pos = pos + 1
        break
      else
        fail(fmt('expected \',\' or \'}\' after the value of "%s", got %s', key, got()))
      end
    end
    path[depth] = nil
    depth = depth - 1
    return obj
  end

  local function parse_array()
    local arr = setmetatable({}, json.array)
    meta[arr] = { line = line, col = column(pos) }
    enter(pos)
    pos = pos + 1
    skip()
    if byte(text, pos) == 93 then -- ']'
      pos = pos + 1
      depth = depth - 1
      return arr
    end
    local n = 0
    while true do
      n = n + 1
      path[depth] = n
      arr[n] = parse_value()
      skip()
      local c = byte(text, pos)
      if c == 44 then
        pos = pos + 1
        skip()
        if byte(text, pos) == 93 then
          pos = pos + 1
          break
        end
      elseif c == 93 then
        pos = pos + 1
        break
      else
        fail('expected \',\' or \']\' after an array element, got ' .. got())
      end
    end
    path[depth] = nil
    depth = depth - 1
    return arr
  end

  local LITERALS = { ['true'] = true, ['false'] = false, null = json.null }

  function parse_value()
    local c = byte(text, pos)
    if c == 123 then return parse_object() end
    if c == 91 then return parse_array() end
    if c == 34 then return parse_string() end
    if c == 45 or (c and c >= 48 and c <= 57) then return parse_number() end
    local w = text:match('^%a+', pos)
    if w and LITERALS[w] ~= nil and not find(text, '^[%w_]', pos + #w) then
      pos = pos + #w
      return LITERALS[w]
    end
    fail('expected a value (object, array, string, number, true, false or null), got ' .. got())
  end

  local ok, bad = utf8.len(text)
  if not ok then
    pos = bad
    for nl in text:sub(1, bad - 1):gmatch('()\n') do line, line_start = line + 1, nl + 1 end
    fail(fmt('invalid UTF-8 (byte 0x%02X)', byte(text, bad)), bad)
  end
  if sub(text, 1, 3) == '\239\187\191' then pos = 4 end -- a byte order mark
  skip()
  if pos > #text then fail('expected a JSON value, got end of input') end
  local value = parse_value()
  skip()
  if pos <= #text then fail('unexpected ' .. got() .. ' after the JSON value') end
  return value, meta
end

-- Encoding ----------------------------------------------------------------------------------

-- s for a message, at most 60 bytes of it: control bytes as \xNN, and non-ASCII ones too
-- unless s is valid UTF-8.
local function printable(s)
  local cut = #s > 60
  s = s:sub(1, 60)
  s = s:gsub(utf8.len(s) and '%c' or '[%c\128-\255]', function(c) return fmt('\\x%02X', byte(c)) end)
  return cut and s .. '...' or s
end

local function encode_string(s)
  return '"' .. s:gsub('[\0-\31"\\\127]', function(c)
    local e = ({ ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r',
      ['\t'] = '\\t', ['\b'] = '\\b', ['\f'] = '\\f' })[c]
    return e or fmt('\\u%04x', byte(c))
  end) .. '"'
end

-- The shortest decimal that reads back as the same float, with a '.0' on integral values
-- so the float stays a float when decoded again.
local function encode_float(x)
  local s
  for digits = 15, 17 do
    s = fmt('%.' .. digits .. 'g', x)
    if tonumber(s) == x then break end
  end
  if not find(s, '[%.eEn]') then s = s .. '.0' end
  return s
end

local function is_array(t)
  if getmetatable(t) == json.array then return true end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n > 0 and n == #t
end

--- json.encode(value [, indent]) -> text. Tables with string keys become objects (keys
--- sorted, so the text is the same run to run), sequences and json.array tables become
--- arrays, an empty plain table {}. Integers stay integers and floats keep a fraction or
--- exponent. indent (a number of spaces) gives one member per line. Raises, naming the
--- value's path ("json.encode: a.b[2]: ..."), on NaN, inf, functions, cycles, tables
--- mixing both kinds of keys, strings (values and keys) that are not UTF-8, and nesting
--- deeper than decode reads: what encodes, decodes.
function json.encode(value, indent)
  local out, seen, path = {}, {}, {}
  -- The path to the value at fault, its bytes shown safely; a deep one as its two ends.
  local function fail(level, msg)
    local at = ''
    if level > 0 then
      at = show_path(path, level)
      if level > 8 then
        at = fmt('%s...%s (%d levels)', show_path(path, 3), show_path({ table.unpack(path, level - 2, level) }, 3),
          level)
      end
      at = printable(at) .. ': '
    end
    error('json.encode: ' .. at .. msg, 0)
  end
  local function utf8_string(s, level)
    local ok, bad = utf8.len(s)
    if not ok then
      fail(level, fmt('"%s" is not valid UTF-8 (byte 0x%02X at byte %d), which JSON text must be',
        printable(s), byte(s, bad), bad))
    end
    return encode_string(s)
  end
  local function put(v, level)
    local t = type(v)
    if v == json.null or v == nil then
      out[#out + 1] = 'null'
    elseif t == 'boolean' then
      out[#out + 1] = tostring(v)
    elseif t == 'number' then
      if mtype(v) == 'float' and (v ~= v or v == math.huge or v == -math.huge) then
        fail(level, tostring(v) .. ' has no JSON form')
      end
      out[#out + 1] = mtype(v) == 'integer' and fmt('%d', v) or encode_float(v)
    elseif t == 'string' then
      out[#out + 1] = utf8_string(v, level)
    elseif t == 'table' then
      if seen[v] then fail(level, 'a table contains itself') end
      if level >= MAX_DEPTH then
        fail(level, fmt('nesting deeper than %d levels, which json.decode refuses', MAX_DEPTH))
      end
      seen[v] = true
      local pad = indent and '\n' .. string.rep(' ', indent * (level + 1)) or ''
      local close = indent and '\n' .. string.rep(' ', indent * level) or ''
      local sep = indent and ': ' or ':'
      if is_array(v) then
        out[#out + 1] = '['
        for i = 1, #v do
          if i > 1 then out[#out + 1] = ',' end
          out[#out + 1] = pad
          path[level + 1] = i
          put(v[i], level + 1)
        end
        out[#out + 1] = #v > 0 and close .. ']' or ']'
      else
        local keys = {}
        for k in pairs(v) do
          if type(k) ~= 'string' then
            fail(level, 'object keys must be strings, got ' .. tostring(k))
          end
          keys[#keys + 1] = k
        end
        table.sort(keys)
        out[#out + 1] = '{'
        for i, k in ipairs(keys) do
          if i > 1 then out[#out + 1] = ',' end
          path[level + 1] = k
          out[#out + 1] = pad .. utf8_string(k, level + 1) .. sep
          put(v[k], level + 1)
        end
        out[#out + 1] = #keys > 0 and close .. '}' or '}'
      end
      path[level + 1] = nil
      seen[v] = nil
    else
      fail(level, 'cannot encode a ' .. t)
    end
  end
  put(value, 0)
  return table.concat(out)
end

return json
