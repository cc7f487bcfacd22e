-- One of three ranks ends by SIGKILL mid-run, or with `raise` as its argument
-- by a Lua error (run by test_lost_rank.sh, which checks what the others print
-- and how they exit). Rank 0 is then waiting in an allreduce, so the wait finds
-- the loss; rank 2 is computing, so it hears of it from mpirun's SIGTERM.
local zl = require 'zlua'
local dist = require 'zlua.dist'

local r = dist.rank()
assert(dist.world_size() == 3, 'run on three ranks')
for _ = 1, 20 do dist.all_reduce(zl.ones(64)) end
if r == 1 and arg[1] == 'raise' then error('rank 1 gives up') end
if r == 1 then os.execute('kill -9 ' .. zl.core.getpid()) end
if r == 2 then
  local t0 = os.time()
  while os.time() - t0 < 30 do end
end
for _ = 1, 1e6 do dist.all_reduce(zl.ones(64)) end
print('rank ' .. r .. ' was not stopped')
