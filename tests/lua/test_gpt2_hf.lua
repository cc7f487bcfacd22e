-- GPT-2 from Hugging Face files and generation: the tiny model in
-- tests/data/gpt2_tiny (made by transformers: tests/interop/make_gpt2_tiny.py)
-- gives transformers' logits and greedy continuation; save_pretrained round
-- trips; the KV cache changes nothing; each bad file is refused by name.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local json = require 'zlua.json'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local tiny = H.source_dir .. '/tests/data/gpt2_tiny'
local read, write, same = H.read_file, H.write_file, H.same_list

local expected = json.decode(read(tiny .. '/expected.json'))
local tmp = os.tmpname()
os.remove(tmp)
assert(os.execute('mkdir -p ' .. tmp))

-- A copy of the tiny model's files in a fresh folder, the config and the
-- tensors passed through edit functions first.
local n_copies = 0
local function variant(edit_config, edit_tensors)
  n_copies = n_copies + 1
  local dir = tmp .. '/v' .. n_copies
  assert(os.execute('mkdir -p ' .. dir))
  local cfg = json.decode(read(tiny .. '/config.json'))
  if edit_config then edit_config(cfg) end
  write(dir .. '/config.json', json.encode(cfg, 2))
  local ts, meta = zl.load_safetensors(tiny .. '/model.safetensors')
  if edit_tensors then edit_tensors(ts) end
  zl.save_safetensors(dir .. '/model.safetensors', ts, meta)
  return dir
end

local model = nn.GPT.from_pretrained(tiny)
local input = zl.tensor(expected.input_ids, 'i64')

local function list(t) return H.flat(t) end

test('config', function()
  local c = model.config
  check_eq(c.vocab_size, 96)
  check_eq(c.block_size, 64)
  check_eq(c.n_layer, 2)
  check_eq(c.n_head, 4)
  check_eq(c.n_embd, 32)
  check_eq(c.activation, 'gelu_new')
  check_eq(model.blocks[1].mlp[2].approximate, 'tanh')
  check_eq(model.generation_config.eos_token_id, 95)
  check_eq(model.training, false, 'loaded in eval mode, as transformers does')
  check(model.lm_head.weight == model.wte.weight, 'the head is tied to wte')
  -- the defaults are untouched: exact GELU, eps 1e-5
  local g = nn.GPT{ vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4 }
  check_eq(g.config.activation, 'gelu')
  check_eq(g.blocks[1].mlp[2].approximate, 'none')
  check_eq(g.blocks[1].ln1.eps, 1e-5)
  check_error(function() nn.GPT{ vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4,
                                 activation = 'relu' } end, "activation must be 'gelu' or 'gelu_new', got relu")
end)

test('logits_match_transformers', function()
  check_close(model(input), expected.logits, 1e-4, 'logits')
end)

test('greedy_matches_transformers', function()
  local out = model:generate(expected.prompt, { max_new_tokens = #expected.greedy - #expected.prompt })
  check(same(out, expected.greedy), 'greedy: ' .. table.concat(out, ',') .. ' vs ' .. table.concat(expected.greedy, ','))
  -- a tensor [1, T] in, a tensor out; [T] gives [T']
  local t = model:generate(zl.tensor({ expected.prompt }, 'i64'), { max_new_tokens = 5 })
  check(same(list(t), table.move(expected.greedy, 1, #expected.prompt + 5, 1, {})), 'greedy from a tensor')
  check_eq(model:generate(zl.tensor(expected.prompt, 'i64'), { max_new_tokens = 3 }):dim(), 1)
end)

test('kv_cache_equals_no_cache', function()
  local prompt = zl.tensor(expected.input_ids, 'i64'):narrow(2, 1, 4)
  for _, o in ipairs({
    { max_new_tokens = 30 },
    { max_new_tokens = 30, do_sample = true, seed = 3 },
    { max_new_tokens = 30, do_sample = true, seed = 4, temperature = 0.7, top_k = 10 },
    { max_new_tokens = 30, do_sample = true, seed = 5, top_p = 0.8 },
  }) do
    local with = model:generate(prompt, o)
    o.use_cache = false
    local without = model:generate(prompt, o)
    check(same(list(with), list(without)), 'cache vs none, do_sample=' .. tostring(o.do_sample))
  end
  -- past block_size, an error unless asked to slide; sliding, the cache gives way to reruns
  check_error(function() model:generate(prompt, 80, { seed = 9 }) end,
    'generate: a prompt of 4 ids and max_new_tokens 80 run the model on 83 positions, more than its '
      .. 'block_size of 64 (pass slide = true to run on the last 64 ids as the sequence grows, their '
      .. 'positions shifting)')
  check_eq(model:generate(prompt, { max_new_tokens = 61, eos_token_id = {} }):size(2), 65)
  check_error(function() model:generate(prompt, { max_new_tokens = 62 }) end, 'on 65 positions')
  local a = model:generate(prompt, 80, { seed = 9, slide = true })
  local b = model:generate(prompt, 80, { seed = 9, use_cache = false, slide = true })
  check_eq(a:size(2), 84)
  check(same(list(a), list(b)), 'sliding window, cache vs none')
  -- position by position through the cache = all at once
  local cache = model:new_cache()
  local parts = {}
  for i = 1, input:size(2) do parts[i] = model:forward_cached(input:narrow(2, i, 1), cache) end
  check_eq(cache.len, input:size(2))
  check_close(zl.cat(parts, 2), model(input), 1e-5, 'one position at a time')
  local c2 = model:new_cache()
  local first = model:forward_cached(input:narrow(2, 1, 3), c2)
  local rest = model:forward_cached(input:narrow(2, 4, 5), c2)
  check_close(zl.cat({ first, rest }, 2), model(input), 1e-5, 'three then five')
  check_error(function() model:forward_cached(zl.zeros(1, 60):long(), c2) end,
              'sequence length 68 is longer than block_size 64')
end)

test('sampling_options', function()
  local p = { expected.prompt }
  local greedy = model:generate(p[1], { max_new_tokens = 10 })
  check(same(model:generate(p[1], { max_new_tokens = 10, do_sample = true, top_k = 1, seed = 1 }), greedy),
        'top_k = 1 is greedy')
  check(same(model:generate(p[1], { max_new_tokens = 10, do_sample = true, top_p = 1e-9, seed = 1 }), greedy),
        'a tiny top_p is greedy')
  local a = model:generate(p[1], { max_new_tokens = 20, do_sample = true, seed = 7, top_p = 0.9 })
  local b = model:generate(p[1], { max_new_tokens = 20, do_sample = true, seed = 7, top_p = 0.9 })
  check(same(a, b), 'the same seed draws the same')
  -- end of text: a row stops at eos and is padded while the others go on
  local eos = expected.greedy[#expected.prompt + 3]
  local out = model:generate(p[1], { max_new_tokens = 20, eos_token_id = eos })
  check_eq(#out, #expected.prompt + 3, 'stops at eos')
  check_eq(out[#out], eos)
  local opts = { max_new_tokens = 20 }
  model:generate(p[1], opts)
  check_eq(opts.do_sample, nil, "the caller's options are left alone")
  check_error(function() model:generate(p[1], { max_new_tokens = -1 }) end, 'max_new_tokens must be a non-negative')
  check_error(function() model:generate(p[1], { max_new_tokens = 2, top_p = 0 }) end, 'top_p must be a number in (0, 1]')
  check_error(function() model:generate(p[1], { max_new_tokens = 2, eos_token_id = 96 }) end,
              'eos_token_id must be an id in 0..95, got 96')
  check_error(function() model:generate({ 1, '2' }, { max_new_tokens = 2 }) end, 'ids[2] is not an integer id')
  check_error(function() model:generate({ 1, 96 }, { max_new_tokens = 2 }) end, '96')
  check_error(function() model:generate(p[1], { max_new_tokens = 2, beams = 2 }) end, 'unknown option "beams"')
  check_error(function() model:generate(zl.tensor({ 1 }, 'i64'), 2, { max_new_tokens = 2 }) end,
              'give max_new_tokens and do_sample in the options table alone')
end)

test('without_transformer_prefix', function()
  local dir = variant(nil, function(ts)
    local names = {}
    for k in pairs(ts) do names[#names + 1] = k end
    for _, k in ipairs(names) do
      local bare = k:match('^transformer%.(.*)$')
      if bare then ts[bare], ts[k] = ts[k], nil end
    end
  end)
  check_close(nn.GPT.from_pretrained(dir)(input), expected.logits, 1e-4, 'logits without the prefix')
end)

test('save_pretrained_round_trip', function()
  local dir = tmp .. '/saved'
  model:save_pretrained(dir)
  local info = {}
  for _, e in ipairs(zl.safetensors_info(dir .. '/model.safetensors')) do info[e.name] = e.shape end
  check(info['transformer.h.0.attn.c_attn.weight'] and same(info['transformer.h.0.attn.c_attn.weight'], { 32, 96 }),
        'Conv1D weights are [in, out]')
  check(info['transformer.h.1.mlp.c_proj.weight'] and same(info['transformer.h.1.mlp.c_proj.weight'], { 128, 32 }),
        'mlp.c_proj is [4C, C]')
  check_eq(info['lm_head.weight'], nil, 'the tied head is not saved')
  local _, meta = zl.load_safetensors(dir .. '/model.safetensors', {})
  check_eq(meta.format, 'pt')
  local cfg = json.decode(read(dir .. '/config.json'))
  check_eq(cfg.model_type, 'gpt2')
  check_eq(cfg.activation_function, 'gelu_new')
  check_eq(cfg.n_positions, 64)
  check_eq(cfg.eos_token_id, 95)
  local back = nn.GPT.from_pretrained(dir)
  check(same(list(back(input)), list(model(input))), 'saved and loaded: the same logits, bit for bit')
  -- a model of our own, exact GELU, round trips too
  zl.manual_seed(2)
  local g = nn.GPT{ vocab_size = 20, block_size = 8, n_layer = 1, n_head = 2, n_embd = 8, layer_norm_epsilon = 1e-6 }
  g:save_pretrained(tmp .. '/own')
  local g2 = nn.GPT.from_pretrained(tmp .. '/own')
  check_eq(g2.config.activation, 'gelu')
  check_eq(g2.config.layer_norm_epsilon, 1e-6)
  check_eq(json.decode(read(tmp .. '/own/config.json')).eos_token_id, json.null, 'no end-of-text id: null')
  local x = zl.tensor({ { 1, 2, 3, 19 } }, 'i64')
  check(same(list(g2(x)), list(g(x))), 'own model round trip')
  check_error(function()
    nn.GPT{ vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4, bias = false }:save_pretrained(tmp .. '/nb')
  end, 'GPT-2 has biases and this model was built with bias = false')
  -- in shards: the index names each tensor's file, and the folder loads the same
  model:save_pretrained(tmp .. '/sharded', { max_shard_size = 40000 })
  local index = json.decode(read(tmp .. '/sharded/model.safetensors.index.json'))
  check_eq(index.weight_map['transformer.wte.weight'], 'model-00001-of-00004.safetensors')
  check_eq(io.open(tmp .. '/sharded/model.safetensors'), nil, 'no single file beside the shards')
  check(same(list(nn.AutoModelForCausalLM.from_pretrained(tmp .. '/sharded')(input)), list(model(input))),
        'sharded: the same logits, bit for bit')
  check_error(function() model:save_pretrained(tmp .. '/bad', { max_shard_size = 'lots' }) end,
              "max_shard_size must be a number of bytes or a size such as '5GB', got lots")
end)

test('bad_tensors_named', function()
  local missing = variant(nil, function(ts) ts['transformer.h.1.mlp.c_fc.bias'] = nil end)
  check_error(function() nn.GPT.from_pretrained(missing) end,
              missing .. '/model.safetensors has no tensor transformer.h.1.mlp.c_fc.bias')
  local wrong = variant(nil, function(ts)
    ts['transformer.h.0.attn.c_attn.weight'] = ts['transformer.h.0.attn.c_attn.weight']:transpose(1, 2):contiguous()
  end)
  check_error(function() nn.GPT.from_pretrained(wrong) end,
              'model.safetensors: tensor transformer.h.0.attn.c_attn.weight has shape [96, 32], expected [32, 96]')
  local extra = variant(nil, function(ts) ts['transformer.h.0.attn.rotary'] = zl.zeros(2) end)
  check_error(function() nn.GPT.from_pretrained(extra) end, 'unexpected tensor transformer.h.0.attn.rotary')
  local buffers = variant(nil, function(ts)
    ts['transformer.h.0.attn.bias'] = zl.ones(1, 1, 64, 64)
    ts['transformer.h.1.attn.masked_bias'] = zl.tensor(-1e4)
    ts['lm_head.weight'] = ts['transformer.wte.weight']:clone()
  end)
  check_close(nn.GPT.from_pretrained(buffers)(input), expected.logits, 1e-4, 'mask buffers and a tied head skipped')
  local untied = variant(nil, function(ts) ts['lm_head.weight'] = zl.zeros(96, 32) end)
  check_error(function() nn.GPT.from_pretrained(untied) end, 'lm_head.weight differs from wte.weight')
  local half = variant(nil, function(ts) for k, v in pairs(ts) do ts[k] = v:to('f16') end end)
  check_close(nn.GPT.from_pretrained(half)(input), expected.logits, 0.05, 'weights stored as f16')
  check_eq(nn.GPT.from_pretrained(half).wte.weight:dtype(), 'f32')
  local ints = variant(nil, function(ts) ts['transformer.ln_f.bias'] = zl.zeros(32):long() end)
  check_error(function() nn.GPT.from_pretrained(ints) end, 'tensor transformer.ln_f.bias is i64, expected a float dtype')
  check_error(function() nn.GPT.from_pretrained(tmp .. '/none') end, 'none/config.json')
end)

test('bad_config_named', function()
  local cases = {
    { function(c) c.activation_function = 'relu' end, 'config.json: activation_function is relu' },
    { function(c) c.add_cross_attention = true end, 'config.json: add_cross_attention is true' },
    { function(c) c.scale_attn_by_inverse_layer_idx = true end, 'scale_attn_by_inverse_layer_idx is true' },
    { function(c) c.tie_word_embeddings = false end, 'tie_word_embeddings is false' },
    { function(c) c.n_inner = 100 end, 'n_inner is 100, expected null or 4 * n_embd = 128' },
    { function(c) c.model_type = 'llama' end, 'model_type is llama' },
    { function(c) c.rotary_dim = 8 end, 'unknown key(s) rotary_dim' },
    { function(c) c.n_layer = nil end, 'config.json has no n_layer' },
    { function(c) c.n_head = 5 end, 'n_embd (32) must be a multiple of n_head (5)' },
    { function(c) c.attn_pdrop = 0.2 end, 'attn_pdrop is 0.2, expected resid_pdrop' },
    { function(c) c.n_embd = '32' end, 'n_embd is 32, expected a positive integer' },
  }
  for _, case in ipairs(cases) do
    local dir = variant(case[1])
    check_error(function() nn.GPT.from_pretrained(dir) end, case[2])
  end
  -- n_ctx alone (older configs) gives the context
  local old = variant(function(c) c.n_positions = nil; c.n_ctx = 64 end)
  check_eq(nn.GPT.from_pretrained(old).config.block_size, 64)
end)

os.execute('rm -rf ' .. tmp)
H.done()
