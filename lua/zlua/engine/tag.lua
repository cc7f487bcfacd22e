--[[ zlua.engine.tag: the checkpoint tag every rank saves under, and DeepSpeed's
  checkpoint.tag_validation. Before a save the ranks compare their tags; a tag
  that differs is reported as the config says: "Warn" (the default) a warning
  on rank 0, "Fail" the same error on every rank before anything is written,
  "Ignore" nothing. zlua's save is one folder the ranks write together, so it
  always goes under rank 0's tag (DeepSpeed's would scatter the ranks' files
  over several folders, none of them loadable). ]]

local zl = require 'zlua'
local wire = require 'zlua.engine.wire'

local fmt = string.format

local M = {}

--- Where the "Warn" line goes; a test may catch it here.
function M.warn(line) io.stderr:write(line, '\n') end

-- FNV-1a over the tag's bytes: ranks with equal tags agree on it (DeepSpeed
-- compares SHA-1 digests the same way).
local function hash(s)
  local h = -3750763034362895579
  for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end
  return h
end

-- Rank 0's tag (n bytes) on every rank.
local function rank0_tag(engine, tag, n)
  if n == 0 then return '' end
  local bytes = {}
  for i = 1, n do bytes[i] = engine.rank == 0 and tag:byte(i) or 0 end
  local got = engine.dist.broadcast(zl.tensor(bytes, 'i32'), 0):totable()
  for i = 1, n do got[i] = string.char(math.tointeger(got[i])) end
  return table.concat(got)
end

--- The tag the save goes under: rank 0's, once the ranks have compared theirs
--- (collective; every rank calls it with its own tag).
function M.agree(engine, tag)
  local mode = engine.config.checkpoint.tag_validation
  if engine.world_size == 1 then return tag end
  local is_string = type(tag) == 'string'
  local rows = wire.all_gather(engine.dist, engine.world_size,
    { is_string and 1 or 0, is_string and #tag or 0, is_string and hash(tag) or 0 })
  for r, row in ipairs(rows) do
    if row[1] == 0 then
      zl.raise(fmt('save_checkpoint: the tag must be a string on every rank; rank %d gave a %s', r - 1,
        r - 1 == engine.rank and type(tag) or 'value of another type'))
    end
  end
  local differ = {}
  for r = 2, #rows do
    if rows[r][2] ~= rows[1][2] or rows[r][3] ~= rows[1][3] then differ[#differ + 1] = tostring(r - 1) end
  end
  if #differ == 0 then return tag end
  local agreed = rank0_tag(engine, tag, rows[1][2])
  local what = fmt('the checkpoint tag is not the same on every rank (rank 0: %q; different on rank%s %s)', agreed,
    #differ > 1 and 's' or '', table.concat(differ, ', '))
  if mode == 'FAIL' then
    zl.raise(fmt('save_checkpoint: %s: nothing saved, as checkpoint.tag_validation is "Fail" (a tag with '
      .. 'rank-specific parts cannot be resumed at another world size)', what))
  end
  if mode == 'WARN' and engine.rank == 0 then
    M.warn(fmt('zlua: save_checkpoint: warning: %s: saved under rank 0\'s tag (checkpoint.tag_validation = '
      .. '"Warn"; "Fail" refuses, "Ignore" says nothing)', what))
  end
  return agreed
end

return M
