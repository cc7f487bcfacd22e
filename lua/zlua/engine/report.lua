--[[ zlua.engine.report: what the engine tells the user about its steps: the
  steps_per_print log line (step, skipped, lr, momentum, loss, and samples/s
  unless timers.throughput.enabled is false), a line for each fp16 step
  skipped on an overflow, the wall_clock_breakdown timers
  (forward, backward, step in ms), the monitors' events (train_loss, lr and
  loss_scale by samples) and, when a person watches, a one-line progress
  display; with memory_breakdown, the allocator's bytes by category before
  and after each forward, backward and step (DeepSpeed's see_memory_usage
  lines); with activation_checkpointing.profile, the checkpoints' forward
  and recompute time. Rank 0 only, as DeepSpeed logs. ]]

local zl = require 'zlua'
local core = zl.core
local fmt = string.format

local report = {}
local R = {}
R.__index = R

--- Whether a person watches: stdout and stderr are terminals here, or, for a
--- rank, where `zlua --nprocs` was started (it sets ZLUA_TERMINAL=1).
function report.terminal()
  return (core.isatty(1) and core.isatty(2)) or os.getenv('ZLUA_TERMINAL') == '1'
end

-- Seconds as 45s, 12m05s or 3h07m.
local function duration(s)
  s = math.floor(s + 0.5)
  if s < 60 then return fmt('%ds', s) end
  if s < 3600 then return fmt('%dm%02ds', s // 60, s % 60) end
  return fmt('%dh%02dm', s // 3600, s % 3600 // 60)
end

--- The progress line: step (of the total when known), loss, lr, samples/s
--- and, with a total, the time left at the pace since the first step shown.
function R:progress_line(loss, rate)
  local e, now = self.engine, core.now()
  if not self.shown_from then self.shown_from, self.shown_step = now, e.global_steps end
  local head = self.total and fmt('step %d/%d', e.global_steps, self.total) or fmt('step %d', e.global_steps)
  local eta = ''
  local done = e.global_steps - self.shown_step
  if self.total and done > 0 and e.global_steps < self.total then
    eta = '  eta ' .. duration((now - self.shown_from) / done * (self.total - e.global_steps))
  end
  return fmt('\r\27[K%s  loss %.4g  lr %.3g%s%s\r', head, loss, e:get_lr()[1],
    self.throughput and fmt('  %.1f samples/s', rate) or '', eta)
end

function report.new(engine, cfg)
  local self = setmetatable({}, R)
  self.engine = engine
  self.every = cfg.steps_per_print
  self.breakdown = cfg.wall_clock_breakdown
  self.fp16 = cfg.fp16.enabled
  -- DeepSpeed's throughput timer (timers.throughput.enabled): samples/s in the lines.
  self.throughput = cfg.timers.throughput.enabled
  self.memory_breakdown = cfg.memory_breakdown
  self.quiet = engine.rank ~= 0
  self:show_progress(true)
  -- The run's length for the progress line's total and time left: the
  -- script's (engine:set_progress), else the schedule's.
  local sched = cfg.scheduler and cfg.scheduler.params
  self.total = sched and math.tointeger(sched.total_num_steps)
  if self.total and self.total <= 0 then self.total = nil end
  self.timers = { forward = 0, backward = 0, step = 0 }
  self.window_start, self.window_samples = core.now(), 0
  self.last_applied = false
  return self
end

--- The progress line on or off: drawn only when a person watches (stdout
--- and stderr are terminals) and ZLUA_NO_PROGRESS is unset. watched says so
--- on every rank, and rank 0 draws it.
function R:show_progress(on)
  self.watched = on and report.terminal() and os.getenv('ZLUA_NO_PROGRESS') == nil
  self.progress = self.watched and not self.quiet
end

--- A line on stdout from rank 0 (the script's or the engine's), above the
--- progress line. The progress line is drawn on stdout too: at several ranks
--- stdout and stderr reach the terminal through separate pipes of mpirun,
--- and a line on one could land in the middle of a redraw on the other.
function R:print(line)
  if self.quiet then return end
  io.stdout:write(self.progress and '\r\27[K' or '', line, '\n')
end

function R:add(name, seconds) self.timers[name] = self.timers[name] + seconds end

local CATEGORIES = { 'params', 'grads', 'optimizer', 'activations', 'comm', 'other' }

--- With memory_breakdown: one line of the allocator's bytes now and at the
--- peak since the last line, which this line restarts (as DeepSpeed resets
--- its peak statistics).
function R:memory(label)
  if not self.memory_breakdown or self.quiet then return end
  local m = zl.memory()
  local now, peak, parts = 0, 0, {}
  for i, c in ipairs(CATEGORIES) do
    now, peak = now + m[c].current, peak + m[c].peak
    parts[i] = fmt('%s %.2f', c, m[c].current / 2 ^ 20)
  end
  self:print(fmt('[Rank 0] %s: allocated %.2f MB (%s), peak %.2f MB', label, now / 2 ^ 20,
    table.concat(parts, ', '), peak / 2 ^ 20))
  zl.reset_peak_memory()
end

local function list(xs, f)
  local out = {}
  for i, x in ipairs(xs) do out[i] = f(x) end
  return '[' .. table.concat(out, ', ') .. ']'
end

local function mom_str(m)
  if type(m) == 'table' then return fmt('(%g, %g)', m[1], m[2]) end
  return fmt('%g', m or 0)
end

--- An fp16 step skipped for an inf or NaN gradient: DeepSpeed's line for it.
function R:overflow(tried, now)
  self:print(fmt('[Rank 0] OVERFLOW! Skipping step. Attempted loss scale: %.17g, %s', tried,
    now < tried and fmt('reducing to %.17g', now) or 'kept (hysteresis)'))
end

function R:step_done(loss, overflow)
  local e = self.engine
  self.last_applied = not overflow
  self.window_samples = self.window_samples + e.train_batch_size
  if self.quiet then return end
  local events = { { 'Train/Samples/train_loss', loss, e.global_samples },
                   { 'Train/Samples/lr', e:get_lr()[1], e.global_samples } }
  if self.fp16 then events[#events + 1] = { 'Train/Samples/loss_scale', e:loss_scale(), e.global_samples } end
  if e.monitor.enabled then e.monitor:write_events(events) end
  local now = core.now()
  local rate = self.window_samples / math.max(now - self.window_start, 1e-9)
  if self.progress then
    io.stdout:write(self:progress_line(loss, rate))
    io.stdout:flush()
  end
  if self.every and e.global_steps % self.every == 0 then
    local line = fmt('[Rank 0] step=%d, skipped=%d, lr=%s, mom=%s, loss=%.6g%s', e.global_steps,
      e.skipped_steps, list(e:get_lr(), function(x) return fmt('%g', x) end), list(e:get_mom(), mom_str), loss,
      self.throughput and fmt(', samples/s=%.2f', rate) or '')
    if self.fp16 then line = line .. fmt(', loss_scale=%g', e:loss_scale()) end
    self:print(line)
    if self.breakdown then
      local t = self.timers
      self:print(fmt('[Rank 0] time (ms) | forward: %.2f | backward: %.2f | step: %.2f', t.forward * 1e3,
        t.backward * 1e3, t.step * 1e3))
    end
    -- activation_checkpointing.profile: DeepSpeed times the checkpoints' forward and recompute
    local ac = require('zlua.activation_checkpointing').stats()
    if ac then
      self:print(fmt('[Rank 0] activation checkpointing: %d checkpoints | forward: %.2f ms | recompute: %.2f ms',
        ac.checkpoints, ac.forward * 1e3, ac.recompute * 1e3))
    end
    io.stdout:flush()
    self.window_start, self.window_samples = now, 0
  end
  if self.breakdown then self.timers = { forward = 0, backward = 0, step = 0 } end
end

return report
