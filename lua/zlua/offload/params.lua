--[[ zlua.offload.params: stage 3's parameter chunks on NVMe
  (offload_param.device = "nvme"). Each rank's working chunks (bf16/fp16, or
  f32) live in one file under nvme_path, each chunk on a 4096-byte boundary;
  the first max_in_cpu elements' worth of chunks stay in memory instead. A
  chunk is read into one of buffer_count buffers of buffer_size elements just
  before its gather (which the trace already issues ahead of use; buffers are
  as large as the largest swapped chunk, buffer_size at most), and the
  optimizer's new values are written straight from a buffer. Running out of
  buffers is an error that says which key to raise, as in DeepSpeed. ]]

local zl = require 'zlua'
local aio_mod = require 'zlua.offload.aio'

local fmt = string.format

local PS = {}
PS.__index = PS

local BLOCK = 4096
local SIZE = { f32 = 4, f16 = 2, bf16 = 2 }

--- params.new(z, offload_param_cfg, aio_cfg): decides which entries swap and
--- lays out the file; the entries that swap get e.pswap = {offset=}.
function PS.new(z, oc, aio_cfg)
  local self = setmetatable({}, PS)
  self.z = z
  self.dtype = z.wdtype
  self.size = SIZE[self.dtype]
  self.dir = aio_mod.swap_folder(oc.nvme_path, fmt('params/rank%d', z.rank), 'offload_param')
  self.path = self.dir .. '/params.swp'
  self.aio = aio_mod.new(aio_cfg)
  self.buffer_size = math.floor(oc.buffer_size)
  self.free = {}
  for i = 1, math.max(1, oc.buffer_count) do self.free[i] = i end
  self.buffers = {}
  self.nbuffers = math.max(1, oc.buffer_count)
  -- The leading chunks up to max_in_cpu elements stay in memory (the state's work buffer).
  local off, swapping = 0, false
  self.resident = 0
  for _, e in ipairs(z.entries) do
    if not swapping and e.off + e.k <= oc.max_in_cpu then
      self.resident = e.off + e.k
    else
      swapping = true
      if e.k > self.buffer_size then
        zl.raise(fmt('offload_param: %s has a chunk of %d elements and offload_param.buffer_size is %d: raise '
          .. 'buffer_size to at least %d', e.name, e.k, self.buffer_size, e.k))
      end
      e.pswap = { offset = off }
      off = off + (e.k * self.size + BLOCK - 1) // BLOCK * BLOCK
    end
  end
  self.file_bytes = off
  -- Buffers as large as the largest swapped chunk, buffer_size at most.
  self.buffer_elems = 0
  for _, e in ipairs(z.entries) do
    if e.pswap then self.buffer_elems = math.max(self.buffer_elems, e.k) end
  end
  self.read_bytes, self.write_bytes, self.io_time = 0, 0, 0
  self.writing = {}             -- writes in flight: {req, view, i}, oldest first
  return self
end

--- Whether a chunk can be read now (prefetching stops when no buffer is free).
function PS:available() return #self.free > 0 end

-- A free swap buffer's index (allocated on first use).
function PS:acquire(e)
  -- The oldest write in flight gives its buffer back first.
  if #self.free == 0 and #self.writing > 0 then self:finish_write(1) end
  local i = table.remove(self.free)
  if not i then
    zl.raise(fmt('offload_param: ran out of swap buffers reading %s (%d in use); increase '
      .. 'offload_param.buffer_count or lower stage3_prefetch_bucket_size / stage3_max_live_parameters',
      e.name, self.nbuffers))
  end
  if not self.buffers[i] then
    self.buffers[i] = aio_mod.buffer(self.buffer_elems, self.dtype)
    self.buffers[i]:set_category('params')
  end
  return i
end

function PS:give_back(i) self.free[#self.free + 1] = i end

-- Wait for the k-th write in flight and give its buffer back.
function PS:finish_write(k)
  local w = table.remove(self.writing, k)
  local t0 = zl.core.now()
  local ok, err = pcall(w.req.wait, w.req)
  self.io_time = self.io_time + (zl.core.now() - t0)
  w.view:release()
  self:give_back(w.i)
  if not ok then error(err, 0) end
end

--- Wait for every write (before the chunks are read again: the next gathers).
function PS:flush()
  while #self.writing > 0 do self:finish_write(1) end
end

local function timed(self, fn)
  local t0 = zl.core.now()
  fn()
  self.io_time = self.io_time + (zl.core.now() - t0)
end

--- e's chunk in memory, read from its file: the tensor and a function that
--- gives the buffer back (call it once the tensor is no longer read).
function PS:read(e)
  self:flush()   -- a chunk is never read while a write of it may be in flight
  local i = self:acquire(e)
  local view = self.buffers[i]:narrow(1, 1, e.k)
  timed(self, function() self.aio:read(self.path, view, e.pswap.offset):wait() end)
  self.read_bytes = self.read_bytes + e.k * self.size
  return view, function()
    view:release()
    self:give_back(i)
  end
end

--- e's chunk read ahead: the buffer view, the read request (wait on it before
--- using the view) and the function that gives the buffer back.
function PS:read_async(e)
  self:flush()
  local i = self:acquire(e)
  local view = self.buffers[i]:narrow(1, 1, e.k)
  local req = self.aio:read(self.path, view, e.pswap.offset)
  self.read_bytes = self.read_bytes + e.k * self.size
  return view, req, function()
    view:release()
    self:give_back(i)
  end
end

--- A buffer for e's new chunk: fill it, then call the returned commit() to
--- start writing it to e's place in the file; the buffer comes back when the
--- write has landed (flush() waits for them all).
function PS:write_buffer(e)
  local i = self:acquire(e)
  local view = self.buffers[i]:narrow(1, 1, e.k)
  return view, function()
    self.writing[#self.writing + 1] = { req = self.aio:write(self.path, view, e.pswap.offset), view = view, i = i }
    self.write_bytes = self.write_bytes + e.k * self.size
  end
end

--- Bytes in memory (buffers) and on disk.
function PS:bytes()
  local mem = 0
  for _, b in pairs(self.buffers) do mem = mem + b:numel() * self.size end
  return mem, self.file_bytes
end

function PS:close()
  self:flush()
  self.aio:close()
end

return PS
