-- zlua.tokenizer.heap: a binary min-heap of (a, b) number pairs, ordered by a then b, for
-- the merge queues of BPE encoding (rank, position) and training (-count, pair).

local M = {}

--- heap.new() -> an empty heap.
function M.new() return { n = 0, a = {}, b = {} } end

local function below(h, i, j)
  local ai, aj = h.a[i], h.a[j]
  return ai < aj or (ai == aj and h.b[i] < h.b[j])
end

local function swap(h, i, j)
  h.a[i], h.a[j] = h.a[j], h.a[i]
  h.b[i], h.b[j] = h.b[j], h.b[i]
end

--- heap.push(h, a, b)
function M.push(h, a, b)
  h.n = h.n + 1
  local i = h.n
  h.a[i], h.b[i] = a, b
  while i > 1 and below(h, i, i // 2) do
    swap(h, i, i // 2)
    i = i // 2
  end
end

--- heap.pop(h) -> the smallest a, b; nothing when h is empty.
function M.pop(h)
  if h.n == 0 then return end
  local a, b = h.a[1], h.b[1]
  swap(h, 1, h.n)
  h.a[h.n], h.b[h.n] = nil, nil
  h.n = h.n - 1
  local i = 1
  while true do
    local l, r, top = 2 * i, 2 * i + 1, i
    if l <= h.n and below(h, l, top) then top = l end
    if r <= h.n and below(h, r, top) then top = r end
    if top == i then break end
    swap(h, i, top)
    i = top
  end
  return a, b
end

return M
