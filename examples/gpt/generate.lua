--[[ Text from a GPT-2 folder (Hugging Face's config.json + model.safetensors,
  or what model:save_pretrained wrote): continues --ids (comma-separated
  0-based token ids) or, where zlua.tokenizer is present and the folder holds
  a tokenizer, --prompt. Greedy unless --do_sample; prints the ids after
  `ids:` and, with a tokenizer, the text after `text:`.
    zlua examples/gpt/generate.lua --model gpt2/ --prompt "Hello, my dog" --max_new_tokens 20
    zlua examples/gpt/generate.lua --model tests/data/gpt2_tiny --ids 11,45,2 --do_sample --top_p 0.9
  Without --ids or --prompt it loads the model and leaves `model`, `tokenizer`
  (or nil) and `complete(prompt_or_ids [, opts])` for the REPL:
    zlua -i examples/gpt/generate.lua --model gpt2/
    > complete('The meaning of life is', {max_new_tokens = 30}) ]]

local nn = require 'zlua.nn'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('generate', arg, {
  { 'model', '', 'the folder with config.json and model.safetensors (required)' },
  { 'ids', '', 'the prompt as comma-separated 0-based token ids' },
  { 'prompt', '', 'the prompt as text (needs zlua.tokenizer and a tokenizer in --model)' },
  { 'max_new_tokens', 50, 'ids to generate', min = 0 },
  { 'do_sample', false, 'draw each id instead of taking the likeliest' },
  { 'temperature', 1.0, 'divides the logits before drawing' },
  { 'top_k', 0, 'draw among the top_k likeliest ids (0: all)', min = 0 },
  { 'top_p', 1.0, 'draw among the fewest likeliest ids whose probability reaches top_p' },
  { 'seed', 1, 'seed of the draws' },
})

local function fail(msg)
  io.stderr:write('generate: ', (tostring(msg):gsub('^[^:\n]*%.lua:%d+: ', '')), '\n')
  os.exit(2)
end

if opt.model == '' then fail('--model DIR is required') end
local ok, loaded = pcall(nn.GPT.from_pretrained, opt.model)
if not ok then fail(loaded) end
model = loaded

-- The tokenizer is optional: this example works on ids alone.
local has_tok, tok_module = pcall(require, 'zlua.tokenizer')
local tok_why = 'zlua.tokenizer is not in this build'
if has_tok then
  local found, t = pcall(tok_module.from_pretrained, opt.model)
  tokenizer = found and t or nil
  tok_why = not found and tostring(t) or nil
end

--- complete(prompt, opts): the ids (and the text, with a tokenizer) that
--- follow prompt, a string or a list of ids; opts go to model:generate.
function complete(prompt, o)
  local ids = prompt
  if type(prompt) == 'string' then
    if not tokenizer then error('complete: no tokenizer for ' .. opt.model .. ': give a list of ids', 2) end
    ids = tokenizer:encode(prompt)
  end
  local out = model:generate(ids, o or { max_new_tokens = opt.max_new_tokens })
  return out, tokenizer and tokenizer:decode(out) or nil
end

local prompt
if opt.ids ~= '' then
  prompt = {}
  for field in opt.ids:gmatch('[^,]+') do
    local id = math.tointeger(tonumber(field))
    if not id then fail(('--ids: %q is not an integer id'):format(field)) end
    prompt[#prompt + 1] = id
  end
elseif opt.prompt ~= '' then
  if not tokenizer then fail('--prompt needs a tokenizer (' .. tok_why .. '); give --ids') end
  prompt = opt.prompt
end

if prompt then
  local gen_ok, out, text = pcall(complete, prompt, {
    max_new_tokens = opt.max_new_tokens, do_sample = opt.do_sample, temperature = opt.temperature,
    top_k = opt.top_k > 0 and opt.top_k or nil, top_p = opt.top_p, seed = opt.seed,
  })
  if not gen_ok then fail(out) end
  print('ids: ' .. table.concat(out, ','))
  if text then print('text: ' .. text) end
else
  print(('generate: %s loaded (%s); call complete(prompt_or_ids [, opts])'):format(opt.model, model:extra_repr()))
end
