-- zlua's side of tests/interop/check_llama_transformers.py: loads a Hugging
-- Face LLaMA/Qwen2/Mistral folder with AutoModelForCausalLM (or builds a fresh
-- nn.Llama of the kind named "new:<model_type>"), saves it with
-- save_pretrained to OUT (in shards of SHARD bytes), and prints as JSON its
-- logits for IDS, its greedy continuation of PROMPT by N ids, and its greedy
-- continuation of the left-padded batch BATCH (mask MASK) by N ids.
--   zlua llama_zlua.lua <dir|new:type> <out> <shard> <ids> <prompt> <batch> <mask> <n>
local zl = require 'zlua'
local nn = require 'zlua.nn'
local json = require 'zlua.json'

local src, out, shard = arg[1], arg[2], math.tointeger(arg[3])
local ids, prompt, batch, mask = json.decode(arg[4]), json.decode(arg[5]), json.decode(arg[6]), json.decode(arg[7])
local n = math.tointeger(arg[8])
local model
local kind = src:match('^new:(.*)$')
if kind then
  zl.manual_seed(7)
  model = nn.Llama{ model_type = kind, vocab_size = 96, hidden_size = 48, intermediate_size = 64,
                    num_hidden_layers = 2, num_attention_heads = 6, num_key_value_heads = 2,
                    max_position_embeddings = 64, rms_norm_eps = 1e-5, rope_theta = 1000.0,
                    tie_word_embeddings = kind == 'qwen2', qkv_bias = kind == 'qwen2' }
  zl.no_grad(function()
    for _, p in ipairs(model:parameters()) do p:normal_(p:dim() == 1 and 1 or 0, 0.3) end
  end)
  model:eval()
else
  model = nn.AutoModelForCausalLM.from_pretrained(src)
end
model:save_pretrained(out, { max_shard_size = shard })
local b = model:generate(zl.tensor(batch, 'i64'), { max_new_tokens = n, attention_mask = zl.tensor(mask, 'i64'),
                                                   pad_token_id = 0, eos_token_id = {} })
print(json.encode({
  logits = model(zl.tensor(ids, 'i64')):totable(),
  greedy = model:generate(prompt, { max_new_tokens = n, eos_token_id = {} }),
  batch = b:totable(),
}))
