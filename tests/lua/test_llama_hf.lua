-- LLaMA and Qwen2 from Hugging Face files: the tiny models in
-- tests/data/llama_tiny (grouped-query attention, untied head) and
-- tests/data/qwen2_tiny (q/k/v biases, tied head, four shards), made by
-- transformers (tests/interop/make_llama_tiny.py), give transformers' logits,
-- greedy continuation and left-padded batched continuation; save_pretrained
-- round trips, sharded or not; the KV cache changes nothing; each bad file is
-- refused by name.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local json = require 'zlua.json'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local data = H.source_dir .. '/tests/data'
local read, write, same = H.read_file, H.write_file, H.same_list

local tmp = os.tmpname()
os.remove(tmp)
assert(os.execute('mkdir -p ' .. tmp))

local models = {}
for _, name in ipairs({ 'llama_tiny', 'qwen2_tiny' }) do
  local dir = data .. '/' .. name
  models[name] = { dir = dir, model = nn.AutoModelForCausalLM.from_pretrained(dir),
                   expected = json.decode(read(dir .. '/expected.json')) }
end

test('config', function()
  local l = models.llama_tiny.model
  check(nn.Module.is_instance(l, nn.Llama), 'AutoModelForCausalLM builds an nn.Llama')
  local c = l.config
  check_eq(c.model_type, 'llama')
  check_eq(c.num_key_value_heads, 2)
  check_eq(c.head_dim, 8)
  check_eq(c.rope_theta, 500.0)
  check_eq(c.tie_word_embeddings, false)
  check(l.lm_head.weight ~= l.embed_tokens.weight, 'llama_tiny has its own head')
  check_eq(l.layers[1].self_attn.q_proj.bias, nil)
  check_eq(l.generation_config.eos_token_id, 2)
  check_eq(l.training, false, 'loaded in eval mode, as transformers does')
  local q = models.qwen2_tiny.model
  check_eq(q.config.model_type, 'qwen2')
  check(q.lm_head.weight == q.embed_tokens.weight, 'qwen2_tiny ties its head')
  check(q.layers[1].self_attn.q_proj.bias ~= nil and q.layers[1].self_attn.v_proj.bias ~= nil, 'q/k/v biases')
  check_eq(q.layers[1].self_attn.o_proj.bias, nil)
  check_eq(q.layers[1].mlp.up_proj.bias, nil)
  local gpt = nn.AutoModelForCausalLM.from_pretrained(data .. '/gpt2_tiny')
  check(nn.Module.is_instance(gpt, nn.GPT), 'gpt2 gives an nn.GPT')
end)

for name, m in pairs(models) do
  local model, e = m.model, m.expected
  test(name .. '_logits_match_transformers', function()
    check_close(model(zl.tensor(e.input_ids, 'i64')), e.logits, 1e-4, 'logits')
  end)

  test(name .. '_greedy_matches_transformers', function()
    local out = model:generate(e.prompt, { max_new_tokens = #e.greedy - #e.prompt, eos_token_id = {} })
    check(same(out, e.greedy), 'greedy: ' .. table.concat(out, ',') .. ' vs ' .. table.concat(e.greedy, ','))
  end)

  test(name .. '_left_padded_batch_matches_transformers', function()
    local ids, mask = zl.tensor(e.batch_ids, 'i64'), zl.tensor(e.batch_mask, 'i64')
    local n = #e.batch_greedy[1] - #e.batch_ids[1]
    local out = model:generate(ids, { max_new_tokens = n, attention_mask = mask, pad_token_id = 0,
                                      eos_token_id = {} })
    local got = out:totable()
    for r = 1, #got do
      check(same(got[r], e.batch_greedy[r]), 'row ' .. r .. ': ' .. table.concat(got[r], ',') .. ' vs '
            .. table.concat(e.batch_greedy[r], ','))
    end
  end)

  test(name .. '_kv_cache_equals_no_cache', function()
    local prompt = zl.tensor(e.input_ids, 'i64'):narrow(2, 1, 4)
    for _, o in ipairs({ { max_new_tokens = 12 }, { max_new_tokens = 12, do_sample = true, seed = 3, top_k = 20 },
                         { max_new_tokens = 12, repetition_penalty = 1.3 } }) do
      local a = model:generate(prompt, o)
      o.use_cache = false
      local b = model:generate(prompt, o)
      check(same(H.flat(a), H.flat(b)), 'cache and no cache agree')
    end
  end)

  test(name .. '_save_pretrained_round_trips', function()
    for _, shard in ipairs({ '5GB', 20000 }) do
      local dir = tmp .. '/' .. name .. '_' .. tostring(shard)
      model:save_pretrained(dir, { max_shard_size = shard })
      local sharded = io.open(dir .. '/model.safetensors.index.json') ~= nil
      check_eq(sharded, shard == 20000, 'sharded above max_shard_size')
      local again = nn.AutoModelForCausalLM.from_pretrained(dir)
      local ids = zl.tensor(e.input_ids, 'i64')
      check_eq((again(ids) - model(ids)):abs():max():item(), 0, 'the same logits after a round trip')
    end
    -- a save over a sharded one leaves no stale shard behind
    local dir = tmp .. '/' .. name .. '_over'
    model:save_pretrained(dir, { max_shard_size = 20000 })
    model:save_pretrained(dir)
    check_eq(io.open(dir .. '/model.safetensors.index.json'), nil, 'the index is gone')
    check_eq(io.open(dir .. '/model-00001-of-00004.safetensors') or io.open(dir .. '/model-00001-of-00003.safetensors'),
             nil, 'the shards are gone')
  end)
end

-- A copy of llama_tiny with config and tensors edited.
local n_copies = 0
local function variant(edit_config, edit_tensors)
  n_copies = n_copies + 1
  local dir = tmp .. '/v' .. n_copies
  assert(os.execute('mkdir -p ' .. dir))
  local src = data .. '/llama_tiny'
  local cfg = json.decode(read(src .. '/config.json'))
  if edit_config then edit_config(cfg) end
  write(dir .. '/config.json', json.encode(cfg, 2))
  local ts, meta = zl.load_safetensors(src .. '/model.safetensors')
  if edit_tensors then edit_tensors(ts) end
  zl.save_safetensors(dir .. '/model.safetensors', ts, meta)
  return dir
end

test('bad_files_are_named', function()
  local L = nn.Llama.from_pretrained
  check_error(function() L(variant(nil, function(ts) ts['model.layers.1.mlp.up_proj.weight'] = nil end)) end,
              'no tensor model.layers.1.mlp.up_proj.weight')
  check_error(function()
    L(variant(nil, function(ts) ts['model.layers.0.self_attn.k_proj.weight'] = zl.zeros(32, 32) end))
  end, 'tensor model.layers.0.self_attn.k_proj.weight has shape [32, 32], expected [16, 32]')
  check_error(function() L(variant(nil, function(ts) ts['model.extra.weight'] = zl.zeros(2) end)) end,
              'unexpected tensor model.extra.weight')
  check_error(function() L(variant(function(c) c.hidden_act = 'gelu' end)) end, 'hidden_act is gelu')
  check_error(function() L(variant(function(c) c.rope_parameters = { rope_type = 'llama3', rope_theta = 5 } end)) end,
              'rope_type "default"')
  check_error(function() L(variant(function(c) c.model_type = 'gemma' end)) end, 'model_type is gemma')
  check_error(function() L(variant(function(c) c.frobnicate = 1 end)) end, 'unknown key(s) frobnicate')
  check_error(function() nn.AutoModelForCausalLM.from_pretrained(variant(function(c) c.model_type = 'bert' end)) end,
              'model_type "bert" is not one zlua builds')
  -- a shard the index names is missing
  local dir = tmp .. '/missing_shard'
  models.qwen2_tiny.model:save_pretrained(dir, { max_shard_size = 20000 })
  os.remove(dir .. '/model-00002-of-00004.safetensors')
  check_error(function() L(dir) end, 'model-00002-of-00004.safetensors, which is missing')
  local bare = tmp .. '/no_weights'
  assert(os.execute('mkdir -p ' .. bare))
  write(bare .. '/config.json', read(data .. '/llama_tiny/config.json'))
  check_error(function() L(bare) end, 'has neither model.safetensors nor model.safetensors.index.json')
end)

test('trains', function()
  zl.manual_seed(1)
  local model = nn.Llama{ vocab_size = 32, hidden_size = 16, intermediate_size = 24, num_hidden_layers = 2,
                          num_attention_heads = 4, num_key_value_heads = 2, max_position_embeddings = 16 }
  local opt = require('zlua.optim').AdamW(model:parameters(), { lr = 1e-2 })
  math.randomseed(1)
  local rows = {}
  for r = 1, 4 do
    rows[r] = {}
    for j = 1, 9 do rows[r][j] = math.random(0, 31) end
  end
  local ids = zl.tensor(rows, 'i64')
  local x, y = ids:narrow(2, 1, 8), ids:narrow(2, 2, 8)
  local first, last
  for step = 1, 30 do
    local _, loss = model(x, y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    first = first or loss:item()
    last = loss:item()
  end
  check(last < first * 0.5, 'the loss falls: ' .. first .. ' -> ' .. last)
  -- checkpointed layers give the same gradients
  local function grads(ckpt)
    if ckpt then model:gradient_checkpointing_enable() else model:gradient_checkpointing_disable() end
    model:zero_grad()
    local _, loss = model(x, y)
    loss:backward()
    return model.layers[1].self_attn.k_proj.weight.grad:clone()
  end
  check_eq((grads(true) - grads(false)):abs():max():item(), 0, 'checkpointing changes no bit')
end)

H.done()
