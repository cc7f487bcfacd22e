--[[ zlua.nn.hf_weights: the tensors of a Hugging Face model folder, in one
  model.safetensors or in shards listed by model.safetensors.index.json
  (whose weight_map names each tensor's file): read by name, and written
  sharded above a size, as transformers' save_pretrained writes them.
  Private to zlua.nn. ]]

local zl = require 'zlua'
local json = require 'zlua.json'
local check = require 'zlua.nn.check'
local zero = require 'zlua.zero'

local fmt = string.format

local M = {}

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

local function read_file(who, path)
  local f, err = io.open(path, 'rb')
  if not f then check.error(fmt('%s: cannot open %s', who, err)) end
  local text = f:read('a')
  f:close()
  return text
end

M.exists = exists
M.read_file = read_file

local Reader = {}
Reader.__index = Reader

--- hf_weights.open(dir, who) -> reader: reader.info[name] = {shape =, dtype =,
--- path =} for every tensor, reader.order (their names, file by file),
--- reader.source (model.safetensors or the index: the file that lists them),
--- reader:read(name), reader:close(). Errors name who (the caller,
--- 'Llama.from_pretrained') and the file at fault.
function M.open(dir, who)
  local single, index = dir .. '/model.safetensors', dir .. '/model.safetensors.index.json'
  local files, wanted = {}, nil
  if exists(single) then
    files[1] = single
  elseif exists(index) then
    local doc = json.decode(read_file(who, index), index)
    if type(doc) ~= 'table' or type(doc.weight_map) ~= 'table' then
      check.error(fmt('%s: %s has no weight_map object', who, index))
    end
    wanted = {}
    local seen = {}
    for name, file in pairs(doc.weight_map) do
      if type(file) ~= 'string' or file:find('/', 1, true) or file == '..' then
        check.error(fmt('%s: %s: weight_map["%s"] must name a file of the folder, got %s', who, index, name,
                        tostring(file)))
      end
      wanted[name] = dir .. '/' .. file
      if not seen[file] then seen[file] = true; files[#files + 1] = dir .. '/' .. file end
    end
    table.sort(files)
  else
    local other = exists(dir .. '/pytorch_model.bin') and ' (pytorch_model.bin, a pickle, is not read: '
      .. 'save the model with safe_serialization)' or ''
    check.error(fmt('%s: %s has neither model.safetensors nor model.safetensors.index.json%s', who, dir, other))
  end
  local r = setmetatable({ info = {}, handles = {}, order = {}, source = wanted and index or single }, Reader)
  for _, path in ipairs(files) do
    if not exists(path) then check.error(fmt('%s: %s names shard %s, which is missing', who, index, path)) end
    local ok, f = pcall(zl.safetensors_open, path)
    if not ok then r:close(); error(f, 0) end
    r.handles[path] = f
    for _, e in ipairs(f:info()) do
      if wanted and wanted[e.name] ~= path then
        r:close()
        check.error(fmt('%s: %s holds tensor %s, which %s places %s', who, path, e.name, index,
                        wanted[e.name] and 'in ' .. wanted[e.name] or 'nowhere'))
      end
      r.info[e.name] = { shape = e.shape, dtype = e.dtype, path = path }
      r.order[#r.order + 1] = e.name
    end
  end
  for name, path in pairs(wanted or {}) do
    if not r.info[name] then
      r:close()
      check.error(fmt('%s: %s places tensor %s in %s, which does not hold it', who, index, name, path))
    end
  end
  return r
end

function Reader:read(name) return self.handles[self.info[name].path]:read(name) end

function Reader:close()
  for _, f in pairs(self.handles) do f:close() end
  self.handles = {}
end

--- hf_weights.load(who, dir, parse, build, copy): what every from_pretrained
--- does: config.json decoded and parse(cfg, path) -> options, generation ids;
--- build(options) -> the model; copy(reader, model) fills its parameters
--- from the folder's tensors (the files closed whatever happens). The model
--- comes back in eval mode, as transformers loads it.
function M.load(who, dir, parse, build, copy)
  if type(dir) ~= 'string' then check.error(fmt('%s: expected a directory name, got %s', who, type(dir))) end
  local cpath = dir .. '/config.json'
  local o, gen = parse(json.decode(read_file(who, cpath), cpath), cpath)
  local model = build(o)
  model.generation_config = gen
  local r = M.open(dir, who)
  local ok, err = pcall(copy, r, model)
  r:close()
  if not ok then error(err, 0) end
  return model:eval()
end

--- hf_weights.same_as(reader, name, p): whether the file's tensor name holds
--- exactly parameter p's values (a tied head saved anyway must be its embedding).
function M.same_as(r, name, p)
  if table.concat(r.info[name].shape, ',') ~= table.concat(zero.shape(p), ',') then return false end
  return zero.GatheredParameters({ p }, function() return (r:read(name):float() - p:float()):abs():max():item() == 0 end)
end

local sizes = { f64 = 8, i64 = 8, f32 = 4, i32 = 4, bf16 = 2, f16 = 2, i16 = 2, u8 = 1, i8 = 1, bool = 1 }

--- hf_weights.size(text): a shard size in bytes from a number or
--- transformers' strings ('5GB' = 5e9 bytes, '2GiB' = 2^31).
function M.size(who, v)
  if math.type(v) == 'integer' and v > 0 then return v end
  if type(v) == 'string' then
    local n, unit = v:upper():match('^%s*([%d%.]+)%s*([KMGT]?I?B)%s*$')
    local scale = ({ B = 1, KB = 1e3, MB = 1e6, GB = 1e9, TB = 1e12, KIB = 2 ^ 10, MIB = 2 ^ 20, GIB = 2 ^ 30,
                     TIB = 2 ^ 40 })[unit or '']
    if n and tonumber(n) and scale then return math.floor(tonumber(n) * scale) end
  end
  check.error(fmt("%s: max_shard_size must be a number of bytes or a size such as '5GB', got %s", who,
                  tostring(v)))
end

--- hf_weights.save(dir, list, max_shard, metadata): list is {{name, tensor}, ...}
--- in file order. One model.safetensors when the tensors fit in max_shard
--- bytes, else model-0000i-of-0000n.safetensors and the index. The files of
--- the other form (from an earlier save) are removed once the new ones are
--- written, so the folder is never read as a mix of two saves.
function M.save(dir, list, max_shard)
  local shards, cur, cur_bytes, total = {}, nil, 0, 0
  for _, e in ipairs(list) do
    local t = e[2]
    local bytes = t:numel() * (sizes[t:dtype()] or 4)
    total = total + bytes
    if not cur or (cur_bytes > 0 and cur_bytes + bytes > max_shard) then
      cur, cur_bytes = {}, 0
      shards[#shards + 1] = cur
    end
    cur[#cur + 1] = e
    cur_bytes = cur_bytes + bytes
  end
  local function tensors_of(shard)
    local t = {}
    for _, e in ipairs(shard) do t[e[1]] = e[2] end
    return t
  end
  local index_path = dir .. '/model.safetensors.index.json'
  local stale = {}
  if exists(index_path) then
    local ok, doc = pcall(json.decode, read_file('save_pretrained', index_path), index_path)
    for _, file in pairs(ok and type(doc) == 'table' and type(doc.weight_map) == 'table' and doc.weight_map or {}) do
      if type(file) == 'string' and file:match('^model%-%d+%-of%-%d+%.safetensors$') then stale[file] = true end
    end
  end
  if #shards <= 1 then
    zl.save_safetensors(dir .. '/model.safetensors', tensors_of(shards[1] or {}), { format = 'pt' })
    if exists(index_path) then os.remove(index_path) end
  else
    local map = {}
    for i, shard in ipairs(shards) do
      local file = fmt('model-%05d-of-%05d.safetensors', i, #shards)
      zl.save_safetensors(dir .. '/' .. file, tensors_of(shard), { format = 'pt' })
      for _, e in ipairs(shard) do map[e[1]] = file end
      stale[file] = nil
    end
    zl.write_file_atomic(index_path, json.encode({ metadata = { total_size = total }, weight_map = map }, 2) .. '\n')
    if exists(dir .. '/model.safetensors') then os.remove(dir .. '/model.safetensors') end
  end
  for file in pairs(stale) do os.remove(dir .. '/' .. file) end
end

return M
