-- zlua's side of tests/interop/check_flops_deepspeed.py: the GPT example's
-- model (nn.GPT as examples/gpt/train.lua builds it, on the example's text's
-- vocabulary) profiled by zlua.profiling on zero token ids [B, T]; prints as
-- JSON the vocabulary size, get_model_profile's totals and every module's
-- figures.
--   zlua flops_zlua.lua <text file> <n_layer> <n_embd> <n_head> <block_size> <batch>
local zl = require 'zlua'
local nn = require 'zlua.nn'
local json = require 'zlua.json'
local profiling = require 'zlua.profiling'

local text_path = arg[1]
local n_layer, n_embd, n_head, block, batch = tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]),
  tonumber(arg[5]), tonumber(arg[6])
local vocab = zl.text_vocab(zl.read_text(text_path))
zl.manual_seed(1)
local model = nn.GPT{ vocab_size = #vocab, block_size = block, n_layer = n_layer, n_head = n_head, n_embd = n_embd }

local flops, macs, params = profiling.get_model_profile(model, { input_shape = { batch, block }, input_dtype = 'i64',
  print_profile = false, as_string = false })

local prof = profiling.FlopsProfiler.new(model)
model:eval()
prof:start_profile()
zl.no_grad(function() model(zl.zeros({ batch, block }, 'i64')) end)
prof:stop_profile()
local modules = {}
for _, p in ipairs(prof:module_profiles()) do
  modules[#modules + 1] = { name = p.name, class = p.class, params = p.params, macs = p.macs, flops = p.flops }
end
prof:end_profile()
print(json.encode({ vocab_size = #vocab, flops = flops, macs = macs, params = params, modules = modules }))
