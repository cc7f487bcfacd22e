--[[ zero_to_fp32.lua CKPT_DIR OUT.safetensors [-t TAG]: the consolidated f32
  weights of a zlua checkpoint (the optimizer's f32 master copies, by parameter
  name) as one safetensors file, as DeepSpeed's zero_to_fp32.py does. Tensors
  are streamed one at a time: memory is bounded by the largest tensor, not the
  model. A model trained without an optimizer state (or saved without one)
  falls back to the model file's weights, converted to f32.

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

local function read(path)
  local f, err = io.open(path, 'rb')
  if not f then die('cannot read ' .. path .. ': ' .. tostring(err)) end
  local s = f:read('a')
  f:close()
  return s
end

if not tag then tag = read(dir .. '/latest'):match('^%s*(.-)%s*$') end
local path = dir .. '/' .. tag
local ok, state = pcall(json.decode, read(path .. '/engine.json'), path .. '/engine.json')
if not ok then die(tostring(state)) end
if state.world_size ~= 1 then
  die(string.format('%s was saved by %d ranks; consolidating ZeRO shards arrives with issue 5', path, state.world_size))
end

-- name -> {file, tensor name inside it}, in the model's parameter order.
local sources, entries = {}, {}
local optim_file = path .. '/optim_rank0.safetensors'
local have_optim = state.param_names and zl.core.exists(optim_file)
local src = zl.safetensors_open(have_optim and optim_file or path .. '/model.safetensors')
local info = src:info()
local by_name = {}
for _, e in ipairs(info) do by_name[e.name] = e end
if have_optim then
  for idx, name in ipairs(state.param_names) do
    if name ~= json.null then
      local e = by_name['param.' .. idx] or die(optim_file .. ' has no param.' .. idx)
      sources[#sources + 1] = { name = name, key = 'param.' .. idx }
      entries[#entries + 1] = { name = name, dtype = 'f32', shape = e.shape }
    end
  end
else
  for _, e in ipairs(info) do
    if e.dtype == 'f32' or e.dtype == 'bf16' or e.dtype == 'f16' then
      sources[#sources + 1] = { name = e.name, key = e.name }
      entries[#entries + 1] = { name = e.name, dtype = 'f32', shape = e.shape }
    end
  end
end

local w = zl.safetensors_writer(out, entries, { format = 'pt', source = path })
for _, s in ipairs(sources) do
  local t = src:read(s.key)
  w:write(t:float())
  t:release()
end
w:commit()
src:close()
print(string.format('zero_to_fp32: %d tensors from %s written to %s', #sources, path, out))
