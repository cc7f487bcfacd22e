--[[ Hugging Face files for zlua.nn.Llama: config.json (model_type llama,
  qwen2 or mistral) and the weights, in model.safetensors or sharded
  (zlua.nn.hf_weights), named as transformers' LlamaForCausalLM,
  Qwen2ForCausalLM and MistralForCausalLM name them
  (Llama.from_pretrained, model:save_pretrained). ]]

local zl = require 'zlua'
local json = require 'zlua.json'
local zero = require 'zlua.zero'
local check = require 'zlua.nn.check'
local hf_weights = require 'zlua.nn.hf_weights'

local fmt = string.format

local M = {}

local architectures = { llama = 'LlamaForCausalLM', qwen2 = 'Qwen2ForCausalLM', mistral = 'MistralForCausalLM' }

-- Keys that do not change the model's output, or that are read below.
local harmless = {
  model_type = true, architectures = true, vocab_size = true, hidden_size = true, intermediate_size = true,
  num_hidden_layers = true, num_attention_heads = true, num_key_value_heads = true, head_dim = true,
  max_position_embeddings = true, rms_norm_eps = true, rope_theta = true, rope_scaling = true,
  rope_parameters = true, tie_word_embeddings = true, attention_bias = true, mlp_bias = true,
  hidden_act = true, attention_dropout = true, pretraining_tp = true, sliding_window = true,
  use_sliding_window = true, max_window_layers = true, layer_types = true, initializer_range = true,
  bos_token_id = true, eos_token_id = true, pad_token_id = true, torch_dtype = true, dtype = true,
  transformers_version = true, use_cache = true, _name_or_path = true, output_attentions = true,
  output_hidden_states = true, return_dict = true, id2label = true, label2id = true, _attn_implementation = true,
  _attn_implementation_autoset = true, tokenizer_class = true, problem_type = true, is_decoder = true,
}

-- nn.Llama's options from the decoded config.json at path, and the ids generate uses.
local function options(cfg, path)
  local function bad(key, want)
    local v = cfg[key]
    check.error(fmt('Llama.from_pretrained: %s: %s is %s, expected %s', path, key,
                    type(v) == 'table' and json.encode(v) or tostring(v), want))
  end
  if type(cfg) ~= 'table' then check.error(fmt('Llama.from_pretrained: %s is not a JSON object', path)) end
  local kind = cfg.model_type
  if not architectures[kind] then bad('model_type', '"llama", "qwen2" or "mistral"') end
  local unknown = {}
  for key in pairs(cfg) do if not harmless[key] then unknown[#unknown + 1] = key end end
  if #unknown > 0 then
    table.sort(unknown)
    check.error(fmt('Llama.from_pretrained: %s: unknown key(s) %s: not a %s config zlua can build', path,
                    table.concat(unknown, ', '), kind))
  end
  local function given(key)
    local v = cfg[key]
    if v == json.null then return nil end
    return v
  end
  local act = given('hidden_act') or 'silu'
  if act ~= 'silu' then bad('hidden_act', '"silu" (the only activation zlua builds here)') end
  if (given('pretraining_tp') or 1) ~= 1 then bad('pretraining_tp', '1') end
  if (given('attention_dropout') or 0) ~= 0 then bad('attention_dropout', '0 (zlua\'s attention has no dropout)') end
  local theta = given('rope_theta')
  local rp = given('rope_scaling') or given('rope_parameters')
  if rp ~= nil then
    local rtype = type(rp) == 'table' and (rp.rope_type or rp.type)
    if rtype ~= 'default' then
      bad(cfg.rope_scaling ~= nil and cfg.rope_scaling ~= json.null and 'rope_scaling' or 'rope_parameters',
          'null or rope_type "default" (zlua builds the default rotary positions only)')
    end
    theta = theta or rp.rope_theta
  end
  for _, lt in ipairs(type(given('layer_types')) == 'table' and cfg.layer_types or {}) do
    if lt ~= 'full_attention' then bad('layer_types', 'full_attention on every layer') end
  end
  local window = given('sliding_window')
  if kind == 'qwen2' and not given('use_sliding_window') then window = nil end
  local o = {
    model_type = kind, vocab_size = given('vocab_size'), hidden_size = given('hidden_size'),
    intermediate_size = given('intermediate_size'), num_hidden_layers = given('num_hidden_layers'),
    num_attention_heads = given('num_attention_heads'), num_key_value_heads = given('num_key_value_heads'),
    head_dim = given('head_dim'), max_position_embeddings = given('max_position_embeddings'),
    rms_norm_eps = given('rms_norm_eps'), rope_theta = theta, sliding_window = window,
    tie_word_embeddings = given('tie_word_embeddings'), attention_bias = given('attention_bias') == true,
    mlp_bias = given('mlp_bias') == true,
  }
  o.tie_word_embeddings = o.tie_word_embeddings == true
  -- Qwen2's queries, keys and values have biases and its output projection none.
  if kind == 'qwen2' then o.qkv_bias, o.attention_bias = true, false end
  for _, key in ipairs({ 'vocab_size', 'hidden_size', 'intermediate_size', 'num_hidden_layers',
                         'num_attention_heads' }) do
    if o[key] == nil then check.error(fmt('Llama.from_pretrained: %s has no %s', path, key)) end
  end
  local gen = {}
  for _, key in ipairs({ 'bos_token_id', 'eos_token_id', 'pad_token_id' }) do
    local id = given(key)
    if math.type(id) == 'integer' and id >= 0 and id < o.vocab_size then gen[key] = id end
    if type(id) == 'table' and key == 'eos_token_id' then gen[key] = id end
  end
  return o, gen
end

-- {hf_name, parameter} for every tensor the file holds.
local function entries(model)
  local c = model.config
  local list = { { 'model.embed_tokens.weight', model.embed_tokens.weight } }
  local function add(name, p) if p then list[#list + 1] = { name, p } end end
  for i, layer in ipairs(model.layers) do
    local h = fmt('model.layers.%d.', i - 1)
    local a, m = layer.self_attn, layer.mlp
    add(h .. 'input_layernorm.weight', layer.input_layernorm.weight)
    for _, n in ipairs({ 'q_proj', 'k_proj', 'v_proj', 'o_proj' }) do
      add(h .. 'self_attn.' .. n .. '.weight', a[n].weight)
      add(h .. 'self_attn.' .. n .. '.bias', a[n].bias)
    end
    for _, n in ipairs({ 'gate_proj', 'up_proj', 'down_proj' }) do
      add(h .. 'mlp.' .. n .. '.weight', m[n].weight)
      add(h .. 'mlp.' .. n .. '.bias', m[n].bias)
    end
    add(h .. 'post_attention_layernorm.weight', layer.post_attention_layernorm.weight)
  end
  add('model.norm.weight', model.norm.weight)
  if not c.tie_word_embeddings then add('lm_head.weight', model.lm_head.weight) end
  return list
end

local function shape_str(s) return '[' .. table.concat(s, ', ') .. ']' end

-- Tensors older transformers saved that are not parameters.
local function skipped(name) return name:match('^model%.layers%.%d+%.self_attn%.rotary_emb%.inv_freq$') end

local function copy_from(r, model)
  local used = {}
  for _, e in ipairs(entries(model)) do
    local name, p = e[1], e[2]
    local info = r.info[name]
    if not info then check.error(fmt('Llama.from_pretrained: %s has no tensor %s', r.source, name)) end
    used[name] = true
    local want = zero.shape(p)
    if shape_str(want) ~= shape_str(info.shape) then
      check.error(fmt('Llama.from_pretrained: %s: tensor %s has shape %s, expected %s (from config.json)',
                      info.path, name, shape_str(info.shape), shape_str(want)))
    end
    local t = r:read(name)
    if not t:is_float() then
      check.error(fmt('Llama.from_pretrained: %s: tensor %s is %s, expected a float dtype', info.path, name,
                      t:dtype()))
    end
    zero.GatheredParameters({ p }, function() zl.no_grad(function() p:copy_(t) end) end, 0)
  end
  for _, name in ipairs(r.order) do
    if not used[name] and not skipped(name) then
      local info = r.info[name]
      if name ~= 'lm_head.weight' then
        check.error(fmt('Llama.from_pretrained: %s: unexpected tensor %s', info.path, name))
      end
      if not hf_weights.same_as(r, name, model.embed_tokens.weight) then
        check.error(fmt('Llama.from_pretrained: %s: lm_head.weight differs from model.embed_tokens.weight, '
                        .. 'but config.json ties them (tie_word_embeddings)', info.path))
      end
    end
  end
end

--- load(Llama, dir): from_pretrained, in eval mode. Raises naming the file
--- and the key or tensor at fault.
function M.load(Llama, dir)
  return hf_weights.load('Llama.from_pretrained', dir, options, Llama, copy_from)
end

local save_known = { max_shard_size = true }

--- save(model, dir [, {max_shard_size = '5GB'}]): config.json and the
--- weights (sharded above max_shard_size), creating dir.
function M.save(model, dir, opts)
  local o = check.options('Llama.save_pretrained', opts, save_known)
  local max_shard = hf_weights.size('Llama.save_pretrained', o.max_shard_size or '5GB')
  local c = model.config
  if c.model_type == 'qwen2' and (not c.qkv_bias or c.attention_bias) then
    check.error('Llama.save_pretrained: a qwen2 model has biases on q, k and v and none on o_proj')
  end
  if c.model_type ~= 'llama' and c.mlp_bias then
    check.error(fmt('Llama.save_pretrained: a %s model has no mlp biases', c.model_type))
  end
  if c.model_type == 'llama' and c.qkv_bias ~= c.attention_bias then
    check.error('Llama.save_pretrained: a llama model has biases on all of q, k, v, o_proj or on none')
  end
  if c.model_type == 'mistral' and c.attention_bias then
    check.error('Llama.save_pretrained: a mistral model has no attention biases')
  end
  zl.core.mkdirs(dir)
  local cfg = {
    model_type = c.model_type, architectures = setmetatable({ architectures[c.model_type] }, json.array),
    vocab_size = c.vocab_size, hidden_size = c.hidden_size, intermediate_size = c.intermediate_size,
    num_hidden_layers = c.num_hidden_layers, num_attention_heads = c.num_attention_heads,
    num_key_value_heads = c.num_key_value_heads, head_dim = c.head_dim,
    max_position_embeddings = c.max_position_embeddings, rms_norm_eps = c.rms_norm_eps, rope_theta = c.rope_theta,
    rope_scaling = json.null, tie_word_embeddings = c.tie_word_embeddings, hidden_act = 'silu',
    attention_dropout = 0.0, initializer_range = 0.02, use_cache = true, torch_dtype = 'float32',
  }
  if c.model_type == 'llama' then cfg.attention_bias, cfg.mlp_bias, cfg.pretraining_tp = c.attention_bias, c.mlp_bias, 1 end
  if c.model_type == 'qwen2' then cfg.use_sliding_window, cfg.sliding_window = c.sliding_window ~= nil, c.sliding_window end
  if c.model_type == 'mistral' then cfg.sliding_window = c.sliding_window or json.null end
  for key, id in pairs(model.generation_config or {}) do
    cfg[key] = type(id) == 'table' and setmetatable(table.move(id, 1, #id, 1, {}), json.array) or id
  end
  local list = entries(model)
  local params = {}
  for i, e in ipairs(list) do params[i] = e[2] end
  local out = {}
  zero.GatheredParameters(params, function()
    for i, e in ipairs(list) do out[i] = { e[1], e[2]:detach():clone() } end
  end)
  hf_weights.save(dir, out, max_shard)
  zl.write_file_atomic(dir .. '/config.json', json.encode(cfg, 2) .. '\n')
end

return M
