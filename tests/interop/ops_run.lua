-- zlua's side of tests/interop/check_ops_torch.py: runs the cases of each
-- group file given (tests/interop/ops/<group>.lua), backpropagates a fixed
-- random upstream gradient, and writes each case's tensors to OUT.
--   zlua ops_run.lua OUT group.lua...
-- A group file returns a list of cases { name =, inputs = { name = tensor },
-- grad = { names of float inputs }, fn = function(inputs) return tensor end }.
-- OUT/<group>.<case>.safetensors holds in.<name>, out, upstream (the gradient
-- fed to backward, in out's dtype) and grad.<name>; OUT/manifest.json lists
-- the cases in order with their grad lists, or the error a case raised.
local zl = require 'zlua'
local json = require 'zlua.json'

local out_dir = arg[1]
if not out_dir or not arg[2] then
  io.stderr:write('usage: zlua ops_run.lua OUT group.lua...\n')
  os.exit(2)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- One case: its tensors as a list of {name, tensor} for save_safetensors.
local function run_case(case, upstream_gen)
  local inputs, entries = {}, {}
  for _, k in ipairs(sorted_keys(case.inputs or {})) do
    local t = case.inputs[k]:detach()
    inputs[k] = t
    entries[#entries + 1] = { 'in.' .. k, t:contiguous() }
  end
  for _, k in ipairs(case.grad or {}) do
    if not inputs[k] then error(string.format('grad names input %q, which the case does not have', k), 0) end
    inputs[k]:requires_grad(true)
  end
  local out = case.fn(inputs)
  if not zl.is_tensor(out) then error('fn returned a ' .. type(out) .. ', not a tensor', 0) end
  entries[#entries + 1] = { 'out', out:detach():contiguous() }
  if #(case.grad or {}) > 0 then
    local up = zl.randn(out:shape(), upstream_gen):to(out:dtype())
    entries[#entries + 1] = { 'upstream', up }
    out:backward(up)
    for _, k in ipairs(case.grad) do
      local g = inputs[k].grad
      if g then entries[#entries + 1] = { 'grad.' .. k, g:contiguous() } end
    end
  end
  return entries
end

local manifest = setmetatable({}, json.array)
for i = 2, #arg do
  local path = arg[i]
  local group = path:match('([^/]+)%.lua$')
  zl.manual_seed(1234)
  local ok, cases = pcall(dofile, path)
  if not ok or type(cases) ~= 'table' then
    local why = ok and 'did not return a list of cases' or tostring(cases)
    manifest[#manifest + 1] = { group = group, name = '(load)', error = why }
  else
    local upstream_gen = zl.Generator(99)
    for _, case in ipairs(cases) do
      local entry = { group = group, name = case.name, grad = setmetatable({}, json.array) }
      for j, k in ipairs(case.grad or {}) do entry.grad[j] = k end
      local ran, res = pcall(run_case, case, upstream_gen)
      if ran then
        entry.file = group .. '.' .. case.name .. '.safetensors'
        zl.save_safetensors(out_dir .. '/' .. entry.file, res)
      else
        entry.error = tostring(res)
      end
      manifest[#manifest + 1] = entry
    end
  end
end
local f = assert(io.open(out_dir .. '/manifest.json', 'w'))
f:write(json.encode(manifest, 1))
f:close()
