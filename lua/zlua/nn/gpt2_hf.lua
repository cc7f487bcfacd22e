--[[ Hugging Face GPT-2 files for zlua.nn.GPT: config.json and model.safetensors
  (or its shards, zlua.nn.hf_weights) in the layout transformers'
  GPT2LMHeadModel reads and writes (GPT.from_pretrained,
  model:save_pretrained). Its Conv1D weights are [in, out], our Linear's
  [out, in]; the head is the token embedding (tied), the attention mask
  buffers are skipped. ]]

local zl = require 'zlua'
local json = require 'zlua.json'
local zero = require 'zlua.zero'
local check = require 'zlua.nn.check'
local hf_weights = require 'zlua.nn.hf_weights'

local fmt = string.format

local M = {}

-- Keys of config.json that change the model and the values we build; a value
-- we cannot build is refused rather than loaded into a different model.
local activations = { gelu_new = 'gelu_new', gelu_pytorch_tanh = 'gelu_new', gelu = 'gelu' }
local required_value = {
  scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false, add_cross_attention = false,
  tie_word_embeddings = true, is_encoder_decoder = false,
}
-- Keys read elsewhere here, or that do not change the language model's output.
local harmless = {
  model_type = true, vocab_size = true, n_positions = true, n_ctx = true, n_embd = true, n_layer = true,
  n_head = true, n_inner = true, activation_function = true, layer_norm_epsilon = true,
  resid_pdrop = true, embd_pdrop = true, attn_pdrop = true, bos_token_id = true, eos_token_id = true,
  pad_token_id = true, architectures = true, initializer_range = true, torch_dtype = true, dtype = true,
  transformers_version = true, use_cache = true, reorder_and_upcast_attn = true, task_specific_params = true,
  summary_type = true, summary_use_proj = true, summary_activation = true, summary_proj_to_labels = true,
  summary_first_dropout = true, _name_or_path = true, _num_labels = true, id2label = true, label2id = true,
  output_past = true, gradient_checkpointing = true,
}


-- GPT{} options from the decoded config.json at path, and the ids generate uses.
local function options(cfg, path)
  local function bad(key, want)
    check.error(fmt('GPT.from_pretrained: %s: %s is %s, expected %s', path, key, tostring(cfg[key]), want))
  end
  local function int(key, fallback)
    local v = cfg[key]
    if v == nil or v == json.null then v = fallback and cfg[fallback] end
    if v == nil then check.error(fmt('GPT.from_pretrained: %s has no %s', path, key)) end
    if math.type(v) ~= 'integer' or v < 1 then bad(key, 'a positive integer') end
    return v
  end
  if type(cfg) ~= 'table' then check.error(fmt('GPT.from_pretrained: %s is not a JSON object', path)) end
  if cfg.model_type ~= nil and cfg.model_type ~= 'gpt2' then bad('model_type', '"gpt2"') end
  for key, want in pairs(required_value) do
    if cfg[key] ~= nil and cfg[key] ~= want then bad(key, tostring(want) .. ' (the only form zlua builds)') end
  end
  local unknown = {}
  for key in pairs(cfg) do
    if not harmless[key] and required_value[key] == nil then unknown[#unknown + 1] = key end
  end
  if #unknown > 0 then
    table.sort(unknown)
    check.error(fmt('GPT.from_pretrained: %s: unknown key(s) %s: not a GPT-2 config zlua can build',
                    path, table.concat(unknown, ', ')))
  end
  local o = {
    vocab_size = int('vocab_size'), block_size = int('n_positions', 'n_ctx'),
    n_layer = int('n_layer'), n_head = int('n_head'), n_embd = int('n_embd'),
  }
  if cfg.n_inner ~= nil and cfg.n_inner ~= json.null and cfg.n_inner ~= 4 * o.n_embd then
    bad('n_inner', fmt('null or 4 * n_embd = %d', 4 * o.n_embd))
  end
  local act = cfg.activation_function or 'gelu_new'
  o.activation = activations[act]
  if not o.activation then bad('activation_function', '"gelu_new", "gelu_pytorch_tanh" or "gelu"') end
  o.layer_norm_epsilon = cfg.layer_norm_epsilon or 1e-5
  if type(o.layer_norm_epsilon) ~= 'number' or not (o.layer_norm_epsilon > 0) then
    bad('layer_norm_epsilon', 'a positive number')
  end
  -- One dropout rate serves embeddings, attention and residuals here.
  local p = cfg.resid_pdrop or 0.1
  for _, key in ipairs({ 'embd_pdrop', 'attn_pdrop' }) do
    if (cfg[key] or 0.1) ~= p then bad(key, fmt('resid_pdrop (%s): zlua has one dropout rate', tostring(p))) end
  end
  o.dropout = p
  local gen = {}
  for _, key in ipairs({ 'bos_token_id', 'eos_token_id', 'pad_token_id' }) do
    local id = cfg[key]
    if math.type(id) == 'integer' and id >= 0 and id < o.vocab_size then gen[key] = id end
  end
  return o, gen
end

-- {hf_name, parameter, conv1d} for every tensor of the file, in the file's
-- naming without the 'transformer.' prefix; conv1d marks the [in, out] weights.
local function entries(model)
  local list = {
    { 'wte.weight', model.wte.weight }, { 'wpe.weight', model.wpe.weight },
  }
  local function add(name, p, conv1d) list[#list + 1] = { name, p, conv1d } end
  for i, block in ipairs(model.blocks) do
    local h = fmt('h.%d.', i - 1)
    local linears = {
      { 'attn.c_attn', block.attn.qkv }, { 'attn.c_proj', block.attn.proj },
      { 'mlp.c_fc', block.mlp[1] }, { 'mlp.c_proj', block.mlp[3] },
    }
    add(h .. 'ln_1.weight', block.ln1.weight)
    add(h .. 'ln_1.bias', block.ln1.bias)
    for _, l in ipairs(linears) do
      add(h .. l[1] .. '.weight', l[2].weight, true)
      add(h .. l[1] .. '.bias', l[2].bias)
    end
    add(h .. 'ln_2.weight', block.ln2.weight)
    add(h .. 'ln_2.bias', block.ln2.bias)
  end
  add('ln_f.weight', model.ln_f.weight)
  add('ln_f.bias', model.ln_f.bias)
  return list
end

local function shape_str(s) return '[' .. table.concat(s, ', ') .. ']' end

-- The shape the file holds for parameter p (whole, also when zero.Init
-- built the model partitioned).
local function file_shape(p, conv1d)
  local s = zero.shape(p)
  if conv1d then return { s[2], s[1] } end
  return s
end

-- Names the file may hold besides the parameters: the attention mask buffers
-- older transformers saved, and the head (tied: it must equal wte).
local function skipped(name)
  return name:match('^h%.%d+%.attn%.bias$') or name:match('^h%.%d+%.attn%.masked_bias$')
end

local function copy_from(f, model)
  local used, info, prefix = {}, f.info, ''
  for _, name in ipairs(f.order) do
    if name:sub(1, 12) == 'transformer.' then prefix = 'transformer.' end
  end
  for _, e in ipairs(entries(model)) do
    local name, p, conv1d = e[1], e[2], e[3]
    local key = info[prefix .. name] and prefix .. name or (info[name] and name)
    if not key then
      check.error(fmt('GPT.from_pretrained: %s has no tensor %s%s', f.source, prefix, name))
    end
    used[key] = true
    local path = info[key].path
    local want, got = file_shape(p, conv1d), info[key].shape
    if shape_str(want) ~= shape_str(got) then
      check.error(fmt('GPT.from_pretrained: %s: tensor %s has shape %s, expected %s (from config.json)',
                      path, key, shape_str(got), shape_str(want)))
    end
    local t = f:read(key)
    if not t:is_float() then
      check.error(fmt('GPT.from_pretrained: %s: tensor %s is %s, expected a float dtype', path, key, t:dtype()))
    end
    if conv1d then t = t:transpose(1, 2) end
    zero.GatheredParameters({ p }, function() zl.no_grad(function() p:copy_(t) end) end, 0)
  end
  for _, key in ipairs(f.order) do
    local e = info[key]
    local bare = key:sub(1, #prefix) == prefix and key:sub(#prefix + 1) or key
    if not used[key] and not skipped(bare) then
      if key ~= 'lm_head.weight' then
        check.error(fmt('GPT.from_pretrained: %s: unexpected tensor %s', e.path, key))
      end
      local wte = model.wte.weight
      if shape_str(e.shape) ~= shape_str(zero.shape(wte)) then
        check.error(fmt('GPT.from_pretrained: %s: tensor lm_head.weight has shape %s, expected %s',
                        e.path, shape_str(e.shape), shape_str(zero.shape(wte))))
      end
      if not hf_weights.same_as(f, key, wte) then
        check.error(fmt('GPT.from_pretrained: %s: lm_head.weight differs from wte.weight; '
                        .. 'zlua ties the head to the token embedding', e.path))
      end
    end
  end
end

--- load(GPT, dir): GPT.from_pretrained(dir), in eval mode (as transformers
--- loads it: model:train() before fine-tuning). Raises naming the file and the
--- key or tensor at fault: a config zlua cannot build, a missing tensor, a
--- wrong shape, an unexpected tensor.
function M.load(GPT, dir)
  return hf_weights.load('GPT.from_pretrained', dir, options, GPT, copy_from)
end

local save_known = { max_shard_size = true }

--- save(model, dir [, {max_shard_size = '5GB'}]): model:save_pretrained(dir),
--- creating dir: config.json and model.safetensors, sharded above
--- max_shard_size (names under 'transformer.', Conv1D weights [in, out], no
--- lm_head: transformers ties it back to wte).
function M.save(model, dir, opts)
  local o = check.options('GPT.save_pretrained', opts, save_known)
  local max_shard = hf_weights.size('GPT.save_pretrained', o.max_shard_size or '5GB')
  local c = model.config
  if not c.bias then
    check.error('GPT.save_pretrained: GPT-2 has biases and this model was built with bias = false')
  end
  zl.core.mkdirs(dir)
  local cfg = {
    model_type = 'gpt2', architectures = setmetatable({ 'GPT2LMHeadModel' }, json.array),
    vocab_size = c.vocab_size, n_positions = c.block_size, n_ctx = c.block_size, n_embd = c.n_embd,
    n_layer = c.n_layer, n_head = c.n_head, n_inner = json.null, activation_function = c.activation,
    layer_norm_epsilon = c.layer_norm_epsilon, resid_pdrop = c.dropout, embd_pdrop = c.dropout,
    attn_pdrop = c.dropout, initializer_range = 0.02, scale_attn_weights = true,
    scale_attn_by_inverse_layer_idx = false, reorder_and_upcast_attn = false, tie_word_embeddings = true,
    use_cache = true,
    -- null rather than transformers' default 50256, which may lie outside our vocabulary
    bos_token_id = json.null, eos_token_id = json.null,
  }
  for key, id in pairs(model.generation_config or {}) do cfg[key] = id end
  local list = entries(model)
  local params = {}
  for i, e in ipairs(list) do params[i] = e[2] end
  local out = {}
  zero.GatheredParameters(params, function()
    for i, e in ipairs(list) do
      local t = e[2]:detach()
      out[i] = { 'transformer.' .. e[1], e[3] and t:transpose(1, 2):contiguous() or t:clone() }
    end
  end)
  hf_weights.save(dir, out, max_shard)
  zl.write_file_atomic(dir .. '/config.json', json.encode(cfg, 2) .. '\n')
end

return M
