--[[ zlua.print: a tensor as text, in the manner of Torch7.

  One format is shared by every element shown: integers without decimals; else
  four decimals, with a common scale line ("1e-03 *") when every magnitude is
  very small or very large, or exponent notation when magnitudes span more than
  five decades. Columns are right-aligned and wrapped to the line width under
  "Columns a to b" headers; a 1-d tensor prints as a column; tensors of more
  than two dims print as 2-d slices headed "(i,.,.) =". Large tensors show their
  first and last `edgeitems` rows and columns around "...". A footer names the
  dtype, the shape and the device:

    1e-03 *
    1.0000  2.5000
    [zlua.Tensor f32 of size 1x2 on cpu]
]]

local core = require 'zlua.core'

local fmt, floor, abs, huge = string.format, math.floor, math.abs, math.huge
local concat = table.concat

local M = {}

local options = { threshold = 1000, edgeitems = 3, linewidth = 80 }

--- set_options{threshold =, edgeitems =, linewidth =}: threshold is the element
--- count above which a tensor is summarised.
function M.set_options(o)
  for k, v in pairs(o) do
    if options[k] == nil then error(fmt("set_printoptions: unknown option '%s'", tostring(k)), 2) end
    if math.type(v) ~= 'integer' or v < 1 then
      error(fmt('set_printoptions: %s must be a positive integer, got %s', k, tostring(v)), 2)
    end
    options[k] = v
  end
end

local function footer(t, shape)
  local size = #shape == 0 and 'scalar' or 'of size ' .. concat(shape, 'x')
  local s = fmt('[zlua.Tensor %s %s on %s]', core.dtype(t), size, core.device(t))
  if core.device(t) ~= 'cpu' then return s end   -- autograd does not reach device tensors yet
  local fn = core.grad_fn(t)
  if fn then return s .. ' grad_fn=<' .. fn .. '>' end
  if core.requires_grad(t) then return s .. ' (requires_grad)' end
  return s
end

-- The indices shown along a dim of size n: all of them, or the edges around
-- a `false` that stands for the elided middle.
local function shown(n, summarise)
  local e, list = options.edgeitems, {}
  if summarise and n > 2 * e then
    for i = 1, e do list[#list + 1] = i end
    list[#list + 1] = false
    for i = n - e + 1, n do list[#list + 1] = i end
  else
    for i = 1, n do list[i] = i end
  end
  return list
end

local function special(v)
  if v ~= v then return 'nan' end
  if v == huge then return 'inf' end
  if v == -huge then return '-inf' end
end

local int_dtypes = { i32 = true, i64 = true, u8 = true }

-- The format every shown value shares: returns cell(v) -> string and the
-- scale line (or nil).
local function formatter(values, dtype)
  if dtype == 'bool' then
    return function(v) return v and 'true' or 'false' end
  end
  local ints, amax, amin = true, 0, huge
  for i = 1, #values do
    local v = values[i]
    if not special(v) then
      if v ~= floor(v) then ints = false end
      local a = abs(v)
      if a > amax then amax = a end
      if a > 0 and a < amin then amin = a end
    end
  end
  if ints and (int_dtypes[dtype] or amax < 1e9) then
    return function(v) return special(v) or fmt('%d', v) end
  end
  local emax = floor(math.log(amax, 10))
  local emin = amin < huge and floor(math.log(amin, 10)) or emax
  if ints or emax - emin >= 5 then
    return function(v) return special(v) or fmt('%.4e', v) end
  end
  if emax >= 5 or emax <= -2 then
    local scale = 10.0 ^ emax
    return function(v) return special(v) or fmt('%.4f', v / scale) end, fmt('%.0e *', scale)
  end
  return function(v) return special(v) or fmt('%.4f', v) end
end

local function scalar_text(v, dtype)
  if dtype == 'bool' then return tostring(v) end
  if special(v) then return special(v) end
  if v == floor(v) and (int_dtypes[dtype] or abs(v) < 1e9) then return fmt('%d', v) end
  local a = abs(v)
  if a ~= 0 and (a < 1e-3 or a >= 1e5) then return fmt('%.4e', v) end
  return fmt('%.4f', v)
end

local function pad(s, w) return string.rep(' ', w - #s) .. s end

--- tostring(t): the text of a tensor (also its __tostring).
function M.tostring(t)
  if core.is_released(t) then return '[zlua.Tensor (released)]' end
  local shape = core.shape(t)
  local nd, n, dtype = #shape, core.numel(t), core.dtype(t)
  if n == 0 then return footer(t, shape) end
  -- A device tensor's values are read from a host copy.
  local host = core.device(t) == 'cpu' and t or core.to_device(t, 'cpu')
  if nd == 0 then return scalar_text(core.item(host), dtype) .. '\n' .. footer(t, shape) end

  local summarise = n > options.threshold
  local idx, step = {}, {}
  for k = nd, 1, -1 do
    idx[k] = shown(shape[k], summarise)
    step[k] = k == nd and 1 or step[k + 1] * shape[k + 1]
  end

  -- Fetch every shown value once, keyed by its 0-based linear position.
  local value, values = {}, {}
  local function gather(k, base)
    for _, i in ipairs(idx[k]) do
      if i then
        local lin = base + (i - 1) * step[k]
        if k == nd then
          local v = core.get(host, lin)
          value[lin] = v
          values[#values + 1] = v
        else
          gather(k + 1, lin)
        end
      end
    end
  end
  gather(1, 0)

  local cell, scale_line = formatter(values, dtype)
  local w = summarise and 3 or 1
  for _, v in ipairs(values) do
    local len = #cell(v)
    if len > w then w = len end
  end

  local out = {}
  if scale_line then out[1] = scale_line end
  local function text(lin) return pad(cell(value[lin]), w) end

  if nd == 1 then
    for _, i in ipairs(idx[1]) do out[#out + 1] = i and text(i - 1) or pad('...', w) end
    out[#out + 1] = footer(t, shape)
    return concat(out, '\n')
  end

  local cols = idx[nd]
  local per_line = math.max(1, floor((options.linewidth + 2) / (w + 2)))
  local function matrix(lines, base)
    for c0 = 1, #cols, per_line do
      local c1 = math.min(c0 + per_line - 1, #cols)
      if #cols > per_line then
        if c0 > 1 then lines[#lines + 1] = '' end
        local first, last
        for c = c0, c1 do
          if cols[c] then first = first or cols[c]; last = cols[c] end
        end
        lines[#lines + 1] = not first and '...' or first == last and fmt('Column %d', first)
          or fmt('Columns %d to %d', first, last)
      end
      for _, r in ipairs(idx[nd - 1]) do
        if r then
          local row = {}
          for c = c0, c1 do
            local col = cols[c]
            row[#row + 1] = col and text(base + (r - 1) * step[nd - 1] + col - 1) or pad('...', w)
          end
          lines[#lines + 1] = concat(row, '  ')
        else
          lines[#lines + 1] = '...'
        end
      end
    end
  end

  if nd == 2 then
    matrix(out, 0)
  else
    -- 2-d slices over the leading dims, headed by their index: (i,j,.,.) =
    local head, blocks = {}, {}
    local function slices(k, base)
      for _, i in ipairs(idx[k]) do
        if not i then
          blocks[#blocks + 1] = '...'
        else
          head[k] = i
          if k == nd - 2 then
            local lines = { '(' .. concat(head, ',', 1, k) .. ',.,.) =' }
            matrix(lines, base + (i - 1) * step[k])
            blocks[#blocks + 1] = concat(lines, '\n')
          else
            slices(k + 1, base + (i - 1) * step[k])
          end
        end
      end
    end
    slices(1, 0)
    out[#out + 1] = concat(blocks, '\n\n')
  end
  out[#out + 1] = footer(t, shape)
  return concat(out, '\n')
end

return M
