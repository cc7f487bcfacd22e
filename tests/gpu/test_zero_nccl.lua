-- ZeRO stages 0-3 over nccl on two GPUs (two ranks sharing the NCCL id
-- through a file, as zlua's launcher would start them, the model on
-- cuda:<local rank>, each rank on half the batch) against one rank in host
-- memory on the whole batch: the losses over the whole batch agree to 1e-5
-- in f32. Exits 77 (CTest's skip) with a line below two GPUs or without NCCL.

local zl = require 'zlua'
local H = require 'harness'
local check, check_close = H.check, H.check_close

local n, why = zl.cuda.device_count()
if n < 2 then
  H.skip('the two-rank nccl ZeRO test needs 2 visible CUDA devices; found ' .. n .. (why and (': ' .. why) or ''))
end
local missing = zl.core.comm_unavailable('nccl')
if missing then H.skip(missing) end

local worker = H.source_dir .. '/tests/gpu/zero_nccl_worker.lua'
local TMP = os.tmpname()
os.remove(TMP)
zl.core.mkdirs(TMP)

local function parse(text)
  local rows = {}
  for stage, device, rest in text:gmatch('stage (%d) (%S+) ([^\n]+)') do
    local v = {}
    for x in rest:gmatch('%S+') do v[#v + 1] = tonumber(x) end
    rows[tonumber(stage)] = { device = device, losses = v }
  end
  return rows
end

local function slurp(path)
  local f = io.open(path)
  local s = f and f:read('a') or ''
  if f then f:close() end
  return s
end

-- One rank in host memory.
local p = io.popen('ZLUA_ACCELERATOR=cpu ' .. H.quote(H.exe) .. ' ' .. H.quote(worker) .. ' cpu 2>&1')
local cpu_text = p:read('a')
check(p:close(), 'the host run: ' .. cpu_text)

-- Two ranks over nccl, started together.
local cmd = {}
for r = 0, 1 do
  cmd[#cmd + 1] = string.format('RANK=%d WORLD_SIZE=2 LOCAL_RANK=%d ZLUA_NCCL_ID_FILE=%s timeout 300 %s %s nccl > %s '
    .. '2>&1 & p%d=$!;', r, r, H.quote(TMP .. '/id'), H.quote(H.exe), H.quote(worker), H.quote(TMP .. '/rank' .. r), r)
end
local ok = os.execute(table.concat(cmd, ' ') .. ' wait $p0; a=$?; wait $p1; b=$?; [ $a = 0 ] && [ $b = 0 ]')
local gpu_text = slurp(TMP .. '/rank0')
check(ok, 'the two nccl ranks: ' .. gpu_text .. slurp(TMP .. '/rank1'))

local cpu, gpu = parse(cpu_text), parse(gpu_text)
for stage = 0, 3 do
  check(cpu[stage] and gpu[stage], 'stage ' .. stage .. ' ran on both')
  if cpu[stage] and gpu[stage] then
    check(gpu[stage].device == 'cuda:0' and cpu[stage].device == 'cpu', 'rank 0 trained on cuda:0, the host run on the CPU')
    check_close(gpu[stage].losses, cpu[stage].losses, 1e-5, 'stage ' .. stage)
  end
end
os.execute('rm -rf ' .. H.quote(TMP))
H.done()
