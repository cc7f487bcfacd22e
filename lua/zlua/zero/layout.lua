--[[ zlua.zero.layout: where each element of each trained parameter lives
  when its f32 master, optimizer moments and gradient are split over P
  partitions. Every parameter is cut the same way in every stage: into P
  chunks of k elements (k = ceil(numel / P) rounded up to ALIGN, the last
  chunk zero-padded); partition q holds chunk q of every parameter, one after
  another. Stage 0 is P = 1 (every rank holds everything), stages 1-3 are
  P = world size (rank q holds chunk q).

  Why this cut: an element sits at the same position modulo ALIGN in every
  stage and every chunk length is a multiple of ALIGN, so the fused optimizer
  kernels run the same vector instructions on it whatever the stage: the
  stages give bit-identical results. It is also what stage 3 gathers: one
  parameter's P chunks in rank order are the parameter itself. ]]

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

--- M.new(params, P, q) -> {P=, q=, size=, entries={...}}: params is the list of
--- {tensor=, numel=, shape=, group=} in optimizer order; each entry gains
--- k (chunk length), off (0-based offset in the partition), lo and own (the
--- real elements of chunk q).
function M.new(params, P, q)
  local L = { P = P, q = q, entries = {} }
  local off = 0
  for i, prm in ipairs(params) do
    local k = M.chunk(prm.numel, P)
    local lo, own = M.owned(prm.numel, k, q)
    L.entries[i] = { index = i, p = prm.tensor, n = prm.numel, shape = prm.shape, group = prm.group,
      name = prm.name, k = k, off = off, lo = lo, own = own }
    off = off + k
  end
  L.size = off
  return L
end

return M
