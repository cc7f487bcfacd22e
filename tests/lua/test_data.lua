-- zlua.data and the dataset readers from Lua: every sample once per epoch for
-- every combination of shuffle, drop_last, batch size and DistributedSampler
-- (checked against PyTorch's padding rule written out here), seeded orders,
-- collate of tensors, numbers and tables, datasets built from the readers, and
-- reader round trips and bad files, written here byte by byte (gzip included).
local zl = require 'zlua'
local data = require 'zlua.data'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local pack, concat = string.pack, table.concat

-- ---------------------------------------------------------------------------
-- Files

local written = {}
local function write(bytes)
  local path = os.tmpname()
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
  written[#written + 1] = path
  return path
end

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1 == 1) and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  crc_table[i] = c
end
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = crc_table[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

-- A gzip file of s in stored (uncompressed) deflate blocks of `block` bytes;
-- bad = 'nlen' damages the last block's length check, 'crc' the trailer.
local function gzip(s, block, bad)
  block = block or 65535
  local parts = { '\31\139\8\0\0\0\0\0\0\255' }
  local pos = 1
  repeat
    local chunk = s:sub(pos, pos + block - 1)
    pos = pos + #chunk
    local final = pos > #s and 1 or 0
    local nlen = ~#chunk & 0xFFFF
    if bad == 'nlen' and final == 1 then nlen = nlen ~ 1 end
    parts[#parts + 1] = pack('<I1I2I2', final, #chunk, nlen) .. chunk
  until pos > #s
  local crc = crc32(s)
  if bad == 'crc' then crc = crc ~ 1 end
  parts[#parts + 1] = pack('<I4I4', crc, #s)
  return concat(parts)
end

-- An idx file: dtype code, dims, then elements written with the format fmt.
local function idx(code, dims, fmt, elems)
  local parts = { pack('>I1I1I1I1', 0, 0, code, #dims) }
  for _, d in ipairs(dims) do parts[#parts + 1] = pack('>I4', d) end
  for _, v in ipairs(elems) do parts[#parts + 1] = pack(fmt, v) end
  return concat(parts)
end

-- The pixel of CIFAR record r (0-based) at channel c, row h, column w.
local function pixel(r, c, h, w) return (r * 7 + c * 3 + h * 5 + w) % 256 end

local function cifar(labels, first)
  first = first or 0
  local parts = {}
  for k, label in ipairs(labels) do
    local rec = { string.char(label) }
    local r = first + k - 1
    for c = 0, 2 do
      for h = 0, 31 do
        local row = {}
        for w = 0, 31 do row[w + 1] = pixel(r, c, h, w) end
        rec[#rec + 1] = string.char(table.unpack(row))
      end
    end
    parts[k] = concat(rec)
  end
  return concat(parts)
end

local function cifar_expected(n, first)
  local out = {}
  for r = first, first + n - 1 do
    for c = 0, 2 do for h = 0, 31 do for w = 0, 31 do out[#out + 1] = pixel(r, c, h, w) end end end
  end
  return out
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function shape_is(t, s) return same_list(t:shape(), s) end

-- ---------------------------------------------------------------------------
-- Readers

test('read_idx_roundtrip', function()
  local u8 = {}
  for i = 1, 12 do u8[i] = (i * 37) % 256 end
  local plain = write(idx(0x08, { 3, 2, 2 }, '>I1', u8))
  local t = zl.read_idx(plain)
  check_eq(t:dtype(), 'u8')
  check(shape_is(t, { 3, 2, 2 }), 'idx shape')
  check_close(t, u8, 0, 'idx u8 values')
  check_close(zl.read_idx(write(gzip(idx(0x08, { 3, 2, 2 }, '>I1', u8), 7))), u8, 0,
              'a gzip idx reads as the plain one')
  local i8 = { -128, -1, 0, 127 }
  local t8 = zl.read_idx(write(idx(0x09, { 4 }, '>i1', i8)))
  check_eq(t8:dtype(), 'i32')
  check_close(t8, i8, 0, 'signed bytes')
  local i16 = { -32768, -2, 300, 32767 }
  check_close(zl.read_idx(write(idx(0x0B, { 2, 2 }, '>i2', i16))), i16, 0, 'big-endian i16')
  local i32 = { -2147483648, -70000, 5, 2147483647 }
  check_close(zl.read_idx(write(idx(0x0C, { 4 }, '>i4', i32))), i32, 0, 'big-endian i32')
  local f32 = { 1.5, -0.25, 65536.125, 0 }
  local tf = zl.read_idx(write(idx(0x0D, { 1, 4 }, '>f', f32)))
  check_eq(tf:dtype(), 'f32')
  check_close(tf, f32, 0, 'big-endian f32')
  local f64 = { 0.1, -2.5 }
  check_close(zl.read_idx(write(idx(0x0E, { 2 }, '>d', f64))), f64, 1e-7, 'f64 rounded to f32')
end)

test('read_cifar10_roundtrip', function()
  local labels = { 3, 0, 9 }
  for _, path in ipairs({ write(cifar(labels)), write(gzip(cifar(labels), 4000)) }) do
    local images, y = zl.read_cifar10(path)
    check(shape_is(images, { 3, 3, 32, 32 }), 'images [N, 3, 32, 32]')
    check_eq(images:dtype(), 'u8')
    check_eq(y:dtype(), 'i64')
    check_close(y, labels, 0, 'labels')
    check_close(images, cifar_expected(3, 0), 0, 'planes red, green, blue, each row-major')
    check_eq(images:get(2, 3, 4, 5), pixel(1, 2, 3, 4), 'one pixel by its 1-based index')
  end
end)

test('read_tokens_and_text_roundtrip', function()
  local ids16 = { 0, 1, 50256, 65535, 7 }
  local p16 = {}
  for k, v in ipairs(ids16) do p16[k] = pack('<I2', v) end
  local t16 = zl.read_tokens(write(concat(p16)), 2)
  check_eq(t16:dtype(), 'i64')
  check_close(t16, ids16, 0, 'uint16 tokens')
  local ids32 = { 0, 70000, 4294967295 }
  local p32 = {}
  for k, v in ipairs(ids32) do p32[k] = pack('<I4', v) end
  check_close(zl.read_tokens(write(gzip(concat(p32), 5)), 4), ids32, 0, 'uint32 tokens through gzip')

  local text = 'to be, or not to be:\nthat is the question.\n'
  local path = write(text)
  local bytes = zl.read_text(path)
  check_eq(bytes:dtype(), 'u8')
  check_eq(bytes:numel(), #text)
  local vocab, n = zl.text_vocab(bytes)
  local distinct = {}
  for c in text:gmatch('.') do distinct[c] = true end
  local sorted = {}
  for c in pairs(distinct) do sorted[#sorted + 1] = c end
  table.sort(sorted)
  check_eq(vocab, concat(sorted), 'the vocabulary is the distinct bytes in increasing order')
  check_eq(n, #sorted)
  local ids = zl.text_encode(bytes, vocab)
  check_eq(ids:dtype(), 'i64')
  check_eq(ids:get(1), vocab:find('t', 1, true) - 1, 'ids are 0-based positions in the vocabulary')
  check_eq(zl.text_decode(ids, vocab), text, 'decode(encode(text)) is the text')
  check_eq(zl.text_decode(zl.text_encode(zl.read_text(write(gzip(text, 9))), vocab), vocab), text,
           'a gzip text reads as the plain one')
  check_eq(zl.text_vocab('ba'), 'ab', 'text_vocab takes a string')
  check_close(zl.text_encode('abba', 'ab'), { 0, 1, 1, 0 }, 0, 'text_encode takes a string')
  check_eq(zl.text_decode({ 1, 0 }, 'ab'), 'ba', 'text_decode takes a table')
  check_eq(zl.text_decode(zl.tensor{ { 0, 1 }, { 1, 1 } }, 'ab'), 'abbb', 'ids of any shape, in order')
  check_error(function() return zl.text_encode('abc', 'ab') end,
              'text_encode: byte 0x63 at offset 2 is not in the vocabulary of 2 bytes')
  check_error(function() return zl.text_encode('a', 'aa') end, 'text_encode: byte 0x61 is in the vocabulary twice')
  check_error(function() return zl.text_encode('a', 5) end, 'text_encode: vocab must be a string')
  check_error(function() return zl.text_vocab(zl.zeros(3)) end, 'text_vocab: text must be a u8 CPU tensor, got f32')
  check_error(function() return zl.text_vocab({}) end, 'text_vocab: text must be a u8 tensor or a string, got table')
  check_error(function() return zl.text_decode({ 2 }, 'ab') end,
              'text_decode: id 2 at position 1 is out of range for a vocabulary of 2 (expected 0..1)')
  check_error(function() return zl.read_tokens(path, 3) end,
              'read_tokens: bytes_per_token must be 2 (uint16) or 4 (uint32), got 3')
end)

test('bad_files', function()
  local missing = os.tmpname()
  os.remove(missing)
  check_error(function() return zl.read_idx(missing) end, "cannot open '" .. missing .. "': No such file or directory")
  check_error(function() return zl.read_cifar10(missing) end, "cannot open '" .. missing .. "'")
  local empty = write('')
  check_error(function() return zl.read_tokens(empty, 2) end, empty .. ': the file is empty')
  check_error(function() return zl.read_text(empty) end, empty .. ': the file is empty')

  -- idx: a header promising 12 bytes of data (after 12 bytes of header) and 7 given.
  local short = idx(0x08, { 4, 3 }, '>I1', { 1, 2, 3, 4, 5, 6, 7 })
  local cut = write(short)
  check_error(function() return zl.read_idx(cut) end, cut .. ': truncated at offset 19 (expected 12 bytes of data)')
  local cutgz = write(gzip(short, 5))
  check_error(function() return zl.read_idx(cutgz) end, cutgz .. ': truncated at offset 19 (expected 12 bytes of data)')
  local head = write('\0\0')
  check_error(function() return zl.read_idx(head) end, head .. ': truncated at offset 2 (expected 4 bytes of idx header)')
  local long = write(idx(0x08, { 2 }, '>I1', { 1, 2, 3 }))
  check_error(function() return zl.read_idx(long) end, long .. ': trailing data at offset 10 (dims [2] give 2 bytes of data)')
  local code = write(idx(0x0A, { 1 }, '>I1', { 1 }))
  check_error(function() return zl.read_idx(code) end, code .. ': unknown idx dtype code 0x0a at offset 2')

  -- CIFAR-10: two records and a half; a label of 10.
  local partial = write(cifar({ 1, 2, 3 }):sub(1, 2 * 3073 + 1000))
  check_error(function() return zl.read_cifar10(partial) end,
              partial .. ': 7146 bytes is not a whole number of 3073-byte CIFAR-10 records: a partial record 2 starts at offset 6146')
  local label = write(cifar({ 1, 10 }))
  check_error(function() return zl.read_cifar10(label) end, label .. ': record 1 at offset 3073 has label 10, expected 0..9')

  local tok = write('\1\0\2\0\3')
  check_error(function() return zl.read_tokens(tok, 2) end,
              tok .. ': 5 bytes is not a whole number of 2-byte tokens: a partial token starts at offset 4')

  -- gzip: cut inside its second block (40 bytes delivered), a damaged block, a damaged checksum.
  local text = string.rep('abcdefghij', 10)
  local g = gzip(text, 30)
  local trunc = write(g:sub(1, 60))
  check_error(function() return zl.read_text(trunc) end,
              trunc .. ': corrupt gzip stream near uncompressed offset 40: unexpected end of file')
  local nlen = write(gzip(text, 30, 'nlen'))
  local err = check_error(function() return zl.read_text(nlen) end, nlen .. ': corrupt gzip stream near uncompressed offset ')
  check(err and err:find(': invalid stored block lengths', 1, true), 'zlib names a damaged block: ' .. tostring(err))
  local crc = write(gzip(text, 30, 'crc'))
  err = check_error(function() return zl.read_text(crc) end, crc .. ': corrupt gzip stream near uncompressed offset ')
  check(err and err:find(': incorrect data check', 1, true), 'zlib names a bad checksum: ' .. tostring(err))
  local gzcifar = write(gzip(cifar({ 1, 2 }), 4000):sub(1, 3000))
  check_error(function() return zl.read_cifar10(gzcifar) end, gzcifar .. ': corrupt gzip stream near uncompressed offset ')
end)

-- ---------------------------------------------------------------------------
-- DataLoader and samplers

-- The dataset indices of every batch of one pass, and the batch sizes.
local function pass(loader)
  local seen, sizes = {}, {}
  for x in loader() do
    local v = H.flat(x)
    sizes[#sizes + 1] = #v
    for _, i in ipairs(v) do seen[#seen + 1] = i end
  end
  return seen, sizes
end

test('every_sample_once_per_epoch', function()
  for _, n in ipairs({ 1, 7, 12 }) do
    -- The same samples as a TensorDataset (batched by get_batch) and as a
    -- plain array of numbers (batched by the default collate).
    local sources = { data.TensorDataset(zl.arange(1, n + 1)), {} }
    for i = 1, n do sources[2][i] = i end
    for si, ds in ipairs(sources) do
      for _, bs in ipairs({ 1, 3, 4, n, n + 1 }) do
        for _, shuffle in ipairs({ false, true }) do
          for _, drop_last in ipairs({ false, true }) do
            local what = string.format('n=%d bs=%d shuffle=%s drop_last=%s source=%d', n, bs,
                                       tostring(shuffle), tostring(drop_last), si)
            local loader = data.DataLoader(ds, { batch_size = bs, shuffle = shuffle, drop_last = drop_last,
                                                 seed = shuffle and 11 or nil })
            local full = drop_last and n // bs or (n + bs - 1) // bs
            check_eq(#loader, full, '#loader: ' .. what)
            local orders = {}
            for epoch = 1, 2 do
              local seen, sizes = pass(loader)
              orders[epoch] = seen
              check_eq(#sizes, full, 'batches per pass: ' .. what)
              for b = 1, #sizes do
                local want = (b < #sizes or drop_last or n % bs == 0) and bs or n % bs
                if sizes[b] ~= want then check_eq(sizes[b], want, 'batch size: ' .. what) break end
              end
              local count = {}
              for _, i in ipairs(seen) do count[i] = (count[i] or 0) + 1 end
              local once = true
              for i, c in pairs(count) do once = once and c == 1 and i >= 1 and i <= n end
              check(once, 'no sample twice in a pass: ' .. what)
              check_eq(#seen, drop_last and full * bs or n, 'samples per pass: ' .. what)
              if not shuffle then
                local ordered = true
                for k, i in ipairs(seen) do ordered = ordered and i == k end
                check(ordered, 'in order without shuffle: ' .. what)
              end
            end
            if shuffle and n >= 7 and not drop_last then
              check(not same_list(orders[1], orders[2]), 'a new order each epoch: ' .. what)
            end
          end
        end
      end
    end
  end
end)

test('seeded_orders', function()
  local ds = data.TensorDataset(zl.arange(1, 41))
  local function orders(loader, k)
    local out = {}
    for e = 1, k do out[e] = pass(loader) end
    return out
  end
  local a = orders(data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 5 }), 3)
  local b = orders(data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 5 }), 3)
  for e = 1, 3 do check(same_list(a[e], b[e]), 'the same seed gives the same order, epoch ' .. e) end
  check(not same_list(a[1], a[2]) and not same_list(a[2], a[3]), 'each epoch a new order')
  local c = orders(data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 6 }), 1)
  check(not same_list(a[1], c[1]), 'another seed, another order')
  local resumed = data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 5 })
  resumed:set_epoch(2)
  check(same_list(pass(resumed), a[3]), 'set_epoch(e) gives the order of pass e (0-based)')
  local expect = zl.randperm(40, zl.Generator(5 + 1)):totable()
  for k = 1, 40 do expect[k] = expect[k] + 1 end
  check(same_list(a[2], expect), 'pass e is the permutation of zl.Generator(seed + e)')

  local s1 = data.RandomSampler(10, { generator = zl.Generator(3) })
  local s2 = data.RandomSampler(10, { generator = zl.Generator(3) })
  local first = s1:indices()
  check(same_list(first, s2:indices()), 'equal generators give equal orders')
  check(not same_list(first, s1:indices()), 'a generator advances between passes')
  zl.manual_seed(9)
  local d1 = data.RandomSampler(ds):indices()
  zl.manual_seed(9)
  check(same_list(d1, data.RandomSampler(ds):indices()), 'without a seed: the default generator')
  check_eq(#data.RandomSampler(ds), 40)
  check(same_list(data.SequentialSampler(4):indices(), { 1, 2, 3, 4 }), 'SequentialSampler is 1..n')
  check_error(function() return data.RandomSampler(4, { seed = 1, generator = zl.Generator(1) }) end,
              'RandomSampler: give a seed or a generator, not both')
  check_error(function() return data.RandomSampler(4, { generator = 3 }) end,
              'RandomSampler: generator must be a zl.Generator, got number')
  check_error(function() return data.RandomSampler(-1) end,
              'RandomSampler: the number of samples must be an integer >= 0, got -1')
end)

-- PyTorch's DistributedSampler written out: pad the order by repeating it
-- (list * k, then cut) or cut it, then take every R-th from position r.
local function reference_share(order, R, r, drop_last)
  local n = #order
  local num = (drop_last and n % R ~= 0) and math.ceil((n - R) / R) or math.ceil(n / R)
  local total = num * R
  local list = {}
  for k = 1, n do list[k] = order[k] end
  if not drop_last then
    local pad = total - n
    local reps = n > 0 and math.ceil(pad / n) or 0
    local extra = {}
    for _ = 1, reps do for k = 1, n do extra[#extra + 1] = order[k] end end
    for k = 1, pad do list[#list + 1] = extra[k] end
  else
    for k = #list, total + 1, -1 do list[k] = nil end
  end
  local mine = {}
  for k = r + 1, total, R do mine[#mine + 1] = list[k] end
  return mine
end

test('distributed_sampler', function()
  for _, n in ipairs({ 1, 2, 5, 8, 10, 11 }) do
    for R = 1, 4 do
      for _, shuffle in ipairs({ false, true }) do
        for _, drop_last in ipairs({ false, true }) do
          for _, epoch in ipairs({ 0, 3 }) do
            local what = string.format('n=%d R=%d shuffle=%s drop_last=%s epoch=%d', n, R, tostring(shuffle),
                                       tostring(drop_last), epoch)
            local order
            if shuffle then
              order = zl.randperm(n, zl.Generator(7 + epoch)):totable()
              for k = 1, n do order[k] = order[k] + 1 end
            else
              order = {}
              for k = 1, n do order[k] = k end
            end
            local count, per_rank = {}, nil
            for r = 0, R - 1 do
              local s = data.DistributedSampler(n, { num_replicas = R, rank = r, shuffle = shuffle, seed = 7,
                                                    drop_last = drop_last })
              s:set_epoch(epoch)
              local mine = s:indices()
              check(same_list(mine, reference_share(order, R, r, drop_last)), 'as PyTorch: ' .. what)
              check_eq(#mine, #s, '#sampler is the share: ' .. what)
              per_rank = per_rank or #mine
              check_eq(#mine, per_rank, 'equal counts on every rank: ' .. what)
              for _, i in ipairs(mine) do count[i] = (count[i] or 0) + 1 end
            end
            local covered, dup = 0, 0
            for i = 1, n do
              if count[i] then covered = covered + 1; dup = dup + count[i] - 1 end
            end
            if drop_last then
              check_eq(covered, R * (n // R), 'drop_last covers R * floor(N / R) once each: ' .. what)
              check_eq(dup, 0, 'drop_last repeats nothing: ' .. what)
            else
              check_eq(covered, n, 'the ranks cover every index: ' .. what)
              check_eq(dup, R * math.ceil(n / R) - n, 'only the padding repeats: ' .. what)
            end
          end
        end
      end
    end
  end

  local ds = data.TensorDataset(zl.arange(1, 11))
  local s = data.DistributedSampler(ds, { num_replicas = 3, rank = 1 })
  local loader = data.DataLoader(ds, { batch_size = 2, sampler = s })
  check_eq(#loader, 2, 'a loader over a rank share of 4')
  local e0 = pass(loader)
  check(same_list(e0, s:indices()), 'the loader batches the sampler order')
  check(same_list(pass(loader), e0), 'the epoch changes only by set_epoch, as in PyTorch')
  loader:set_epoch(1)
  check(not same_list(pass(loader), e0), 'loader:set_epoch reaches the sampler')
  check_eq(data.DistributedSampler(5).num_replicas, 1, 'one replica by default')
  check_error(function() return data.DistributedSampler(5, { num_replicas = 4, rank = 4 }) end,
              'DistributedSampler: rank 4 is out of range for 4 replicas (expected 0..3)')
  check_error(function() return data.DistributedSampler(5, { num_replicas = 0 }) end,
              'DistributedSampler: num_replicas must be an integer >= 1, got 0')
  check_error(function() return data.DistributedSampler(5, { replicas = 2 }) end,
              'DistributedSampler: unknown option "replicas"')
  check_error(function() return data.DistributedSampler(5, { shuffle = 1 }) end,
              'DistributedSampler: shuffle must be a boolean, got 1')
end)

-- ---------------------------------------------------------------------------
-- Datasets and collate

test('datasets_and_loader_options', function()
  local Squares = data.Dataset:extend('Squares')
  function Squares:__init(n) self.n = n end
  function Squares:len() return self.n end
  function Squares:get(i) return { zl.tensor{ i, -i }, i * i } end
  local sq = Squares(5)
  check_eq(#sq, 5, '#ds calls len')
  check_eq(sq[3][2], 9, 'ds[i] calls get')
  check_eq(tostring(sq), 'Squares(5 samples)')
  local xs, ys = {}, {}
  for x, y in data.DataLoader(sq, { batch_size = 2 })() do xs[#xs + 1] = x; ys[#ys + 1] = y end
  check_eq(#xs, 3)
  check(shape_is(xs[1], { 2, 2 }) and xs[1]:dtype() == 'i64', 'stacked tensors')
  check_close(ys[1], { 1, 4 }, 0, 'integers collate into i64')
  check_eq(ys[3]:dtype(), 'i64')
  local Bare = data.Dataset:extend('Bare')
  check_error(function() return #Bare() end, 'Bare: len() is not implemented (define Bare:len())')
  check_error(function() return Bare()[1] end, 'Bare: get(i) is not implemented')

  local x = zl.arange(12):float():view(6, 2)
  local y = zl.tensor{ 0, 1, 0, 1, 1, 0 }
  local ds = data.TensorDataset(x, y)
  check_eq(#ds, 6)
  local s = ds[2]
  check_close(s[1], { 2, 3 }, 0, 'ds[i] is the i-th row, 1-based')
  check_eq(s[2]:dim(), 0, 'a row of a 1-d tensor is 0-d')
  check_eq(s[2]:item(), 1)
  check_error(function() return ds[7] end, 'TensorDataset: index 7 is out of range (expected 1..6)')
  check_error(function() return ds[0] end, 'TensorDataset: index 0 is out of range')
  check_error(function() return data.TensorDataset(x, zl.zeros(5)) end,
              'TensorDataset: tensor 2 has 5 rows (shape {5}), expected 6 as tensor 1')
  check_error(function() return data.TensorDataset(x, 3) end, 'TensorDataset: argument 2 is a number, expected a tensor')
  check_error(function() return data.TensorDataset() end, 'TensorDataset: expected at least one tensor')

  -- get_batch (used with the default collate) and per-sample collate agree.
  local fast = data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 2 })
  local slow = data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 2,
                                     collate_fn = function(samples) return data.default_collate(samples) end })
  local it = slow()
  for fx, fy in fast() do
    local sx, sy = it()
    check(sx:dtype() == fx:dtype() and sy:dtype() == fy:dtype() and shape_is(sx, fx:shape()), 'same batch layout')
    check_close(fx, sx, 0, 'get_batch inputs')
    check_close(fy, sy, 0, 'get_batch targets')
  end
  check_eq(it(), nil, 'both paths end together')

  local calls = 0
  local custom = data.DataLoader(ds, { batch_size = 4, collate_fn = function(samples)
    calls = calls + 1
    return #samples
  end })
  local counts = {}
  for b in custom:iter() do counts[#counts + 1] = b end
  check(same_list(counts, { 4, 2 }) and calls == 2, 'collate_fn receives the samples of each batch')
  check_eq(tostring(custom), 'DataLoader(2 batches of 4)')

  check_error(function() return data.DataLoader(ds, { batch_size = 0 }) end,
              'DataLoader: batch_size must be an integer >= 1, got 0')
  check_error(function() return data.DataLoader(ds, { batchsize = 2 }) end, 'DataLoader: unknown option "batchsize"')
  check_error(function() return data.DataLoader(ds, { shuffle = true, sampler = data.SequentialSampler(ds) }) end,
              'DataLoader: sampler and shuffle = true cannot be combined')
  check_error(function() return data.DataLoader(ds, { sampler = {} }) end,
              'DataLoader: sampler must be an object with indices() and a length')
  check_error(function() return data.DataLoader(ds, { seed = 1 }) end, 'DataLoader: seed needs shuffle = true')
  check_error(function() return data.DataLoader(ds, { collate_fn = 1 }) end,
              'DataLoader: collate_fn must be a function, got number')
  check_error(function() return data.DataLoader(4) end, 'DataLoader: expected a dataset, got a number')
  check_error(function() return (data.DataLoader({ 1, 2 }, { batch_size = 3, sampler = data.SequentialSampler(3) })())() end,
              'DataLoader: sample 3 of the dataset is nil (the dataset has 2 samples)')
end)

test('collate', function()
  local samples = {}
  for i = 1, 3 do
    samples[i] = { x = zl.full({ 2, 2 }, i), meta = { id = i, w = i / 2, flag = i % 2 == 0, tag = 's' .. i },
                   pair = { zl.tensor{ i }, i } }
  end
  local b = data.default_collate(samples)
  check(shape_is(b.x, { 3, 2, 2 }), 'tensors stack on a new first dim')
  check_close(b.x:select(2, 2):select(2, 1), { 1, 2, 3 }, 0, 'stacked in sample order')
  check_eq(b.meta.id:dtype(), 'i64')
  check_close(b.meta.id, { 1, 2, 3 }, 0)
  check_eq(b.meta.w:dtype(), 'f32', 'floats collate into f32')
  check_close(b.meta.w, { 0.5, 1, 1.5 }, 0)
  check_eq(b.meta.flag:dtype(), 'bool')
  check_close(b.meta.flag, { false, true, false }, 0)
  check(same_list(b.meta.tag, { 's1', 's2', 's3' }), 'strings stay a list')
  check(shape_is(b.pair[1], { 3, 1 }), 'tuples collate position by position')
  check_close(b.pair[2], { 1, 2, 3 }, 0)
  check_close(data.default_collate({ 1, 2.5 }), { 1, 2.5 }, 0, 'mixed integers and floats are f32')

  -- A loader unpacks array batches and hands named ones over whole.
  local named = data.DataLoader(samples, { batch_size = 3 })
  for batch, extra in named() do
    check(type(batch) == 'table' and batch.x ~= nil and extra == nil, 'a table of named fields comes whole')
  end
  for a, c in data.DataLoader({ { 1, 2 }, { 3, 4 } }, { batch_size = 2 })() do
    check_close(a, { 1, 3 }, 0)
    check_close(c, { 2, 4 }, 0)
  end
  for t in data.DataLoader({ zl.zeros(2), zl.ones(2) }, { batch_size = 2 })() do
    check(shape_is(t, { 2, 2 }), 'a dataset of tensors gives tensors')
  end

  check_error(function() return data.default_collate({ { x = zl.zeros(2) }, { x = zl.zeros(3) } }) end,
              'collate: field .x of sample 2 is a tensor of shape {3}, expected shape {2} (as in sample 1)')
  check_error(function() return data.default_collate({ { 1, zl.zeros(1) }, { 1, 2 } }) end,
              'collate: field [2] of sample 2 is a number, expected a tensor (as in sample 1)')
  check_error(function() return data.default_collate({ { a = 1, b = 2 }, { a = 1 } }) end,
              'collate: field .b of sample 2 is missing (sample 1 has it)')
  check_error(function() return data.default_collate({ { a = 1 }, { a = 1, c = 2 } }) end,
              'collate: sample 2 has 2 entries, expected 1 (as in sample 1)')
  check_error(function() return data.default_collate({}) end, 'collate: expected a non-empty list of samples')
end)

test('datasets_from_files', function()
  local imgs = {}
  for i = 1, 2 * 4 * 3 do imgs[i] = (i * 10) % 256 end
  local ipath = write(gzip(idx(0x08, { 2, 4, 3 }, '>I1', imgs)))
  local lpath = write(idx(0x08, { 2 }, '>I1', { 7, 2 }))
  local mnist = data.datasets.mnist(ipath, lpath)
  check_eq(#mnist, 2)
  local x, y = table.unpack(mnist[2])
  check(shape_is(x, { 1, 4, 3 }), 'mnist images get a channel dim')
  check_eq(x:dtype(), 'f32')
  check_close(x:get(1, 1, 1), imgs[13] / 255, 1e-6, 'pixels scaled to [0, 1]')
  check_eq(y:dtype(), 'i64')
  check_eq(y:item(), 2)
  check_eq(data.datasets.mnist(ipath, lpath, { raw = true })[1][1]:dtype(), 'u8', 'raw keeps bytes')
  check_error(function() return data.datasets.mnist(ipath, write(idx(0x08, { 3 }, '>I1', { 1, 2, 3 }))) end,
              'expected labels [2] for the 2 images of ' .. ipath)

  local c1, c2 = write(cifar({ 1, 2 }, 0)), write(gzip(cifar({ 3, 4, 5 }, 2)))
  local cifar_ds = data.datasets.cifar10({ c1, c2 })
  check_eq(#cifar_ds, 5, 'batches concatenated')
  local loader = data.DataLoader(cifar_ds, { batch_size = 5 })
  for bx, by in loader() do
    check(shape_is(bx, { 5, 3, 32, 32 }), 'images [N, 3, 32, 32]')
    check_close(by, { 1, 2, 3, 4, 5 }, 0, 'labels in file order')
    local want = cifar_expected(5, 0)
    for k = 1, #want do want[k] = want[k] / 255 end
    check_close(bx, want, 1e-6, 'pixels of both files in order')
  end
  check_error(function() return data.datasets.cifar10({ c1, write(cifar({ 1 }):sub(1, 100)) }) end,
              'a partial record 0 starts at offset 0')

  local toks = {}
  for k = 1, 10 do toks[k] = pack('<I2', 100 + k) end
  local blocks = data.datasets.tokens(write(concat(toks)), 2, 3)
  check_eq(#blocks, 3, 'floor((10 - 1) / 3) blocks')
  local bx, by = table.unpack(blocks[2])
  check_close(bx, { 104, 105, 106 }, 0, 'block inputs')
  check_close(by, { 105, 106, 107 }, 0, 'targets are the next tokens')
  check_error(function() return data.datasets.lm_blocks(zl.arange(3), 3) end,
              'datasets.lm_blocks: 3 tokens make no block of 3 (a block needs block_size + 1 = 4 tokens)')

  local text = 'hello, world\n'
  local tds, vocab = data.datasets.text(write(gzip(text)), 4)
  check_eq(vocab, zl.text_vocab(text))
  check_eq(#tds, 3)
  check_eq(zl.text_decode(tds[1][1], vocab), 'hell')
  check_eq(zl.text_decode(tds[1][2], vocab), 'ello')
  check_eq(zl.text_decode(tds[3][1], vocab), 'orld')
  check_eq(zl.text_decode(tds[3][2], vocab), 'rld\n')
end)

test('loader_position_round_trip', function()
  -- Stop in the middle of the second pass, save, and a new loader resumed from
  -- the state gives exactly the rest of that pass, then the same next pass.
  local x = zl.arange(23):reshape(23, 1)
  local function make() return data.DataLoader(data.TensorDataset(x), { batch_size = 4, shuffle = true, seed = 5 }) end
  local function ids(batch) return table.concat(H.flat(batch), ',') end
  local a = make()
  for _ in a:iter() do end
  local it, seen = a:iter(), {}
  for _ = 1, 3 do it() end
  local sd = a:state_dict()
  check(sd.batches == 3, 'three batches of the pass were given')
  for batch in it do seen[#seen + 1] = ids(batch) end
  for batch in a:iter() do seen[#seen + 1] = ids(batch) end
  local b = make()
  b:load_state_dict(sd)
  local again = {}
  for batch in b:iter() do again[#again + 1] = ids(batch) end
  for batch in b:iter() do again[#again + 1] = ids(batch) end
  check(table.concat(again, ';') == table.concat(seen, ';'), 'the resumed loader continues where the saved one stood')
  -- A finished pass saves as the start of the next epoch.
  local c = make()
  for _ in c:iter() do end
  local st = c:state_dict()
  check(st.batches == 0 and st.epoch == 1, 'a finished pass reads as the next epoch')
end)

for _, p in ipairs(written) do os.remove(p) end
H.done()
