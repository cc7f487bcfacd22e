--[[ Assembles examples/gpt/data/zlua.txt, the GPT example's default text: the
  project's own prose (README.md, then every comment of the C and Lua
  sources git tracks, file by file in path order), so the example ships a
  100 KB English text that is ours to ship. Run it by hand from anywhere in
  the tree when the docs have grown:  zlua scripts/gpt_corpus.lua [out] ]]

local function run(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read('a')
  p:close()
  return out
end

local root = run('git rev-parse --show-toplevel'):gsub('%s+$', '')
if root == '' then
  io.stderr:write('gpt_corpus: not inside the zlua git tree\n')
  os.exit(1)
end
local out_path = arg[1] or root .. '/examples/gpt/data/zlua.txt'

local function read(path)
  local f = assert(io.open(root .. '/' .. path, 'rb'))
  local s = f:read('a')
  f:close()
  return s
end

-- Comment text of a C file: the body of each /* */ block without the
-- leading " * " of its lines, and each // line.
local function c_comments(src, out)
  for body in src:gmatch('/%*(.-)%*/') do
    body = body:gsub('\n[ \t]*%*[ \t]?', '\n'):gsub('^%*', '')
    out[#out + 1] = body:gsub('^%s+', ''):gsub('%s+$', '')
  end
  for line in src:gmatch('//[ \t]?([^\n]*)') do out[#out + 1] = line end
end

-- Comment text of a Lua file: --[[ ]] blocks, then runs of -- lines.
local function lua_comments(src, out)
  src = src:gsub('%-%-%[(=*)%[(.-)%]%1%]', function(_, body)
    out[#out + 1] = body
    return ''
  end)
  for line in src:gmatch('[^\n]+') do
    local text = line:match('^%s*%-%-%-?[ \t]?(.*)$') or line:match('%s%-%-[ \t](.*)$')
    if text then out[#out + 1] = text end
  end
end

local parts = { read('README.md') }
for path in run('git -C "' .. root .. '" ls-files'):gmatch('[^\n]+') do
  local out = {}
  if path:match('%.[ch]$') then
    c_comments(read(path), out)
  elseif path:match('%.lua$') then
    lua_comments(read(path), out)
  end
  if #out > 0 then
    local text = table.concat(out, '\n'):gsub('[ \t]+\n', '\n'):gsub('\n\n\n+', '\n\n')
    parts[#parts + 1] = text:gsub('^%s+', ''):gsub('%s+$', '')
  end
end

local text = table.concat(parts, '\n\n') .. '\n'
local f = assert(io.open(out_path, 'wb'))
f:write(text)
f:close()
print(('gpt_corpus: %d bytes to %s'):format(#text, out_path))
