--[[ zlua.lora: DeepSpeed-Chat's LoRA helpers over a whole model.

  local lora = require 'zlua.lora'
  lora.convert_linear_layer_to_lora(model, 'mlp', 8 [, alpha = 1, dropout = 0])
  lora.only_optimize_lora_parameters(model)   -- only lora_A, lora_B train
  lora.fuse(model) ... lora.unfuse(model)     -- fuse_lora_weight / unfuse_lora_weight

  Frozen parameters take no gradient and no optimizer state at any ZeRO
  stage; at stage 3 they stay partitioned (zlua.zero.partition_frozen). ]]

local Module = require 'zlua.nn.Module'
local Linear = require 'zlua.nn.Linear'
local LinearLoRA = require 'zlua.nn.LinearLoRA'
local check = require 'zlua.nn.check'

local fmt = string.format

local lora = {}

local function need_module(fn, model)
  if not Module.is_module(model) then check.error(fmt('lora.%s: expected a module, got %s', fn, type(model))) end
end

-- A plain substring of the module's dotted name, as DeepSpeed-Chat's
-- part_module_name; a list matches when any of its strings does.
local function matcher(pattern)
  local list = type(pattern) == 'table' and pattern or { pattern }
  if #list == 0 then check.error('lora.convert_linear_layer_to_lora: pattern is an empty list') end
  for i, s in ipairs(list) do
    if type(s) ~= 'string' then
      check.error(fmt('lora.convert_linear_layer_to_lora: pattern %d must be a string, got %s', i, type(s)))
    end
  end
  return function(name)
    for _, s in ipairs(list) do
      if name:find(s, 1, true) then return true end
    end
    return false
  end
end

--- lora.convert_linear_layer_to_lora(model, pattern, dim [, alpha, dropout]):
--- every Linear whose dotted name contains `pattern` (a string, or a list of
--- strings) becomes a LinearLoRA over the same weight and bias; returns
--- model and the names converted. An error when nothing matches.
function lora.convert_linear_layer_to_lora(model, pattern, dim, alpha, dropout)
  need_module('convert_linear_layer_to_lora', model)
  local match = matcher(pattern)
  local found = {}
  for name, m in model:named_modules() do
    if name ~= '' and Module.is_instance(m, Linear) and match(name) then found[#found + 1] = name end
  end
  if #found == 0 then
    check.error(fmt('lora.convert_linear_layer_to_lora: no Linear layer of the model has a name containing %s',
                    type(pattern) == 'table' and table.concat(pattern, ' or ') or fmt('%q', pattern)))
  end
  for _, name in ipairs(found) do
    local parent, key = model, name
    while key:find('.', 1, true) do
      local head, rest = key:match('^([^.]+)%.(.+)$')
      parent, key = parent[head], rest
    end
    local layer = LinearLoRA(parent[key], dim, alpha, dropout)
    layer:train(parent.training)
    parent[key] = layer
  end
  return model, found
end

local function each_lora(model, fn)
  for _, m in model:named_modules() do
    if Module.is_instance(m, LinearLoRA) then fn(m) end
  end
end

--- lora.only_optimize_lora_parameters(model): requires_grad false on every
--- parameter but the LoRA layers' lora_A and lora_B; returns model.
function lora.only_optimize_lora_parameters(model)
  need_module('only_optimize_lora_parameters', model)
  for _, p in ipairs(model:parameters()) do p:requires_grad(false) end
  each_lora(model, function(m)
    m.lora_A:requires_grad(true)
    m.lora_B:requires_grad(true)
  end)
  return model
end

--- lora.fuse(model) / lora.unfuse(model): every LoRA layer's update folded
--- into its base weight, or taken out again (collective under ZeRO-3).
function lora.fuse(model)
  need_module('fuse', model)
  each_lora(model, function(m) m:fuse() end)
  return model
end

function lora.unfuse(model)
  need_module('unfuse', model)
  each_lora(model, function(m) m:unfuse() end)
  return model
end

lora.fuse_lora_weight, lora.unfuse_lora_weight = lora.fuse, lora.unfuse

return lora
