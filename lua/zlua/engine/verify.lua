--[[ zlua.engine.verify: what a checkpoint must be in the parts that are the
  script's, checked before anything is written (a save refuses what could
  not be loaded back) and before anything is changed (a load refuses a
  folder it could not take whole). The engine checks its own parts, the
  folder and every file (zl_zero_ckpt_open, zlua/zero.h). Every error names
  the file and the key at fault.

    verify.client_state(v)              what engine.json can hold and give back
    verify.check_members(state, file)   engine.json's members that are the script's:
                                        client_state, lr_scheduler, loss_scaler, dataloader ]]

local zl = require 'zlua'
local json = require 'zlua.json'

local fmt, mtype = string.format, math.type

local M = {}

-- engine.json's format, which the engine writes; the model's file says it too.
M.FORMAT = 'zlua-checkpoint-2'
-- Largest values a count in engine.json may take: beyond them a product
-- (samples = batches x ranks x batch) could overflow.
local COUNT_MAX = 1 << 53

-- s for a message: control bytes as \xNN, other bytes too when s is not UTF-8, cut at 60.
local function show(s)
  if type(s) ~= 'string' then return tostring(s) end
  local cut = #s > 60
  s = s:sub(1, 60)
  s = s:gsub(utf8.len(s) and '%c' or '[%c\128-\255]', function(c) return fmt('\\x%02X', c:byte()) end)
  return '"' .. s .. (cut and '..."' or '"')
end
M.show = show

--- verify.client_state(v): raises naming the first entry engine.json could not
--- hold or give back as it was (a mixed table, NaN, a function, bytes that are
--- not UTF-8, nesting deeper than json.decode reads).
function M.client_state(v)
  -- engine.json's object is one level, client_state the next.
  local max_depth = json.MAX_DEPTH - 1
  local function walk(x, path, depth)
    local t = type(x)
    if t == 'table' then
      if depth > max_depth then
        zl.raise(fmt('save_checkpoint: %s nests tables %d deep; client_state holds at most %d levels '
          .. '(engine.json would not load)', path, depth, max_depth))
      end
      local strings, ints = false, false
      for k, y in pairs(x) do
        if type(k) == 'string' then
          strings = true
          if not utf8.len(k) then
            zl.raise(fmt('save_checkpoint: %s has the key %s, which is not valid UTF-8 (JSON text must be)', path, show(k)))
          end
        elseif mtype(k) == 'integer' and k >= 1 and k <= #x then ints = true
        else zl.raise(fmt('save_checkpoint: %s has the key %s; client_state tables are arrays or have string keys', path, tostring(k))) end
        walk(y, path .. (type(k) == 'string' and '.' .. k or '[' .. k .. ']'), depth + 1)
      end
      if strings and ints then
        zl.raise(fmt('save_checkpoint: %s mixes array entries and string keys (JSON has no such table)', path))
      end
    elseif t == 'number' and (x ~= x or x == math.huge or x == -math.huge) then
      zl.raise(fmt('save_checkpoint: %s is %s, which JSON cannot hold', path, tostring(x)))
    elseif t == 'string' then
      if not utf8.len(x) then
        zl.raise(fmt('save_checkpoint: %s is %s, which is not valid UTF-8 (JSON text must be; save bytes in a tensor)',
          path, show(x)))
      end
    elseif t ~= 'number' and t ~= 'boolean' then
      zl.raise(fmt('save_checkpoint: %s is a %s; client_state holds only tables, strings, numbers and booleans '
        .. '(save tensors in the model)', path, zl.is_tensor(x) and 'tensor' or t))
    end
  end
  walk(v, 'client_state', 1)
end

-- Checks on engine.json's fields: each raises "load_checkpoint: <file>: <key> ...".
local Check = {}
Check.__index = Check

function Check:fail(key, msg, ...)
  zl.raise(fmt('load_checkpoint: %s: %s ' .. msg, self.file, key, ...))
end

-- A JSON object (array false) or list (array true): json.decode marks lists with json.array.
function Check:table(key, v, array)
  if type(v) ~= 'table' or v == json.null then self:fail(key, 'must be %s, got %s', array and 'a list' or 'an object',
    v == json.null and 'null' or type(v)) end
  local list = getmetatable(v) == json.array
  if array and not list then self:fail(key, 'must be a list, got an object') end
  if not array and list then self:fail(key, 'must be an object, got a list') end
  return v
end

function Check:int(key, v, lo, hi)
  if mtype(v) ~= 'integer' then self:fail(key, 'must be an integer, got %s', v == json.null and 'null'
    or type(v) == 'number' and tostring(v) or type(v)) end
  if (lo and v < lo) or (hi and v > hi) then
    self:fail(key, 'is %d, outside %s..%s', v, lo and tostring(lo) or '', hi and tostring(hi) or '')
  end
  return v
end

--- verify.check_members(state, file): engine.json's decoded value (the engine
--- has checked its own fields), the script's members checked as their loaders
--- check them, so that none refuses after the weights were changed.
function M.check_members(state, file)
  local c = setmetatable({ file = file }, Check)
  if state.client_state ~= nil then c:table('client_state', state.client_state) end
  if state.lr_scheduler ~= nil then
    c:table('lr_scheduler', state.lr_scheduler)
    c:int('lr_scheduler.last_batch_iteration', state.lr_scheduler.last_batch_iteration, -1)
  end
  local ls = state.loss_scaler
  if ls ~= nil then
    c:table('loss_scaler', ls)
    if type(ls.cur_scale) ~= 'number' or not (ls.cur_scale > 0 and ls.cur_scale < math.huge) then
      c:fail('loss_scaler.cur_scale', 'must be a finite number > 0, got %s', tostring(ls.cur_scale))
    end
    local it = c:int('loss_scaler.cur_iter', ls.cur_iter, 0)
    c:int('loss_scaler.last_overflow_iter', ls.last_overflow_iter, -1, it - 1)
    c:int('loss_scaler.cur_hysteresis', ls.cur_hysteresis, 1, (1 << 31) - 1)
  end
  local dl = state.dataloader
  if dl ~= nil then
    c:table('dataloader', dl)
    if dl.epoch ~= nil then c:int('dataloader.epoch', dl.epoch, 0, COUNT_MAX) end
    c:int('dataloader.batches', dl.batches or 0, 0, COUNT_MAX)
    c:int('dataloader.world_size', dl.world_size, 1, 1 << 24)
    local mb = c:int('dataloader.micro_batch_size', dl.micro_batch_size, 1, COUNT_MAX)
    if (dl.batches or 0) > COUNT_MAX // dl.world_size // mb then
      c:fail('dataloader.batches', 'is %d: with %d ranks of %d samples, more samples than can be counted',
        dl.batches, dl.world_size, mb)
    end
  end
  return state
end

return M
