--[[ Writes a small stand-in for CIFAR-10 in its exact binary format, for the
  tests of examples/cifar10: data_batch_1.bin .. data_batch_5.bin and
  test_batch.bin, each a run of 3073-byte records (the label byte 0..9, then
  the 32x32 red, green and blue planes, row-major). Each class has its own
  colour and its own stripe orientation and period, under uniform noise, so
  a small convolutional network can learn it in a few hundred steps.
    lua scripts/gen_cifar10.lua DIR [train_per_file = 80] [test = 100] [seed = 1]
  DIR is made when missing. Plain Lua 5.4 (zlua runs it too); the same seed
  writes the same bytes. ]]

local dir, per_file, ntest, seed = arg[1], tonumber(arg[2] or 80), tonumber(arg[3] or 100), tonumber(arg[4] or 1)
if not dir or not math.tointeger(per_file) or not math.tointeger(ntest) or not math.tointeger(seed) then
  io.stderr:write('usage: gen_cifar10.lua DIR [train_per_file] [test] [seed]\n')
  os.exit(2)
end
math.randomseed(seed)
-- Plain Lua has no mkdir of its own: the shell's, with DIR quoted for it.
if not os.execute("mkdir -p -- '" .. dir:gsub("'", "'\\''") .. "'") then
  io.stderr:write('gen_cifar10: cannot make the folder ', dir, '\n')
  os.exit(1)
end

-- Ten colours far apart in RGB, and a stripe direction and period per class.
local colours = {
  { 220, 40, 40 }, { 40, 200, 40 }, { 40, 60, 220 }, { 220, 220, 40 }, { 220, 40, 220 },
  { 40, 210, 210 }, { 240, 140, 30 }, { 130, 60, 200 }, { 150, 150, 150 }, { 90, 50, 20 },
}

local function clamp(v)
  if v < 0 then return 0 end
  if v > 255 then return 255 end
  return v
end

-- One record: the label byte and 3072 pixel bytes. Stripes brighten the
-- class colour on alternate bands; the noise is uniform in +-48 per pixel.
local function record(label)
  local c = colours[label + 1]
  local vertical = label % 2 == 0
  local period = 2 + label // 2
  local bytes = { label }
  for ch = 1, 3 do
    for y = 0, 31 do
      for x = 0, 31 do
        local band = ((vertical and x or y) // period) % 2
        local v = c[ch] * (0.6 + 0.4 * band) + math.random(-48, 48)
        bytes[#bytes + 1] = clamp(math.floor(v + 0.5))
      end
    end
  end
  local parts = {}
  for i = 1, #bytes, 1024 do parts[#parts + 1] = string.char(table.unpack(bytes, i, math.min(i + 1023, #bytes))) end
  return table.concat(parts)
end

local function write(name, count)
  local path = dir .. '/' .. name
  local f, err = io.open(path, 'wb')
  if not f then
    io.stderr:write('gen_cifar10: ', err, '\n')
    os.exit(1)
  end
  -- Labels cycle through the classes, so every file holds all ten evenly.
  for i = 0, count - 1 do f:write(record(i % 10)) end
  f:close()
end

for k = 1, 5 do write(('data_batch_%d.bin'):format(k), per_file) end
write('test_batch.bin', ntest)
