--[[ zlua.zero.layout: the chunk arithmetic of engine/zero (ZL_ZERO_ALIGN in
  zlua/zero.h): every parameter is cut into P chunks of k elements (k =
  ceil(numel / P) rounded up to ALIGN, the last chunk zero-padded), chunk q
  on rank q. Checkpoints record it, and loading uses it to find each element
  in the files written at another world size or stage. ]]

local M = {}

--- Elements per SIMD group of the optimizer kernels (AVX-512: 16 f32).
M.ALIGN = 16

local function round_up(x, a) return (x + a - 1) // a * a end

--- The chunk length of a parameter of n elements cut into P partitions.
function M.chunk(n, P) return round_up((n + P - 1) // P, M.ALIGN) end

--- The part of chunk q that holds real elements: first element (0-based) and
--- count (0 for a chunk made only of padding).
function M.owned(n, k, q)
  local lo = q * k
  if lo >= n then return lo, 0 end
  return lo, math.min(k, n - lo)
end

return M
