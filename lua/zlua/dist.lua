--[=[ zlua.dist: this process's place among the ranks and collectives on
  tensors, over the engine's communicator (engine/include/zlua/comm.h): the
  MPI backend when the process was started by mpirun (zlua --nprocs N), a
  single-rank one otherwise, unless init_process_group named one first.

  local dist = require 'zlua.dist'
  dist.init_process_group(['self'|'mpi'|'nccl'])               -- before any collective; nccl takes CUDA tensors
  dist.rank(), dist.local_rank(), dist.world_size(), dist.device()
  dist.barrier([async_op])
  dist.all_reduce(t [, 'sum'|'max'|'min'|'avg' [, async_op]])   -- in place
  dist.reduce_scatter(out, input [, op [, async_op]])          -- out: this rank's slice
  dist.all_gather(out, input [, async_op])                     -- out: every rank's input, in rank order
  dist.broadcast(t [, root = 0 [, async_op]])                  -- root is a 0-based rank, as MPI's
  dist.set_timeout(seconds)                                    -- a collective waits at most this long

  The argument order follows torch.distributed (output first; async_op last,
  as there, less the group argument zlua has no use for). A collective returns
  its output tensor (nothing for barrier), or with async_op true a work object
  at once: work:wait() returns true when it has completed and raises its error
  otherwise; it may be waited on once. Until then the tensors belong to the
  collective and must not be touched. A work object collected unwaited is
  waited on then. ]=]

local zl = require 'zlua'
local core = zl.core

local dist = {}

function dist.rank() return core.dist_rank() end
function dist.local_rank() return core.dist_local_rank() end
function dist.world_size() return core.dist_world_size() end
function dist.backend() return core.dist_backend() end
--- dist.device(): where the communicator's tensors live: 'cpu' ('self', 'mpi') or 'cuda:N' ('nccl').
function dist.device() return core.dist_device() end

-- torch.distributed's name; its backend may also come as {backend = 'nccl'}.
function dist.init_process_group(backend)
  if type(backend) == 'table' then backend = backend.backend end
  if backend ~= nil and type(backend) ~= 'string' then
    error(string.format('dist.init_process_group: backend must be a string, got %s', type(backend)), 2)
  end
  core.dist_init(backend)
end
function dist.set_timeout(seconds) core.dist_set_timeout(seconds) end

-- torch.distributed's names, which DistributedSampler and ported scripts use.
dist.get_rank = dist.rank
dist.get_world_size = dist.world_size

-- async_op as torch.distributed takes it: true, false or nil. Anything else is
-- most likely an argument zlua does not take (a process group) in its place.
local function async(fn, value, pos)
  if value == nil or value == false then return false end
  if value == true then return true end
  error(string.format('dist.%s: async_op (argument %d) must be a boolean, got %s', fn, pos, type(value)), 3)
end

function dist.barrier(async_op)
  if async('barrier', async_op, 1) then return core.dist_barrier_async() end
  core.dist_barrier()
end

function dist.all_reduce(t, op, async_op)
  if async('all_reduce', async_op, 3) then return core.dist_allreduce_async(t, op) end
  core.dist_allreduce(t, op)
  return t
end

function dist.reduce_scatter(out, input, op, async_op)
  if async('reduce_scatter', async_op, 4) then return core.dist_reduce_scatter_async(input, out, op) end
  core.dist_reduce_scatter(input, out, op)
  return out
end

function dist.all_gather(out, input, async_op)
  if async('all_gather', async_op, 3) then return core.dist_allgather_async(input, out) end
  core.dist_allgather(input, out)
  return out
end

function dist.broadcast(t, root, async_op)
  if async('broadcast', async_op, 3) then return core.dist_broadcast_async(t, root or 0) end
  core.dist_broadcast(t, root or 0)
  return t
end

return dist
