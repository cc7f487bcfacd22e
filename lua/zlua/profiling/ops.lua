--[[ zlua.profiling.ops (internal to zlua.profiling): the ops the FLOPS
  profiler counts and their counting rules, which are DeepSpeed's, and the
  swapping of the zl functions and tensor methods for counting wrappers while
  a profile runs.

  Design: DeepSpeed patches torch.nn.functional and a few tensor methods for
  the duration of a profile; here the same names are swapped in the `zl`
  table and in zl.Tensor (the methods table every tensor's __index reads at
  call time), so modules that call zl.linear(...) or x:matmul(...) reach a
  wrapper without knowing it. The wrapper runs the op first and counts after,
  so a call the op refuses raises its own error and counts nothing. The
  operators (+ - * / on tensors) are not swapped: DeepSpeed does not count
  Python's operators either, only torch.add/mul and Tensor.add/mul. ]]

local zl = require 'zlua'
local zero = require 'zlua.zero'

local M = {}

local methods = zl.Tensor
local is_tensor = zl.is_tensor

local function numel(t) return is_tensor(t) and t:numel() or 1 end

-- A weight's shape whole, also where ZeRO-3 holds only this rank's chunk of it.
local function whole_shape(w) return zero.shape(w) end

-- Each rule: (out, args...) -> flops, macs. GEMM-like ops count a
-- multiply-accumulate as two FLOPs; the rest count DeepSpeed's per-element estimates.
local function gemm(macs) return 2 * macs, macs end

local function per_element(_, x) return numel(x), 0 end

local rules = {}

-- linear: x [..., in] . w[out, in]^T; DeepSpeed leaves the bias out.
rules.linear = function(_, x, w)
  return gemm(numel(x) * whole_shape(w)[1])
end

-- matmul: every element of a meets a column of b: numel(a) * b's last size.
rules.matmul = function(_, a, b)
  return gemm(numel(a) * b:size(-1))
end

-- attention: q k^T over all Tq x Tk pairs, then the weights times v, causal or
-- not (DeepSpeed counts scaled_dot_product_attention whole).
rules.attention = function(_, q, k, v)
  local tk = k:size(-2)
  return gemm(numel(q) * tk + (numel(q) // q:size(-1)) * tk * v:size(-1))
end

-- conv2d: each output element is a dot product over (C / groups) * kh * kw
-- inputs; the bias adds one FLOP per output element.
rules.conv2d = function(out, _, w, b)
  local s = whole_shape(w)
  local macs = numel(out) * s[2] * s[3] * s[4]
  return 2 * macs + (b and numel(out) or 0), macs
end

rules.relu, rules.leaky_relu, rules.silu, rules.gelu = per_element, per_element, per_element, per_element
rules.softmax = per_element
rules.max_pool2d, rules.avg_pool2d = per_element, per_element

-- Normalisations: DeepSpeed's estimate, 5 FLOPs an element with an affine
-- weight and 4 without; RMSNorm is counted as a layer norm.
rules.layer_norm = function(_, x, _, w) return numel(x) * (w and 5 or 4), 0 end
rules.rms_norm = rules.layer_norm

-- add and mul: one FLOP per element of the broadcast result.
rules.add = function(out) return numel(out), 0 end
rules.mul = rules.add

-- Where each rule's op lives: functions of zl, methods of zl.Tensor, or both.
local PLACES = {
  linear = { zl }, attention = { zl }, scaled_dot_product_attention = { zl }, conv2d = { zl },
  layer_norm = { zl }, rms_norm = { zl }, max_pool2d = { zl }, avg_pool2d = { zl },
  matmul = { zl, methods }, relu = { zl, methods }, leaky_relu = { zl, methods }, silu = { zl, methods },
  gelu = { zl, methods }, softmax = { zl, methods }, add = { zl, methods }, mul = { zl, methods },
}
local RULE_OF = { scaled_dot_product_attention = 'attention' }

--- M.names(): the counted ops' names, sorted (the docs list them).
function M.names()
  local out = {}
  for name in pairs(PLACES) do out[#out + 1] = name end
  table.sort(out)
  return out
end

local saved = nil      -- { {holder, name, original}, ... } while swapped

local function wrap(original, rule, sink)
  return function(...)
    local out = original(...)
    sink(rule(out, ...))
    return out
  end
end

--- M.swap(sink): every counted op calls sink(flops, macs) after it runs,
--- until M.restore(). Only one profile may swap them at a time.
function M.swap(sink)
  if saved then zl.raise('FlopsProfiler: another profile is running (stop it first)') end
  saved = {}
  for name, holders in pairs(PLACES) do
    local rule = rules[RULE_OF[name] or name]
    for _, holder in ipairs(holders) do
      local original = rawget(holder, name)
      if original then
        saved[#saved + 1] = { holder, name, original }
        holder[name] = wrap(original, rule, sink)
      end
    end
  end
end

--- M.restore(): the original functions back in place (a no-op when not swapped).
function M.restore()
  if not saved then return end
  for _, s in ipairs(saved) do s[1][s[2]] = s[3] end
  saved = nil
end

--- M.swapped(): whether the wrappers are in place.
function M.swapped() return saved ~= nil end

return M
