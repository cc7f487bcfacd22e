-- zlua's side of tests/interop/check_gpt2_transformers.py: loads a GPT-2 folder
-- (or builds a fresh model when the folder is "new"), saves it with
-- save_pretrained to OUT, and prints as JSON its logits for IDS and its greedy
-- continuation of PROMPT by N ids.
--   zlua gpt2_zlua.lua <dir|new> <out> <ids json> <prompt json> <n>
local zl = require 'zlua'
local nn = require 'zlua.nn'
local json = require 'zlua.json'

local src, out, ids, prompt, n = arg[1], arg[2], json.decode(arg[3]), json.decode(arg[4]), math.tointeger(arg[5])
local model
if src == 'new' then
  -- Our defaults (exact GELU) and a non-default epsilon, so the config carries both.
  zl.manual_seed(15)
  model = nn.GPT{ vocab_size = 96, block_size = 64, n_layer = 2, n_head = 4, n_embd = 32, layer_norm_epsilon = 1e-6 }
  zl.no_grad(function()
    for _, p in ipairs(model:parameters()) do p:normal_(0, 0.3) end
  end)
  model:eval()
else
  model = nn.GPT.from_pretrained(src)
end
model:save_pretrained(out)
print(json.encode({
  logits = model(zl.tensor(ids, 'i64')):totable(),
  greedy = model:generate(prompt, { max_new_tokens = n }),
}))
