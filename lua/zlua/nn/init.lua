--[[ zlua.nn: layers and models as Lua objects (see zlua.nn.Module for what
  every module can do), and the helper that splits a model's parameters into
  weight-decay groups for an optimizer.

  local nn = require 'zlua.nn'
  local model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
  local loss = nn.CrossEntropyLoss()(model(x), y)
]]

local Module = require 'zlua.nn.Module'
local check = require 'zlua.nn.check'

local nn = {
  Module = Module,
  Linear = require 'zlua.nn.Linear',
  LinearLoRA = require 'zlua.nn.LinearLoRA',
  Conv2d = require 'zlua.nn.Conv2d',
  MaxPool2d = require 'zlua.nn.MaxPool2d',
  AvgPool2d = require 'zlua.nn.AvgPool2d',
  Flatten = require 'zlua.nn.Flatten',
  Embedding = require 'zlua.nn.Embedding',
  LayerNorm = require 'zlua.nn.LayerNorm',
  RMSNorm = require 'zlua.nn.RMSNorm',
  Dropout = require 'zlua.nn.Dropout',
  ReLU = require 'zlua.nn.ReLU',
  GELU = require 'zlua.nn.GELU',
  SiLU = require 'zlua.nn.SiLU',
  Sequential = require 'zlua.nn.Sequential',
  ModuleList = require 'zlua.nn.ModuleList',
  CausalSelfAttention = require 'zlua.nn.CausalSelfAttention',
  TransformerBlock = require 'zlua.nn.TransformerBlock',
  GPT = require 'zlua.nn.GPT',
  LlamaAttention = require 'zlua.nn.LlamaAttention',
  LlamaMLP = require 'zlua.nn.LlamaMLP',
  LlamaDecoderLayer = require 'zlua.nn.LlamaDecoderLayer',
  Llama = require 'zlua.nn.Llama',
  AutoModelForCausalLM = require 'zlua.nn.AutoModelForCausalLM',
  CrossEntropyLoss = require 'zlua.nn.CrossEntropyLoss',
  MSELoss = require 'zlua.nn.MSELoss',
}

--- nn.get_optimizer_grouped_parameters(model, weight_decay
---   [, no_decay_name_list = {'bias', 'LayerNorm.weight'}]):
--- { {params = ..., weight_decay = weight_decay}, {params = ..., weight_decay = 0} }.
--- A parameter goes to the second group when its name contains one of the
--- strings of no_decay_name_list (plain substrings, not patterns) or it
--- belongs to a LayerNorm or an RMSNorm (whatever the model calls it), as
--- Hugging Face's Trainer groups them; frozen parameters
--- (requires_grad false) are left out. Both groups keep definition order.
function nn.get_optimizer_grouped_parameters(model, weight_decay, no_decay_name_list)
  if not Module.is_module(model) then
    check.error('get_optimizer_grouped_parameters: expected a module, got ' .. type(model))
  end
  if type(weight_decay) ~= 'number' then
    check.error('get_optimizer_grouped_parameters: weight_decay must be a number, got '
                .. tostring(weight_decay))
  end
  local patterns = no_decay_name_list or { 'bias', 'LayerNorm.weight' }
  local norm = {}
  for _, m in model:named_modules() do
    if Module.is_instance(m, nn.LayerNorm) or Module.is_instance(m, nn.RMSNorm) then
      for _, p in m:named_parameters() do norm[p:id()] = true end
    end
  end
  local decay, no_decay = {}, {}
  for name, p in model:named_parameters() do
    if p:requires_grad() then
      local skip = norm[p:id()]
      for _, s in ipairs(patterns) do
        skip = skip or name:find(s, 1, true) ~= nil
      end
      local group = skip and no_decay or decay
      group[#group + 1] = p
    end
  end
  return { { params = decay, weight_decay = weight_decay }, { params = no_decay, weight_decay = 0.0 } }
end

return nn
