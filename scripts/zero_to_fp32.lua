--[[ zero_to_fp32.lua CKPT_DIR OUT.safetensors [-t TAG]: the consolidated f32
  weights of a zlua checkpoint (the optimizer's f32 master copies, by parameter
  name; frozen parameters from the saved weights) as one safetensors file, as
  DeepSpeed's zero_to_fp32.py does, from a checkpoint of any world size and
  ZeRO stage: each parameter is put together from the chunks every rank saved. Tensors are streamed a chunk at a time:
  memory is bounded by the largest chunk, not the model. A model trained
  without an optimizer state falls back to the model file's weights, in f32.

    zlua scripts/zero_to_fp32.lua ckpt/ model_fp32.safetensors
    zlua scripts/zero_to_fp32.lua ckpt/ model_fp32.safetensors -t global_step100 ]]

local zl = require 'zlua'
local json = require 'zlua.json'

local function die(msg)
  io.stderr:write('zero_to_fp32: ', msg, '\n')
  os.exit(1)
end

local positional, tag = {}, nil
local i = 1
while arg[i] do
  if arg[i] == '-t' or arg[i] == '--tag' then
    tag = arg[i + 1] or die('-t needs a tag')
    i = i + 2
  else
    positional[#positional + 1] = arg[i]
    i = i + 1
  end
end
local dir, out = positional[1], positional[2]
if not dir or not out or positional[3] then die('usage: zlua zero_to_fp32.lua CKPT_DIR OUT.safetensors [-t TAG]') end

-- The same checks as load_checkpoint, the engine's (zl_zero_ckpt_open): the
-- tag, every field of engine.json, every file against its CRC-32 in the
-- manifest, regular files inside the folder only. Any failure names the
-- file and the key.
local function checked(f, ...)
  local ok, a, b = pcall(f, ...)
  if not ok then die((tostring(a):gsub('^[^\n]-:%d+: ', '', 1):gsub('^load_checkpoint: ', ''))) end
  return a, b
end

if not tag and not zl.core.exists(dir .. '/latest') then
  die('cannot read ' .. dir .. '/latest: no checkpoint there (give -t TAG)')
end
local ckpt = checked(zl.core.zero_ckpt_open, nil, dir, { tag = tag })
local path = ckpt:path()
local state = json.decode(ckpt:json(), path .. '/engine.json')
ckpt:close()
local zi = state.optimizer and state.optimizer.zero

local entries, pieces = {}, {}
local files = {}
local function open_file(name)
  if not files[name] then
    files[name] = checked(zl.safetensors_open, path .. '/' .. name)
  end
  return files[name]
end

if zi then
  -- Parameter i: chunk q (zi.params[i].k elements) from optim_rank<q>, its real elements only.
  local trained = {}
  for idx, sp in ipairs(zi.params) do
    trained[sp.name] = true
    entries[#entries + 1] = { name = sp.name, dtype = 'f32', shape = sp.shape }
    for q = 0, zi.partitions - 1 do
      if sp.numel > q * sp.k then
        pieces[#pieces + 1] = { file = string.format('optim_rank%d.safetensors', q), key = 'param.' .. idx }
      end
    end
  end
  -- Frozen parameters (and float buffers) have no master: their saved weights, in f32.
  for _, e in ipairs(open_file('model.safetensors'):info()) do
    if not trained[e.name] and (e.dtype == 'f32' or e.dtype == 'bf16' or e.dtype == 'f16') then
      entries[#entries + 1] = { name = e.name, dtype = 'f32', shape = e.shape }
      pieces[#pieces + 1] = { file = 'model.safetensors', key = e.name }
    end
  end
else
  for _, e in ipairs(open_file('model.safetensors'):info()) do
    if e.dtype == 'f32' or e.dtype == 'bf16' or e.dtype == 'f16' then
      entries[#entries + 1] = { name = e.name, dtype = 'f32', shape = e.shape }
      pieces[#pieces + 1] = { file = 'model.safetensors', key = e.name }
    end
  end
end

local w = zl.safetensors_writer(out, entries, { format = 'pt', source = path })
for _, s in ipairs(pieces) do
  local t = open_file(s.file):read(s.key)
  w:write(t:float())
  t:release()
end
w:commit()
for _, f in pairs(files) do f:close() end
print(string.format('zero_to_fp32: %d tensors from %s (%d ranks, ZeRO stage %s) written to %s', #entries, path,
  state.world_size, zi and tostring(zi.stage) or '-', out))
