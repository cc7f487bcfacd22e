-- zlua.lora: which layers convert, that only lora_A/lora_B take
-- gradients and optimizer state, fused and unfused outputs, the gradients
-- against finite differences, and the error paths.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local lora = require 'zlua.lora'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local function tiny_gpt()
  zl.manual_seed(7)
  return nn.GPT{ vocab_size = 13, block_size = 8, n_layer = 2, n_head = 2, n_embd = 8 }
end

local idx = zl.tensor({ { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }, 'i64')

local function trainable(model)
  local out = {}
  for name, p in model:named_parameters() do
    if p:requires_grad() then out[#out + 1] = name end
  end
  return out
end

-- B is zero at first: give it values so that the update shows.
local function randomise_B(model)
  for _, m in ipairs(model:modules()) do
    if nn.Module.is_instance(m, nn.LinearLoRA) then zl.no_grad(function() m.lora_B:normal_(0, 0.5) end) end
  end
end

test('convert: matching Linear layers by substring, shapes and initial values', function()
  local model = tiny_gpt()
  local before = model(idx)
  local _, names = lora.convert_linear_layer_to_lora(model, 'mlp', 4)
  check_eq(table.concat(names, ' '), 'blocks.1.mlp.1 blocks.1.mlp.3 blocks.2.mlp.1 blocks.2.mlp.3', 'converted names')
  local l = model.blocks[1].mlp[1]
  check(nn.Module.is_instance(l, nn.LinearLoRA), 'the layer is a LinearLoRA')
  check_eq(table.concat(l.lora_A:shape(), 'x'), '4x8', 'A is [dim, in]')
  check_eq(table.concat(l.lora_B:shape(), 'x'), '32x4', 'B is [out, dim]')
  check_eq(l.lora_B:abs():sum():item(), 0, 'B starts at zero')
  check(l.lora_A:abs():max():item() <= 1 / math.sqrt(8) and l.lora_A:abs():sum():item() > 0,
        'A uniform in +-1/sqrt(in)')
  check_eq(l.scaling, 1 / 4, 'scaling alpha/dim with alpha 1')
  check(not l.weight:requires_grad() and not l.bias:requires_grad(), 'base weight and bias frozen')
  check_close(model(idx), before, 0, 'a fresh LoRA model computes what the model did')
  local _, more = lora.convert_linear_layer_to_lora(model, { 'attn.qkv', 'lm_head' }, 2, 4, 0.1)
  check_eq(#more, 3, 'a list of patterns')
  check_eq(model.lm_head.scaling, 2, 'scaling alpha/dim')
end)

test('only_optimize_lora_parameters: only lora_A and lora_B train and take gradients', function()
  local model = tiny_gpt()
  lora.convert_linear_layer_to_lora(model, 'attn', 2)
  lora.only_optimize_lora_parameters(model)
  local names = trainable(model)
  check_eq(#names, 8, 'two layers per block, A and B each')
  for _, n in ipairs(names) do check(n:find('lora_[AB]$') ~= nil, n .. ' is a LoRA parameter') end
  local _, loss = model(idx, idx)
  loss:backward()
  for name, p in model:named_parameters() do
    check_eq(p.grad ~= nil, name:find('lora_[AB]$') ~= nil, name .. ': a gradient only on A and B')
  end
  local g = nn.get_optimizer_grouped_parameters(model, 0.1)
  check_eq(#g[1].params + #g[2].params, 8, 'the decay groups hold only A and B')
end)

test('fuse and unfuse: same outputs to 1e-5, the base weight restored', function()
  local model = tiny_gpt()
  lora.convert_linear_layer_to_lora(model, 'blocks', 3, 2)
  randomise_B(model)
  model:eval()
  local w0 = model.blocks[1].attn.qkv.weight:clone()
  local unfused = model(idx)
  lora.fuse(model)
  check(model.blocks[1].attn.qkv.fused, 'fused')
  check(zl.abs(model.blocks[1].attn.qkv.weight - w0):max():item() > 1e-3, 'the weight took the update')
  check_close(model(idx), unfused, 1e-5, 'fused output == unfused output')
  lora.fuse(model)
  check_close(model(idx), unfused, 1e-5, 'fusing twice changes nothing')
  lora.unfuse_lora_weight(model)
  check_close(model.blocks[1].attn.qkv.weight, w0, 1e-6, 'unfuse restores the base weight')
  check_close(model(idx), unfused, 1e-5, 'unfused output as before')
end)

test('gradients of A, B and the input against central differences', function()
  zl.manual_seed(3)
  local layer = nn.LinearLoRA(nn.Linear(5, 4), 3, 6)
  zl.no_grad(function() layer.lora_B:normal_(0, 1) end)
  local x = zl.randn(2, 5):requires_grad(true)
  -- A quadratic loss: a central difference is exact for it up to rounding.
  local function loss() return (layer(x) * layer(x)):sum() end
  loss():backward()
  for _, t in ipairs({ layer.lora_A, layer.lora_B, x }) do
    local analytic = t.grad:totable()
    local flat = t:view(t:numel())
    local num = {}
    for i = 1, t:numel() do
      local v, h = flat[i], 1e-2
      local function set(value) zl.no_grad(function() flat:narrow(1, i, 1):fill_(value) end) end
      set(v + h)
      local up = loss():item()
      set(v - h)
      local down = loss():item()
      set(v)
      num[i] = (up - down) / (2 * h)
    end
    check_close(H.flat(analytic), num, 2e-3, 'gradient against finite differences')
  end
  check(layer.weight.grad == nil and layer.bias.grad == nil, 'no gradient on the frozen base')
end)

test('the engine keeps gradients and optimizer state for A and B only', function()
  local model = tiny_gpt()
  lora.convert_linear_layer_to_lora(model, 'mlp', 4)
  lora.only_optimize_lora_parameters(model)
  local n = 0
  for _, p in ipairs(model:parameters()) do
    if p:requires_grad() then n = n + math.ceil(p:numel() / 16) * 16 end
  end
  local engine = zl.initialize { model = model, config = { train_batch_size = 2,
    optimizer = { type = 'AdamW', params = { lr = 1e-2 } } } }
  local _, loss = engine(idx, idx)
  engine:backward(loss)
  engine:step()
  local rep = engine:memory_report()
  check_eq(rep.grads, 4 * n, 'gradient bytes: A and B only')
  check_eq(rep.moments, 2 * 4 * n, 'moment bytes: A and B only')
  check_eq(rep.frozen, 0, 'nothing partitioned at stage 0')
end)

test('errors name the culprit', function()
  local model = tiny_gpt()
  check_error(function() lora.convert_linear_layer_to_lora(model, 'nothing', 4) end,
              'no Linear layer of the model has a name containing "nothing"')
  check_error(function() lora.convert_linear_layer_to_lora(model, 'mlp', 0) end, 'dim')
  check_error(function() lora.convert_linear_layer_to_lora(model, 'mlp', 2, -1) end,
              'alpha must be a positive number, got -1')
  check_error(function() lora.convert_linear_layer_to_lora(model, { 3 }, 2) end, 'pattern 1 must be a string')
  check_error(function() lora.only_optimize_lora_parameters(3) end, 'expected a module, got number')
  check_error(function() nn.LinearLoRA({}, 2) end, 'expected a Linear layer')
end)

H.done()
