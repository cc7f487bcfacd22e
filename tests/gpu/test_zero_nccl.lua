-- ZeRO stages 0-3 over nccl on two GPUs (two ranks of zlua --nprocs 2, the
-- model on cuda:<local rank>) against the same two ranks over mpi in host
-- memory: the losses agree to 1e-5 in f32. Exits 77 (CTest's skip) with a
-- line below two GPUs or without MPI or NCCL.

local zl = require 'zlua'
local H = require 'harness'
local check, check_close = H.check, H.check_close

local n, why = zl.cuda.device_count()
if n < 2 then H.skip('the two-rank nccl ZeRO test needs 2 visible CUDA devices; found ' .. n .. (why and (': ' .. why) or '')) end
for _, backend in ipairs { 'mpi', 'nccl' } do
  local missing = zl.core.comm_unavailable(backend)
  if missing then H.skip(missing) end
end

local worker = H.source_dir .. '/tests/gpu/zero_nccl_worker.lua'

local function run(mode)
  local env = mode == 'cpu' and 'ZLUA_ACCELERATOR=cpu ' or ''
  local p = io.popen(env .. H.quote(H.exe) .. ' --nprocs 2 ' .. H.quote(worker) .. ' ' .. mode .. ' 2>&1')
  local text = p:read('a')
  local ok = p:close()
  check(ok, mode .. ' run: ' .. text)
  local rows = {}
  for stage, device, rest in text:gmatch('stage (%d) (%S+) ([^\n]+)') do
    local v = {}
    for x in rest:gmatch('%S+') do v[#v + 1] = tonumber(x) end
    rows[tonumber(stage)] = { device = device, losses = v }
  end
  return rows
end

local cpu, gpu = run('cpu'), run('nccl')
for stage = 0, 3 do
  check(cpu[stage] and gpu[stage], 'stage ' .. stage .. ' ran on both')
  if cpu[stage] and gpu[stage] then
    check(gpu[stage].device == 'cuda:0' and cpu[stage].device == 'cpu', 'rank 0 trained on cuda:0 / the CPU')
    check_close(gpu[stage].losses, cpu[stage].losses, 1e-5, 'stage ' .. stage)
  end
end
H.done()
