-- same_tensors.lua A B: exit 0 when two safetensors files hold the same
-- tensor names with the same dtypes, shapes and bits (tests/dist/test_zero.sh).
local zl = require 'zlua'
local a, b = zl.load_safetensors(arg[1]), zl.load_safetensors(arg[2])
local function equal(x, y)
  local u, v = x:reshape(x:numel()):totable(), y:reshape(y:numel()):totable()
  for i = 1, #u do if u[i] ~= v[i] then return false end end
  return true
end
local n = 0
for name, t in pairs(a) do
  local u = b[name]
  if not u or u:dtype() ~= t:dtype() or table.concat(u:shape(), 'x') ~= table.concat(t:shape(), 'x')
      or not equal(t, u) then
    io.stderr:write('same_tensors: ', name, ' differs\n')
    os.exit(1)
  end
  n = n + 1
end
for name in pairs(b) do
  if not a[name] then io.stderr:write('same_tensors: ', name, ' only in ', arg[2], '\n') os.exit(1) end
end
print(string.format('same_tensors: %d tensors equal', n))
