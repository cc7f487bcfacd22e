--[[ zlua.optim.checks: validation of hyperparameter values shared by the
  optimizers; each raises an error naming the optimizer, the key and the value.
  Private to zlua.optim. ]]

local zl = require 'zlua'
local fmt = string.format

local checks = {}

local function finite(v) return type(v) == 'number' and v == v and v ~= math.huge and v ~= -math.huge end

local function bad(where, key, v, what)
  zl.raise(fmt('%s: %s must be %s, got %s', where, key, what, type(v) == 'string' and fmt('%q', v) or tostring(v)))
end

function checks.nonneg(where, key, v)
  if not finite(v) or v < 0 then bad(where, key, v, 'a finite number >= 0') end
end

function checks.boolean(where, key, v)
  if type(v) ~= 'boolean' then bad(where, key, v, 'true or false') end
end

function checks.betas(where, key, v)
  if type(v) ~= 'table' or #v ~= 2 or not finite(v[1]) or not finite(v[2])
      or v[1] < 0 or v[1] >= 1 or v[2] < 0 or v[2] >= 1 then
    local s = type(v) == 'table' and ('{' .. table.concat((function()
      local t = {}
      for i, x in ipairs(v) do t[i] = tostring(x) end
      return t
    end)(), ', ') .. '}') or tostring(v)
    zl.raise(fmt('%s: %s must be a pair {beta1, beta2}, each in [0, 1), got %s', where, key, s))
  end
end

function checks.finite(where, key, v)
  if not finite(v) then bad(where, key, v, 'a finite number') end
end

return checks
