--[[ What the benchmarks print beside their figures, which are only comparable
  on the same processor: its model name and the vector and matrix extensions
  zlua's kernels look for. dofile'd by the benchmarks beside it. ]]

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

return M
