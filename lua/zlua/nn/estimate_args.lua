--[[ zlua.nn.estimate_args: the argument checks the activation estimates
  (zlua.nn.gpt_activations, zlua.nn.llama_activations) share, their messages
  prefixed by the estimate's name.

  local args = require('zlua.nn.estimate_args')('gpt_activations')
  opts = args.start(config, opts)        -- config a table; opts or {}
  local L = args.positive('n_layer', config.n_layer)
  local e = args.bytes(opts.precision)   -- bytes an element: 4, or 2 in bf16/fp16 ]]

local zl = require 'zlua'

local fmt = string.format

local SIZES = { f32 = 4, bf16 = 2, fp16 = 2, f16 = 2 }

return function(name)
  local A = {}

  function A.start(config, opts)
    if type(config) ~= 'table' then zl.raise(name .. ': config must be a table') end
    return opts or {}
  end

  function A.positive(what, v)
    if math.type(v) ~= 'integer' or v < 1 then
      zl.raise(fmt('%s: %s must be a positive integer, got %s', name, what, tostring(v)))
    end
    return v
  end

  function A.bytes(precision)
    precision = precision or 'f32'
    local e = SIZES[precision]
    if not e then
      zl.raise(fmt("%s: precision must be 'f32', 'bf16' or 'fp16', got %s", name, tostring(precision)))
    end
    return e
  end

  return A
end
