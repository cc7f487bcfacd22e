-- One of three ranks fails mid-run as its argument says: `kill` (SIGKILL),
-- `raise` (a Lua error), `exit` (os.exit(3)) or `stop` (SIGSTOP, left to the
-- comm timeout); run by test_lost_rank.sh, which checks what the others print
-- and how the job ends. Rank 0 is then waiting in an allreduce, so the wait
-- finds the failure; rank 2 is computing, so it hears of it from mpirun's SIGTERM.
local zl = require 'zlua'
local dist = require 'zlua.dist'

local r = dist.rank()
local how = arg[1] or 'kill'
assert(dist.world_size() == 3, 'run on three ranks')
for _ = 1, 20 do dist.all_reduce(zl.ones(64)) end
if r == 1 then
  if how == 'raise' then error('rank 1 gives up') end
  if how == 'exit' then os.exit(3) end
  os.execute(('kill -%s %d'):format(how == 'stop' and 'STOP' or 'KILL', zl.core.getpid()))
end
if r == 2 then
  local t0 = os.time()
  while os.time() - t0 < 30 do end
end
for _ = 1, 1e6 do dist.all_reduce(zl.ones(64)) end
print('rank ' .. r .. ' was not stopped')
