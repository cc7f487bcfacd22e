--[[ zlua.nn.AutoModelForCausalLM.from_pretrained(dir): the language model a
  Hugging Face folder holds, chosen by config.json's model_type: gpt2
  (zlua.nn.GPT), llama, qwen2 or mistral (zlua.nn.Llama). ]]

local json = require 'zlua.json'
local check = require 'zlua.nn.check'
local hf_weights = require 'zlua.nn.hf_weights'

local fmt = string.format

local AutoModelForCausalLM = {}

local classes = { gpt2 = 'zlua.nn.GPT', llama = 'zlua.nn.Llama', qwen2 = 'zlua.nn.Llama', mistral = 'zlua.nn.Llama' }

function AutoModelForCausalLM.from_pretrained(dir)
  if type(dir) ~= 'string' then
    check.error(fmt('AutoModelForCausalLM.from_pretrained: expected a directory name, got %s', type(dir)))
  end
  local path = dir .. '/config.json'
  local cfg = json.decode(hf_weights.read_file('AutoModelForCausalLM.from_pretrained', path), path)
  local kind = type(cfg) == 'table' and cfg.model_type
  local class = classes[kind]
  if not class then
    check.error(fmt('AutoModelForCausalLM.from_pretrained: %s: model_type %s is not one zlua builds '
                    .. '(gpt2, llama, qwen2, mistral)', path, type(kind) == 'string' and '"' .. kind .. '"'
                    or 'is missing and'))
  end
  return require(class).from_pretrained(dir)
end

return AutoModelForCausalLM
