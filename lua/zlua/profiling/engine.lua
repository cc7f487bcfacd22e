--[[ zlua.profiling.engine (internal): the config's flops_profiler section in
  the engine. With enabled, rank 0 profiles global step profile_step: every
  forward of that step (each micro-step's, under gradient accumulation) is
  counted by a FlopsProfiler, its forwards, backwards and step are timed, and
  once the step completes rank 0 prints the profile (stdout, or output_file)
  and ends it; other steps cost one comparison. engine.flops_profiler is the
  FlopsProfiler (nil when the section is off). ]]

local zl = require 'zlua'
local FlopsProfiler = require 'zlua.profiling.FlopsProfiler'

local core = zl.core

local M = {}

--- M.attach(engine, cfg): engine.flops_profiler's value for the checked config.
function M.attach(engine, cfg)
  local c = cfg.flops_profiler
  if not c.enabled then return nil end
  local prof = FlopsProfiler.new(engine.module, { recompute_fwd_factor = c.recompute_fwd_factor })
  prof.settings = { profile_step = c.profile_step, module_depth = c.module_depth, top_modules = c.top_modules,
    detailed = c.detailed, output_file = c.output_file }
  return prof
end

local function sync(engine)
  if engine.device ~= 'cpu' then zl.cuda.synchronize(tonumber(engine.device:match(':(%d+)$') or 0)) end
end

--- M.begin(engine, phase): at the start of the engine's forward, backward
--- or step; returns the start time when this phase is profiled, else nil.
function M.begin(engine, phase)
  local prof = engine.flops_profiler
  if not prof or engine.rank ~= 0 or engine.global_steps ~= prof.settings.profile_step then return nil end
  local st = prof.step_times
  if phase == 'forward' then
    if not st then
      st = { forward = 0, backward = 0, step = 0 }
      prof.step_times = st
      prof:start_profile()
    else
      prof:_patch()
    end
  elseif not st then
    return nil
  end
  sync(engine)
  return core.now()
end

--- M.finish(engine, phase, t0): at the end of that phase, with begin's value.
function M.finish(engine, phase, t0)
  if not t0 then return end
  local prof = engine.flops_profiler
  sync(engine)
  local st = prof.step_times
  st[phase] = st[phase] + (core.now() - t0)
  if phase == 'forward' then prof:stop_profile() end
  if phase ~= 'step' or engine.global_steps == prof.settings.profile_step then return end
  -- The profiled step is complete: print on rank 0 and drop the profile.
  prof.engine_figures = { world_size = engine.world_size, micro_batch_size = engine.micro_batch_size,
    gas = engine.gas, forward = st.forward, backward = st.backward, step = st.step,
    samples = engine.train_batch_size }
  local s = prof.settings
  if engine.report.progress then io.stdout:write('\r\27[K') end
  -- Named by global_steps after the step, as DeepSpeed's summary names it (profile_step + 1).
  local ok, err = pcall(prof._print, prof, { profile_step = engine.global_steps, module_depth = s.module_depth,
    top_modules = s.top_modules, detailed = s.detailed, output_file = s.output_file }, 'flops_profiler')
  prof:end_profile()
  prof.step_times, prof.engine_figures = nil, nil
  if not ok then error(err, 0) end
end

return M
