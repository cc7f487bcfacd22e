--[[ Assembles examples/gpt/data/zlua.txt, the GPT example's default text:
  the project's own prose (README.md, then the comments of the C and Lua
  sources git tracks, file by file in path order, paragraphs of code left
  out), whole paragraphs up to max_bytes (128 KiB), so the example has about
  100 KB of English that is ours to ship. Run by hand, from anywhere in the
  tree:  zlua scripts/gpt_corpus.lua [out] [max_bytes] ]]

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
local max_bytes = math.tointeger(tonumber(arg[2] or 131072))

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
    out[#out + 1] = body
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

-- Prose, not code: a paragraph (lines between blank ones) is kept when
-- letters and spaces make at least 85% of it, so code examples and formulas
-- inside comments fall out; rules (----, ====) are dropped from any line.
local function prose(text)
  local keep = {}
  text = text:gsub('[ \t]*[-=*][-=*][-=*][-=*]+[ \t]*', ''):gsub('[ \t]+\n', '\n')
  for para in (text .. '\n\n'):gmatch('(.-)\n%s*\n') do
    local body = para:gsub('^%s+', ''):gsub('%s+$', '')
    local letters = select(2, body:gsub('[%a ]', ''))
    local size = #body:gsub('\n%s*', ' ')
    if size > 0 and letters >= 0.85 * size then keep[#keep + 1] = body end
  end
  return table.concat(keep, '\n\n')
end

-- Whole paragraphs in order, README first, up to max_bytes.
local parts, size = {}, 0
local function add(text)
  for para in (text .. '\n\n'):gmatch('(.-)\n\n') do
    if size + #para + 2 > max_bytes then return false end
    parts[#parts + 1] = para
    size = size + #para + 2
  end
  return true
end

local more = add(prose(read('README.md')))
for path in run('git -C "' .. root .. '" ls-files'):gmatch('[^\n]+') do
  if not more then break end
  local out = {}
  if path:match('%.[ch]$') then
    c_comments(read(path), out)
  elseif path:match('%.lua$') then
    lua_comments(read(path), out)
  end
  local text = prose(table.concat(out, '\n'))
  if text ~= '' then more = add(text) end
end

local text = table.concat(parts, '\n\n') .. '\n'
local f = assert(io.open(out_path, 'wb'))
f:write(text)
f:close()
print(('gpt_corpus: %d bytes to %s'):format(#text, out_path))
