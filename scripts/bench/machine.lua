--[[ What the benchmarks print beside their figures, which are only comparable
  on the same processor: its model name and the vector and matrix extensions
  zlua's kernels look for; and how they run a worker process and read its
  figures. dofile'd by the benchmarks beside it. ]]

local M = {}

local function cpuinfo()
  local f = io.open('/proc/cpuinfo')
  if not f then return '' end
  local s = f:read('a')
  f:close()
  return s
end

--- M.cpu_model() -> the first processor's model name, or 'unknown CPU'.
function M.cpu_model()
  return cpuinfo():match('model name%s*:%s*([^\n]-)%s*\n') or 'unknown CPU'
end

--- M.cpu_flags() -> those of avx2, avx512f, avx512_bf16 and amx_bf16 it has, space-separated.
function M.cpu_flags()
  local s = cpuinfo():match('flags%s*:%s*([^\n]*)') or ''
  local have = {}
  for _, k in ipairs({ 'avx2', 'avx512f', 'avx512_bf16', 'amx_bf16' }) do
    if s:find('%f[%w_]' .. k .. '%f[^%w_]') then have[#have + 1] = k end
  end
  return table.concat(have, ' ')
end

--- M.ENV: the prefix every side of a comparison runs under. A machine's
--- environment may pin OpenBLAS to another processor's kernels
--- (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE: one pinned a Zen 5 to Haswell's,
--- which ran zlua's f32 LLaMA step 30% slower); without them each library
--- picks its kernels for the processor it runs on, as on a user's machine.
M.ENV = 'env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE'

--- M.blas(exe) -> what zlua runs its GEMMs with under M.ENV, as `zlua -v`
--- names it ('OpenBLAS 0.3.21 Cooperlake'), or 'OpenBLAS (unknown)'.
function M.blas(exe)
  local p = io.popen(M.ENV .. ' ' .. exe .. ' -v 2>&1')
  local v = p:read('a')
  p:close()
  return v:match('(OpenBLAS [^)]*)') or 'OpenBLAS (unknown)'
end

--- M.run(cmd, parse) -> what parse(output) returns when it finds the
--- figures there, else nil, why, and whether the command skipped (a SKIP
--- line, or exit status 77).
function M.run(cmd, parse)
  local p = io.popen(cmd .. ' 2>&1')
  local out = p:read('a')
  local _, _, code = p:close()
  local r = parse(out)
  if r then return r end
  local skip = out:match('SKIP ([^\n]*)')
  if skip or code == 77 then return nil, skip or 'skipped', true end
  -- The first lines of a failure name it; a traceback's last line does not.
  local head = {}
  for l in out:gmatch('[^\n]+') do if #head < 4 then head[#head + 1] = l end end
  return nil, (#head > 0 and table.concat(head, ' | ') or 'no output') .. string.format(' (exit %s)', tostring(code))
end

return M
