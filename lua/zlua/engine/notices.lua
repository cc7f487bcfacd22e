--[[ zlua.engine.notices: the start-up lines for config keys zlua accepts but
  has no use for (zlua.config puts them in cfg.notices, each naming the key
  and why). Rank 0 prints each line once per process, however many engines
  it builds. ]]

local M = {}

local said = {}

--- Where the lines go; a test may catch them here.
function M.write(line) io.stderr:write(line, '\n') end

function M.say(cfg, rank)
  if rank ~= 0 then return end
  for _, line in ipairs(cfg.notices or {}) do
    if not said[line] then
      said[line] = true
      M.write('zlua: note: ' .. line)
    end
  end
end

return M
