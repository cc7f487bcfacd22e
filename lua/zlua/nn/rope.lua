--[[ zlua.nn.rope: the cos and sin tables of rotary position embeddings as
  Hugging Face's default rope builds them (inverse frequencies
  theta^(-2i/D) and angles rounded to f32, as its f32 arithmetic rounds
  them), grown on demand and read by position. Private to zlua.nn. ]]

local zl = require 'zlua'

local M = {}
local Rope = {}
Rope.__index = Rope

local function f32(x) return (string.unpack('f', string.pack('f', x))) end

--- rope.new(dim, theta): tables for heads of dim (even) values.
function M.new(dim, theta)
  local inv = {}
  for i = 0, dim // 2 - 1 do inv[i + 1] = f32(1 / f32(f32(theta) ^ f32(2 * i / dim))) end
  return setmetatable({ dim = dim, inv = inv, len = 0, placed = {} }, Rope)
end

-- The tables cover positions 0..n-1 at least; they double as they grow, so
-- a generation that adds one position a step rebuilds them rarely.
function Rope:grow(n)
  if n <= self.len then return end
  local len = math.max(n, 2 * self.len, 64)
  local h = self.dim // 2
  local c, s = {}, {}
  for p = 0, len - 1 do
    local rc, rs = {}, {}
    for i = 1, h do
      local a = f32(p * self.inv[i])
      rc[i], rs[i] = math.cos(a), math.sin(a)
      rc[i + h], rs[i + h] = rc[i], rs[i]
    end
    c[p + 1], s[p + 1] = rc, rs
  end
  self.cos, self.sin, self.len, self.placed = zl.tensor(c), zl.tensor(s), len, {}
end

-- The tables on device in dtype (Hugging Face rounds them to the
-- activations' dtype before rotating), kept until the tables grow.
function Rope:on(device, dtype)
  local key = device .. '/' .. dtype
  local p = self.placed[key]
  if not p then
    p = { self.cos:to(device, dtype), self.sin:to(device, dtype) }
    self.placed[key] = p
  end
  return p[1], p[2]
end

--- rope:tables(pos, t, device, dtype) -> cos, sin for t positions: pos is
--- the first position (every row alike; [1, 1, t, dim]) or an i64 tensor
--- [B, t] of positions ([B, 1, t, dim]).
function Rope:tables(pos, t, device, dtype)
  if math.type(pos) == 'integer' then
    self:grow(pos + t)
    local c, s = self:on(device, dtype)
    return c:narrow(1, pos + 1, t):view(1, 1, t, self.dim), s:narrow(1, pos + 1, t):view(1, 1, t, self.dim)
  end
  local b = pos:size(1)
  local flat = pos:reshape(b * t)
  self:grow(flat:max():item() + 1)
  local c, s = self:on(device, dtype)
  flat = flat:to(device)
  return c:index_select(1, flat):view(b, 1, t, self.dim), s:index_select(1, flat):view(b, 1, t, self.dim)
end

return M
