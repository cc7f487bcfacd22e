-- Checkpoint files from Lua: save/load/info of every dtype (0-d and empty too)
-- in both table forms with metadata, reading named tensors and element ranges,
-- the streaming writer, write_file_atomic, and each bad argument or file
-- raising a message that names it.
local zl = require 'zlua'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local dir = os.tmpname()
os.remove(dir)
assert(os.execute('mkdir -p ' .. dir))
local function path(name) return dir .. '/' .. name end

local function read_bytes(p)
  local f = assert(io.open(p, 'rb'))
  local s = f:read('a')
  f:close()
  return s
end

local function write_bytes(p, s)
  local f = assert(io.open(p, 'wb'))
  f:write(s)
  f:close()
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function same_tensor(a, b)
  return a:dtype() == b:dtype() and same_list(a:shape(), b:shape())
         and (a:numel() == 0 or same_list(H.flat(a), H.flat(b)))
end

test('round_trip_map_form', function()
  local p = path('map.safetensors')
  local t = {
    w = zl.randn(3, 4),
    h = zl.randn(2, 5):to('f16'),
    b = zl.randn(7):to('bf16'),
    i = zl.tensor({{1, -2}, {2147483647, -2147483648}}, 'i32'),
    l = zl.tensor({9007199254740993, -1}, 'i64'),
    u = zl.tensor({0, 255, 7}, 'u8'),
    m = zl.tensor{true, false, true},
    s = zl.tensor(2.5),
    e = zl.zeros(3, 0),
  }
  zl.save_safetensors(p, t, { format = 'pt', note = 'caf\u{e9} "q" \\' })
  local got, meta = zl.load_safetensors(p)
  for k, v in pairs(t) do check(got[k] and same_tensor(got[k], v), 'tensor ' .. k .. ' round trip') end
  check_eq(meta.format, 'pt')
  check_eq(meta.note, 'caf\u{e9} "q" \\')
  -- a table is saved in name order, so the file does not depend on pairs()
  local info = zl.safetensors_info(p)
  local names = {}
  for i, e in ipairs(info) do names[i] = e.name end
  check(same_list(names, { 'b', 'e', 'h', 'i', 'l', 'm', 's', 'u', 'w' }), 'name order: ' .. table.concat(names, ','))
  check_eq(read_bytes(p), (function() zl.save_safetensors(p, t, { note = 'caf\u{e9} "q" \\', format = 'pt' }) return read_bytes(p) end)(),
           'the same tensors give the same bytes')
end)

test('list_form_info_and_subset', function()
  local p = path('list.safetensors')
  local a, b = zl.arange(6):view(2, 3):float(), zl.tensor(7, 'i64')
  zl.save_safetensors(p, { { 'z.weight', a }, { 'a.bias', b }, { 'empty', zl.zeros({ 0 }, 'bf16') } })
  local info, meta = zl.safetensors_info(p)
  check_eq(#info, 3)
  check_eq(next(meta), nil, 'no metadata')
  check_eq(info[1].name, 'z.weight', 'list order kept')
  check_eq(info[1].dtype, 'f32')
  check(same_list(info[1].shape, { 2, 3 }))
  check_eq(info[1].numel, 6)
  check_eq(info[2].name, 'a.bias')
  check_eq(#info[2].shape, 0, '0-d')
  check_eq(info[3].dtype, 'bf16')
  local got = zl.load_safetensors(p, { 'a.bias' })
  check_eq(got['a.bias']:item(), 7)
  check_eq(got['z.weight'], nil, 'only the names asked for')
  check_error(function() zl.load_safetensors(p, { 'nope' }) end, p .. ": no tensor named 'nope'")
end)

test('open_and_ranges', function()
  local p = path('ranges.safetensors')
  zl.save_safetensors(p, { flat = zl.arange(10):float(), ids = zl.arange(4) }, { rank = '1' })
  local f <close> = zl.safetensors_open(p)
  check(tostring(f):find('2 tensors', 1, true), tostring(f))
  check_eq(f:metadata().rank, '1')
  check_eq(#f:info(), 2)
  check_close(f:read('flat', 3, 4), { 3, 4, 5, 6 })
  check_close(f:read('flat', 8), { 8, 9 }, 0, 'count defaults to the rest')
  check_eq(f:read('flat', 10):numel(), 0)
  check(same_list(f:read('ids'):shape(), { 4 }))
  check_error(function() return f:read('flat', 8, 3) end,
              p .. ": 3 elements from offset 8 are out of range for tensor 'flat' of 10 elements")
  check_error(function() return f:read('none', 0) end, p .. ": no tensor named 'none'")
  f:close()
  check_error(function() return f:info() end, 'the safetensors file was closed')
  f:close()
end)

test('streaming_writer', function()
  local p = path('stream.safetensors')
  local w = zl.safetensors_writer(p, {
    { name = 'a', dtype = 'f32', shape = { 2, 2 } },
    { name = 'b', dtype = 'f32', shape = { 3 } },
    { name = 'c', dtype = 'i64', shape = {} },
  }, { kind = 'fp32' })
  local all = zl.arange(7):float()
  w:write(all:narrow(1, 1, 5)):write(all:narrow(1, 6, 2))
  check_error(function() w:write(zl.zeros(1)) end, "cannot write '" .. p .. "': tensor 'c' is I64, the appended elements are F32")
  w:write(zl.tensor(5, 'i64'))
  w:commit()
  check_error(function() w:commit() end, 'the safetensors writer was already committed or aborted')
  local got, meta = zl.load_safetensors(p)
  check_close(got.a, { 0, 1, 2, 3 })
  check_close(got.b, { 4, 5, 6 })
  check_eq(got.c:item(), 5)
  check_eq(meta.kind, 'fp32')
  -- the info of one file is the entry list of another
  local before = read_bytes(p)
  local w2 = zl.safetensors_writer(p, zl.safetensors_info(p))
  w2:write(zl.ones(7))
  check_error(function() w2:commit() end, "tensor 'c' has 0 of its 1 elements")
  check_eq(read_bytes(p), before, 'an incomplete commit leaves the old file')
  local w3 = zl.safetensors_writer(p, zl.safetensors_info(p))
  w3:abort()
  do local w4 <close> = zl.safetensors_writer(p, zl.safetensors_info(p)) end
  w3 = nil
  collectgarbage()
  local leftovers = io.popen('ls -a ' .. dir):read('a')
  check(not leftovers:find('.tmp.', 1, true), 'no temporary left: ' .. leftovers)
  check_eq(read_bytes(p), before)
end)

test('write_file_atomic', function()
  local p = path('latest')
  zl.write_file_atomic(p, 'global_step50')
  zl.write_file_atomic(p, 'global_step100')
  check_eq(read_bytes(p), 'global_step100')
  zl.write_file_atomic(p, 'a\0b')
  check_eq(read_bytes(p), 'a\0b', 'binary strings')
  local q = path('no/such/dir/latest')
  check_error(function() zl.write_file_atomic(q, 'x') end,
              "cannot write '" .. q .. "': cannot create the temporary file '" .. q .. '.tmp.')
end)

test('errors', function()
  local p = path('err.safetensors')
  local t = zl.zeros(2)
  check_error(function() zl.save_safetensors(p, { t }) end, 'save_safetensors: entry 1 must be a pair {name, tensor}, got userdata')
  check_error(function() zl.save_safetensors(p, { w = 3 }) end, "save_safetensors: 'w' must be a tensor, got number")
  check_error(function() zl.save_safetensors(p, { { 'w', t }, { 'w', t } }) end, "cannot write '" .. p .. "': tensor name 'w' is given twice")
  check_error(function() zl.save_safetensors(p, { w = t }, { k = 1 }) end,
              "save_safetensors: metadata must map strings to strings; key 'k' has a number value")
  check_error(function() zl.save_safetensors(p, 'x') end, 'save_safetensors: tensors must be a table')
  local r = zl.zeros(1)
  r:release()
  check_error(function() zl.save_safetensors(p, { r = r }) end, 'tensor was released')
  check_error(function() zl.safetensors_writer(p, { { name = 'a', shape = { 1 } } }) end,
              "safetensors_writer: entry 1 ('a'): dtype must be a string, got nil")
  check_error(function() zl.safetensors_writer(p, { { name = 'a', dtype = 'f99', shape = { 1 } } }) end, "unknown dtype 'f99'")
  check_error(function() zl.load_safetensors(path('missing')) end, "cannot open '" .. path('missing') .. "': No such file or directory")
  write_bytes(p, '\8\0\0\0\0\0\0\0{"a":1} ')
  check_error(function() zl.safetensors_info(p) end, p .. ": bad header at offset 13: expected '{' opening the tensor's entry, found '1'")
  write_bytes(p, '\255\0\0\0\0\0\0\0{}')
  check_error(function() zl.load_safetensors(p) end,
              p .. ': the header length at offset 0 is 255, larger than the rest of the file (2 bytes)')
  -- a foreign dtype is listed by its file name, and reading it says why not
  write_bytes(p, '\64\0\0\0\0\0\0\0{"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}          ' .. string.pack('<d', 1.5))
  local info = zl.safetensors_info(p)
  check_eq(info[1].dtype, 'F64')
  check_error(function() zl.load_safetensors(p) end, p .. ": tensor 'd' has dtype F64, which zlua does not have")
  local f <close> = zl.safetensors_open(p)
  check_error(function() return f:read('d', 0) end, p .. ": tensor 'd' has dtype F64, which zlua does not have")
end)

os.execute('rm -rf ' .. dir)
H.done()
