--[[ zlua.dist: this process's place among the ranks and collectives on
  tensors, over the engine's communicator (engine/include/zlua/comm.h): the
  MPI backend when the process was started by mpirun (zlua --nprocs N), a
  single-rank one otherwise.

  local dist = require 'zlua.dist'
  dist.rank(), dist.local_rank(), dist.world_size(), dist.barrier()
  dist.all_reduce(t [, 'sum'|'max'|'min'|'avg'])   -- in place
  dist.reduce_scatter(out, input [, op])           -- out: this rank's slice
  dist.all_gather(out, input)                      -- out: every rank's input, in rank order
  dist.broadcast(t [, root = 0])                   -- root is a 0-based rank, as MPI's
  dist.set_timeout(seconds)                        -- a collective waits at most this long

  The argument order follows torch.distributed (output first). ]]

local zl = require 'zlua'
local core = zl.core

local dist = {}

function dist.rank() return core.dist_rank() end
function dist.local_rank() return core.dist_local_rank() end
function dist.world_size() return core.dist_world_size() end
function dist.backend() return core.dist_backend() end
function dist.barrier() core.dist_barrier() end
function dist.set_timeout(seconds) core.dist_set_timeout(seconds) end

-- torch.distributed's names, which DistributedSampler and ported scripts use.
dist.get_rank = dist.rank
dist.get_world_size = dist.world_size

function dist.all_reduce(t, op)
  core.dist_allreduce(t, op)
  return t
end

function dist.reduce_scatter(out, input, op)
  core.dist_reduce_scatter(input, out, op)
  return out
end

function dist.all_gather(out, input)
  core.dist_allgather(input, out)
  return out
end

function dist.broadcast(t, root)
  core.dist_broadcast(t, root or 0)
  return t
end

return dist
