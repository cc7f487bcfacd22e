--[[ zlua.offload.aio: the libaio engine that offload swaps through, configured by
  DeepSpeed's "aio" block as zlua.config checks it (cfg.aio).

  local aio = require 'zlua.offload.aio'
  local engine = aio.new(cfg.aio)           -- nil or {}: DeepSpeed's defaults
  local buf = aio.buffer(1 << 20)           -- f32 on a 4096-byte boundary: goes direct
  local req = engine:write(path, buf, 0)    -- byte offset, a multiple of 4096
  req:wait()                                -- raises the error, naming the file
  engine:read(path, buf, 0):wait()
  engine:close()                            -- waits for what is in flight

  Requests run on the engine's intra_op_parallelism threads, so a tensor must not be
  touched until its request is waited on (the engine keeps it alive until then); a
  request collected unwaited is waited on by the collector, its error lost. Any
  contiguous tensor works: unaligned memory goes through bounce blocks. A write rounds
  the file up to a whole 4096-byte block with zeros. engine:is_direct() is false once a
  file fell back to buffered I/O (a filesystem that refuses O_DIRECT: a one-line warning
  says which). ]]

local core = require 'zlua.core'
local zl = require 'zlua'

local M = {}

--- aio.options(cfg): the "aio" block as the engine takes it (use_gds, GPUDirect
--- Storage, refused when on and dropped otherwise).
function M.options(cfg)
  local opts = {}
  for k, v in pairs(cfg or {}) do
    if k == 'use_gds' then
      if v then zl.raise('aio.use_gds: GPUDirect Storage is not implemented') end
    else
      opts[k] = v
    end
  end
  return opts
end

--- aio.new(cfg): an engine for an "aio" block (block_size, queue_depth,
--- intra_op_parallelism or thread_count, single_submit, overlap_events).
function M.new(cfg) return core.aio_open(M.options(cfg)) end

--- aio.buffer(numel [, dtype [, category]]): a 1-d tensor (f32 by default) whose
--- storage starts on a 4096-byte boundary and is a whole number of 4096-byte blocks.
function M.buffer(numel, dtype, category)
  return core.aio_buffer(numel, dtype, category)
end

return M
