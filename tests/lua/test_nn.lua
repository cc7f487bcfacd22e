-- zlua.nn: parameter order and names, state_dict round trips and load errors,
-- train/eval, printing, layer outputs against plain-Lua references, GPT
-- gradients, counts and initialisation, error paths, the decay-groups helper.
local zl = require 'zlua'
local nn = require 'zlua.nn'
local H = require 'harness'
local test, check, check_eq, check_close, check_error = H.test, H.check, H.check_eq, H.check_close, H.check_error

local function names_of(model)
  local out = {}
  for name in model:named_parameters() do out[#out + 1] = name end
  return out
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function list_str(t) return '{' .. table.concat(t, ', ') .. '}' end

local function tiny_gpt(extra)
  local cfg = { vocab_size = 13, block_size = 8, n_layer = 2, n_head = 2, n_embd = 8 }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return nn.GPT(cfg)
end

-- The number of parameters of a GPT by the formula, the head tied to wte.
local function gpt_count(v, t, l, c, bias)
  local b = bias and 1 or 0
  local ln = c + b * c
  local block = ln + (3 * c * c + b * 3 * c) + (c * c + b * c) + ln + (4 * c * c + b * 4 * c) + (4 * c * c + b * c)
  return v * c + t * c + l * block + ln
end

-- |got / want - 1| <= tol: the spreads below are far under 1, where
-- check_close's tolerance would be as good as absolute.
local function check_rel(got, want, tol, msg)
  check(math.abs(got / want - 1) <= tol, string.format('%s: got %.6g, expected %.6g within %g%%',
                                                         msg, got, want, tol * 100))
end

-- Mean and standard deviation of a tensor's elements, in doubles.
local function stats(t)
  local xs = H.flat(t)
  local s, ss = 0, 0
  for _, x in ipairs(xs) do s = s + x end
  local mean = s / #xs
  for _, x in ipairs(xs) do ss = ss + (x - mean) ^ 2 end
  return mean, math.sqrt(ss / #xs), xs
end

local Net = nn.Module:extend('Net')
function Net:__init(n)
  self.scale = zl.ones(n)
  self.fc = nn.Linear(n, 2)
  self:register_buffer('steps', zl.zeros(1))
  self:register_buffer('scratch', zl.zeros(3), false)
  self.offset = zl.zeros(2)
  self.label = 'plain fields stay plain'
end
function Net:forward(x) return self.fc(x * self.scale) + self.offset end

test('parameter_order_and_names', function()
  local seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
  check(same_list(names_of(seq), { '1.weight', '1.bias', '3.weight', '3.bias' }), 'Sequential names')
  -- A buffer on the Sequential itself is no child: forward and # skip it.
  seq:register_buffer('steps', zl.zeros(1))
  seq:add(nn.ReLU())
  check(#seq == 4 and seq[4] ~= nil, 'a buffer is not counted among the children')
  check(table.concat(seq(zl.ones(3, 4)):shape(), 'x') == '3x2', 'forward runs the children only')
  local net = Net(3)
  check(same_list(names_of(net), { 'scale', 'fc.weight', 'fc.bias', 'offset' }),
        'definition order across parameters and children: ' .. list_str(names_of(net)))
  local params = net:parameters()
  check_eq(#params, 4, 'parameters() is an array')
  check(params[2] == net.fc.weight and params[4] == net.offset, 'parameters() follows named_parameters()')
  check_eq(net.label, 'plain fields stay plain')
  for _, p in ipairs(params) do
    check_eq(p:category(), 'params', 'parameters are charged to params')
    check(p:requires_grad(), 'parameters require grad')
  end
  -- Reassigning keeps the first position; nil removes.
  net.scale = zl.full(3, 2.0)
  check_eq(names_of(net)[1], 'scale', 'reassigned parameter keeps its place')
  net.offset = nil
  check(same_list(names_of(net), { 'scale', 'fc.weight', 'fc.bias' }), 'assigning nil removes a parameter')
  check(net.offset == nil, 'removed parameter reads as nil')

  local g = tiny_gpt()
  local expect = { 'wte.weight', 'wpe.weight', 'blocks.1.ln1.weight', 'blocks.1.ln1.bias',
                   'blocks.1.attn.qkv.weight', 'blocks.1.attn.qkv.bias', 'blocks.1.attn.proj.weight',
                   'blocks.1.attn.proj.bias', 'blocks.1.ln2.weight', 'blocks.1.ln2.bias',
                   'blocks.1.mlp.1.weight', 'blocks.1.mlp.1.bias', 'blocks.1.mlp.3.weight' }
  local got = names_of(g)
  check(same_list({ table.unpack(got, 1, #expect) }, expect), 'GPT names: ' .. list_str(got))
  check_eq(got[#got - 1], 'ln_f.weight')
  check_eq(got[#got], 'ln_f.bias', 'the tied head adds no name of its own')
  check(g.lm_head.weight == g.wte.weight, 'the head shares the token embedding')
  local hits = 0
  for _, p in ipairs(g:parameters()) do if p == g.wte.weight then hits = hits + 1 end end
  check_eq(hits, 1, 'the tied weight appears once in parameters()')
  check_eq(#g:parameters(), 2 + 2 * 12 + 2)
end)

test('gpt_parameter_count', function()
  check_eq(tiny_gpt():num_parameters(), gpt_count(13, 8, 2, 8, true), 'with biases')
  local g = tiny_gpt{ bias = false, n_layer = 3, n_embd = 12, n_head = 3 }
  check_eq(g:num_parameters(), gpt_count(13, 8, 3, 12, false), 'without biases')
  local n = 0
  for _, p in ipairs(g:parameters()) do n = n + p:numel() end
  check_eq(n, g:num_parameters(), 'num_parameters sums parameters()')
end)

test('module_tree', function()
  local list = nn.ModuleList{ nn.Linear(2, 2), nn.ReLU() }
  list:append(nn.Linear(2, 3))
  check_eq(#list, 3, '# counts a ModuleList')
  local seen = {}
  for i, m in ipairs(list) do seen[i] = m.__name end
  check(same_list(seen, { 'Linear', 'ReLU', 'Linear' }), 'ipairs walks a ModuleList')
  check_eq(list[3].out_features, 3, 'list[i] is the i-th module')
  local seq = nn.Sequential(nn.Linear(2, 2), nn.GELU())
  check_eq(#seq, 2)
  check_eq(seq[2].__name, 'GELU')

  local order = {}
  local model = nn.Sequential(nn.Sequential(nn.Linear(1, 1)), nn.ReLU())
  model:apply(function(m) order[#order + 1] = m.__name end)
  check(same_list(order, { 'Linear', 'Sequential', 'ReLU', 'Sequential' }),
        'apply visits children first, then the module: ' .. list_str(order))
  local mods = {}
  for name, m in model:named_modules() do mods[#mods + 1] = name .. '=' .. m.__name end
  check(same_list(mods, { '=Sequential', '1=Sequential', '1.1=Linear', '2=ReLU' }), list_str(mods))

  local Scaled = nn.Linear:extend('ScaledLinear')
  function Scaled:__init(i, o)
    nn.Linear.__init(self, i, o)
    self.gain = 2
  end
  function Scaled:forward(x) return nn.Linear.forward(self, x) * self.gain end
  local s = Scaled(2, 3)
  check_eq(tostring(s), 'ScaledLinear(2 -> 3)', 'a subclass prints under its own name')
  check(nn.Module.is_instance(s, nn.Linear) and not nn.Module.is_instance(s, nn.Conv2d), 'is_instance')
  check(same_list(names_of(s), { 'weight', 'bias' }), 'a subclass keeps its parent parameters')
  local x = zl.randn(4, 2)
  check_close(s(x), zl.linear(x, s.weight, s.bias) * 2, 1e-6, 'a subclass forward')

  local net = Net(3)
  local bufs = {}
  for name in net:named_buffers() do bufs[#bufs + 1] = name end
  check(same_list(bufs, { 'steps', 'scratch' }), 'buffers in order')
  check(not net.steps:requires_grad(), 'a buffer is not trained')
  check_error(function() net.fc = 3 end, "cannot assign a number to 'fc', which holds a module")
  check_error(function() net:register_parameter('a.b', zl.zeros(1)) end, 'without dots')
  check_error(function() net.ids = zl.tensor{ 1, 2 } end, 'parameter ids must be a floating-point tensor, got i64')
  check_error(function() nn.Module()(zl.zeros(1)) end, 'Module: forward is not implemented')
  check_error(function() list(zl.zeros(2)) end, 'ModuleList: has no forward')
end)

test('state_dict_round_trip', function()
  zl.manual_seed(1)
  local a = tiny_gpt()
  zl.manual_seed(2)
  local b = tiny_gpt()
  local idx = zl.tensor{ { 1, 2, 3, 4 }, { 5, 6, 7, 12 } }
  local sd, keys = a:state_dict()
  check(same_list(keys, names_of(a)), 'keys are the parameter names in order')
  local iterated = {}
  for k in pairs(sd) do iterated[#iterated + 1] = k end
  check(same_list(iterated, keys), 'pairs(sd) follows definition order')
  check(sd['lm_head.weight'] == nil, 'a tied weight is saved once')
  check(not sd['wte.weight']:requires_grad(), 'entries are detached')
  check(math.abs(H.flat(a(idx))[1] - H.flat(b(idx))[1]) > 0, 'different seeds give different models')
  local r = b:load_state_dict(sd)
  check_eq(#r.missing_keys + #r.unexpected_keys, 0)
  check_close(b(idx), a(idx), 0, 'identical outputs after load_state_dict')
  check(b.lm_head.weight == b.wte.weight, 'loading keeps the tie')

  -- PyTorch-style dicts name the tied weight twice: the alias is accepted.
  sd['lm_head.weight'] = sd['wte.weight']
  b:load_state_dict(sd)

  local net, other = Net(3), Net(3)
  net.steps:fill_(7)
  local nsd, nkeys = net:state_dict()
  check(same_list(nkeys, { 'scale', 'fc.weight', 'fc.bias', 'steps', 'offset' }),
        'persistent buffers are saved in place, non-persistent ones are not: ' .. list_str(nkeys))
  other:load_state_dict(nsd)
  check_eq(other.steps:item(), 7.0, 'buffers load')
end)

test('load_state_dict_errors', function()
  local model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
  local sd = model:state_dict()
  local before = H.flat(model[1].weight)
  sd['1.bias'] = nil
  sd['extra.weight'] = zl.zeros(2)
  sd['3.weight'] = zl.zeros(2, 5)
  sd['1.weight'] = zl.ones(4, 3)
  local err = check_error(function() model:load_state_dict(sd) end, 'Sequential.load_state_dict: the state does not fit the model')
  check(err and err:find('test_nn.lua:%d+: '), 'the message points at the caller: ' .. tostring(err))
  check(err and err:find('missing: 1.bias', 1, true), 'names the missing entry')
  check(err and err:find('unexpected: extra.weight', 1, true), 'names the unexpected entry')
  check(err and err:find('shape mismatch: 3.weight: checkpoint shape [2, 5], model shape [2, 4]', 1, true),
        'names the mis-shaped entry with both shapes')
  check_close(model[1].weight, before, 0, 'nothing is copied when the state does not fit')
  err = check_error(function() model:load_state_dict(sd, false) end, 'shape mismatch: 3.weight')
  check(err and not err:find('missing', 1, true), 'non-strict loading allows missing entries')
  sd['3.weight'] = zl.zeros(2, 4)
  local r = model:load_state_dict(sd, false)
  check(same_list(r.missing_keys, { '1.bias' }) and same_list(r.unexpected_keys, { 'extra.weight' }),
        'non-strict loading reports what it skipped')
  check_close(model[1].weight, zl.ones(4, 3), 0, 'non-strict loading copies what fits')
  check_error(function() model:load_state_dict({ ['1.weight'] = 3 }, false) end, '1.weight: expected a tensor, got number')
  check_error(function() model:load_state_dict(5) end, 'expected a table of tensors, got number')
end)

test('train_eval_dropout', function()
  local model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
  check(model.training and model[2].training, 'modules start in training mode')
  local x = zl.ones(64, 64)
  zl.manual_seed(3)
  local d = model[2]
  local zeros, twos = 0, 0
  for _, v in ipairs(H.flat(d(x))) do
    if v == 0 then zeros = zeros + 1 elseif v == 2 then twos = twos + 1 end
  end
  check_eq(zeros + twos, 4096, 'training: each element is dropped or scaled by 1/(1-p)')
  check(zeros > 1800 and zeros < 2300, 'training: about half are dropped, got ' .. zeros)
  check(model:eval() == model, 'eval returns the module')
  check(not model.training and not d.training, 'eval reaches every descendant')
  check_close(d(x), x, 0, 'eval: identity')
  model:train()
  check(d.training, 'train() turns it back on')
  model:train(false)
  check(not d.training, 'train(false) is eval()')
  check_error(function() nn.Dropout(1.5) end, 'Dropout: p must be a number in [0, 1], got 1.5')
end)

test('printing', function()
  local seq = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10, false))
  check_eq(tostring(seq), table.concat({
    'Sequential(',
    '  (1): Linear(64 -> 256)',
    '  (2): ReLU()',
    '  (3): Dropout(p=0.1)',
    '  (4): Linear(256 -> 10, bias=false)',
    ')' }, '\n'))
  local nested = nn.Sequential(nn.Conv2d(3, 6, 5), nn.MaxPool2d(2, 2), nn.Sequential(nn.Flatten(), nn.GELU('tanh')))
  check_eq(tostring(nested), table.concat({
    'Sequential(',
    '  (1): Conv2d(3 -> 6, 5x5)',
    '  (2): MaxPool2d(2x2)',
    '  (3): Sequential(',
    '    (1): Flatten(start_dim=2)',
    "    (2): GELU(approximate='tanh')",
    '  )',
    ')' }, '\n'))
  check_eq(tostring(nn.Conv2d(1, 2, { 3, 1 }, { stride = 2, padding = { 1, 0 }, bias = false })),
           'Conv2d(1 -> 2, 3x1, stride=2, padding=1x0, bias=false)')
  check_eq(tostring(nn.LayerNorm(16)), 'LayerNorm(16, eps=1e-05)')
  check_eq(tostring(nn.Embedding(65, 32)), 'Embedding(65, 32)')
  check_eq(tostring(nn.CrossEntropyLoss{ ignore_index = -1 }), 'CrossEntropyLoss(ignore_index=-1)')
  local g = tostring(tiny_gpt())
  check(g:find('^GPT%(\n  vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8\n  %(wte%): Embedding%(13, 8%)'),
        'GPT prints its config then its children:\n' .. g)
  check(g:find('\n    (2): TransformerBlock(\n      (ln1): LayerNorm(8, eps=1e-05)\n      (attn): CausalSelfAttention(\n'
               .. '        n_embd=8, n_head=2\n        (qkv): Linear(8 -> 24)', 1, true), 'nested blocks are indented')
end)

-- y[i][o] = sum_k x[i][k] w[o][k] + b[o], in doubles.
local function linear_ref(x, w, b)
  local y = {}
  for i = 1, #x do
    y[i] = {}
    for o = 1, #w do
      local s = b and b[o] or 0
      for k = 1, #w[o] do s = s + x[i][k] * w[o][k] end
      y[i][o] = s
    end
  end
  return y
end

test('linear_forward', function()
  local lin = nn.Linear(5, 3)
  local x = zl.randn(4, 5)
  check_close(lin(x), linear_ref(x:totable(), lin.weight:totable(), lin.bias:totable()), 1e-5,
              'Linear against a plain-Lua reference')
  check_close(lin(x), x:matmul(lin.weight:t()) + lin.bias, 1e-6, 'equals x w^T + b')
  local x3 = zl.randn(2, 4, 5)
  check(same_list(lin(x3):shape(), { 2, 4, 3 }), 'leading dims are kept')
  check_close(lin(x3):reshape(8, 3), lin(x3:reshape(8, 5)), 1e-6)
  local nob = nn.Linear(5, 3, false)
  check(nob.bias == nil, 'bias=false has no bias')
  check_close(nob(x), linear_ref(x:totable(), nob.weight:totable()), 1e-5)
  local err = check_error(function() nn.Linear(0, 3) end, 'Linear: in_features must be a positive integer, got 0')
  check(err and err:find('^[^\n]*test_nn%.lua:%d+: Linear:'), 'points at the constructor call: ' .. tostring(err))
  check_error(function() nn.Linear(2, 3)(zl.zeros(2, 4)) end, 'linear:')
end)

-- softmax(q k^T / sqrt(d) + causal mask) v per head, then the output
-- projection, for one sequence x [T][C], in doubles.
local function attention_ref(x, attn)
  local c, h = attn.n_embd, attn.n_head
  local d = c // h
  local qkv = linear_ref(x, attn.qkv.weight:totable(), attn.qkv.bias:totable())
  local t = #x
  local y = {}
  for i = 1, t do y[i] = {} end
  for head = 0, h - 1 do
    for i = 1, t do
      local scores, hi = {}, -math.huge
      for j = 1, i do
        local s = 0
        for e = 1, d do s = s + qkv[i][head * d + e] * qkv[j][c + head * d + e] end
        scores[j] = s / math.sqrt(d)
        hi = math.max(hi, scores[j])
      end
      local total = 0
      for j = 1, i do scores[j] = math.exp(scores[j] - hi) total = total + scores[j] end
      for e = 1, d do
        local s = 0
        for j = 1, i do s = s + scores[j] / total * qkv[j][2 * c + head * d + e] end
        y[i][head * d + e] = s
      end
    end
  end
  return linear_ref(y, attn.proj.weight:totable(), attn.proj.bias:totable())
end

test('attention_forward', function()
  zl.manual_seed(4)
  local attn = nn.CausalSelfAttention{ n_embd = 6, n_head = 2 }
  local x = zl.randn(2, 5, 6)
  local y = attn(x)
  check(same_list(y:shape(), { 2, 5, 6 }), 'shape kept')
  local xs = x:totable()
  check_close(y:select(1, 1), attention_ref(xs[1], attn), 1e-5, 'first sequence against the reference')
  check_close(y:select(1, 2), attention_ref(xs[2], attn), 1e-5, 'second sequence against the reference')
  -- With dropout on, training spells attention out; a negligible p must
  -- agree with the fused kernel.
  local p = 1e-12
  attn.dropout, attn.attn_drop.p, attn.resid_drop.p = p, p, p
  check_close(attn(x), y, 1e-5, 'explicit attention path equals the fused one')
  check_error(function() nn.CausalSelfAttention{ n_embd = 6, n_head = 4 } end,
              'CausalSelfAttention: n_embd (6) must be a multiple of n_head (4)')
  check_error(function() attn(zl.zeros(2, 5)) end, 'CausalSelfAttention: expected input [B, T, 6], got [2, 5]')
end)

local function ce_ref(logits, target)
  local total = 0
  for i = 1, #logits do
    local hi, s = -math.huge, 0
    for _, v in ipairs(logits[i]) do hi = math.max(hi, v) end
    for _, v in ipairs(logits[i]) do s = s + math.exp(v - hi) end
    total = total + (math.log(s) + hi - logits[i][target[i] + 1])
  end
  return total / #logits
end

test('losses', function()
  local crit = nn.CrossEntropyLoss()
  local logits = zl.randn(2, 3, 5)
  local target = zl.tensor{ { 0, 4, 2 }, { 1, 1, 3 } }
  local flat_logits = logits:reshape(6, 5)
  local flat_target = target:reshape(6)
  local want = ce_ref(flat_logits:totable(), flat_target:totable())
  check_close(crit(logits, target):item(), want, 1e-5, '[B, T, C] with [B, T]')
  check_close(crit(flat_logits, flat_target):item(), want, 1e-5, '[N, C] with [N]')
  local none = nn.CrossEntropyLoss{ reduction = 'none' }(logits, target)
  check(same_list(none:shape(), { 2, 3 }), "reduction 'none' keeps [B, T]")
  local ignored = nn.CrossEntropyLoss{ ignore_index = 4 }(flat_logits, flat_target)
  local rows, keep = flat_logits:totable(), {}
  local kept_t = {}
  for i, t in ipairs(flat_target:totable()) do
    if t ~= 4 then keep[#keep + 1] = rows[i] kept_t[#kept_t + 1] = t end
  end
  check_close(ignored:item(), ce_ref(keep, kept_t), 1e-5, 'ignore_index leaves entries out of the mean')
  check_error(function() nn.CrossEntropyLoss{ reduce = 'sum' } end,
              'CrossEntropyLoss: unknown option "reduce" (expected ignore_index, label_smoothing, reduction, weight)')
  local a, b = zl.tensor{ 1.0, 2.0, 4.0 }, zl.tensor{ 0.0, 2.0, 1.0 }
  check_close(nn.MSELoss()(a, b):item(), 10 / 3, 1e-6, 'MSELoss mean')
  check_close(nn.MSELoss('sum')(a, b):item(), 10, 1e-6, 'MSELoss sum')
end)

test('cifar_network', function()
  -- The seeds' CIFAR-10 network: conv-pool-conv-pool-fc-fc-fc.
  local net = nn.Sequential(
    nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
    nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
    nn.Flatten(),
    nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
  check_eq(net:num_parameters(), 62006, 'the seeds network has 62006 parameters')
  local out = net(zl.randn(2, 3, 32, 32))
  check(same_list(out:shape(), { 2, 10 }), 'logits [N, 10]')
  local loss = nn.CrossEntropyLoss()(out, zl.tensor{ 3, 7 })
  loss:backward()
  for name, p in net:named_parameters() do check(p.grad ~= nil, name .. ' has a gradient') end
  check(same_list(nn.Conv2d(3, 4, 3, { padding = 1 })(zl.zeros(1, 3, 8, 8)):shape(), { 1, 4, 8, 8 }), 'padding')
  check(same_list(nn.MaxPool2d(3, { stride = 1, padding = 1 })(zl.zeros(1, 1, 4, 4)):shape(), { 1, 1, 4, 4 }),
        'MaxPool2d options table')
  check(same_list(nn.Flatten(1)(zl.zeros(2, 3, 4)):shape(), { 24 }), 'Flatten(1) flattens everything')
  check_error(function() nn.Conv2d(3, 4, 0) end, 'Conv2d: kernel_size must be an integer >= 1 or a pair {h, w} of them, got 0')
end)

test('gpt_gradients_and_loss', function()
  zl.manual_seed(5)
  local g = tiny_gpt{ dropout = 0.1 }
  local idx = zl.tensor{ { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }
  local targets = zl.tensor{ { 2, 3, 4, 5, 6 }, { 7, 8, 9, 10, 11 } }
  local logits, loss = g(idx, targets)
  check(same_list(logits:shape(), { 2, 5, 13 }), 'logits [B, T, V]')
  check_close(loss:item(), ce_ref(logits:reshape(10, 13):totable(), targets:reshape(10):totable()), 1e-5,
              'the loss is the mean cross-entropy of the logits')
  loss:backward()
  for name, p in g:named_parameters() do
    local grad = p.grad
    local nonzero = false
    if grad then for _, v in ipairs(H.flat(grad)) do if v ~= 0 then nonzero = true break end end end
    check(nonzero, name .. ' receives a non-zero gradient')
  end
  g:zero_grad()
  check(g.wte.weight.grad == nil, 'zero_grad drops the gradients')
  g:eval()
  check(g(idx):shape()[3] == 13 and select(2, g(idx)) == nil, 'without targets only logits')
  check_error(function() g(zl.zeros(1, 9, 'i64')) end, 'GPT: sequence length 9 is longer than block_size 8')
  check_error(function() g(zl.zeros(9, 'i64')) end, 'GPT: expected token ids [B, T], got [9]')
  check_error(function() nn.GPT{ vocab_size = 5, block_size = 4, n_layer = 1, n_head = 2 } end,
              'GPT: n_embd must be a positive integer, got nil')
  check_error(function() tiny_gpt{ n_heads = 2 } end, 'GPT: unknown option "n_heads"')
end)

test('error_prefix_names_the_module', function()
  local g = tiny_gpt()
  g:eval()
  g.blocks[2].attn.proj.weight = zl.randn(8, 7)
  local err = check_error(function() g(zl.tensor{ { 1, 2, 3 } }) end, 'blocks.2.attn.proj: linear:')
  check(err and err:find('^[^\n]*test_nn%.lua:%d+: blocks%.2%.attn%.proj: linear:'),
        'the path follows the script position: ' .. tostring(err))
  local seq = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
  check_error(function() seq(zl.zeros(1, 2)) end, '2.2: linear:')
  err = check_error(function() nn.Linear(2, 2)(zl.zeros(1, 3)) end, 'linear:')
  check(err and not err:find(': : ', 1, true) and not err:find('Linear', 1, true), 'a lone module adds no path')
  check_close(g.blocks[1](zl.zeros(1, 2, 8)):sum(0 + 1):shape()[1], 2, 0, 'modules still work after an error')
end)

test('initialisation', function()
  zl.manual_seed(6)
  local lin = nn.Linear(256, 64)
  local bound = 1 / math.sqrt(256)
  local _, sd, xs = stats(lin.weight)
  local inside = true
  for _, v in ipairs(xs) do inside = inside and math.abs(v) <= bound end
  check(inside, 'Linear weights within +-1/sqrt(fan_in)')
  check_rel(sd, bound / math.sqrt(3), 0.05, 'Linear weights are uniform over the bound')
  local _, _, bs = stats(lin.bias)
  inside = true
  for _, v in ipairs(bs) do inside = inside and math.abs(v) <= bound end
  check(inside, 'Linear bias within +-1/sqrt(fan_in)')
  local conv = nn.Conv2d(8, 16, 3)
  local cb = 1 / math.sqrt(8 * 9)
  local _, csd, cs = stats(conv.weight)
  inside = true
  for _, v in ipairs(cs) do inside = inside and math.abs(v) <= cb end
  check(inside, 'Conv2d weights within +-1/sqrt(in * kh * kw)')
  check_rel(csd, cb / math.sqrt(3), 0.08, 'Conv2d weights are uniform over the bound')
  local emean, esd = stats(nn.Embedding(100, 50).weight)
  check(math.abs(emean) < 0.05, 'Embedding mean 0')
  check_rel(esd, 1, 0.05, 'Embedding N(0, 1)')
  local ln = nn.LayerNorm(7)
  check_close(ln.weight, zl.ones(7), 0, 'LayerNorm weight 1')
  check_close(ln.bias, zl.zeros(7), 0, 'LayerNorm bias 0')

  local g = nn.GPT{ vocab_size = 64, block_size = 32, n_layer = 4, n_head = 2, n_embd = 32 }
  local _, wsd = stats(g.blocks[1].mlp[1].weight)
  check_rel(wsd, 0.02, 0.05, 'GPT Linear weights N(0, 0.02)')
  _, wsd = stats(g.wte.weight)
  check_rel(wsd, 0.02, 0.05, 'GPT embeddings N(0, 0.02)')
  local res = 0.02 / math.sqrt(2 * 4)
  _, wsd = stats(g.blocks[2].attn.proj.weight)
  check_rel(wsd, res, 0.1, 'attention out projection N(0, 0.02/sqrt(2 n_layer))')
  _, wsd = stats(g.blocks[3].mlp[3].weight)
  check_rel(wsd, res, 0.05, 'MLP out projection N(0, 0.02/sqrt(2 n_layer))')
  check_close(g.blocks[1].attn.qkv.bias, zl.zeros(96), 0, 'GPT biases 0')
  check_close(g.ln_f.weight, zl.ones(32), 0, 'GPT LayerNorm weight 1')
end)

test('decay_groups', function()
  local g = tiny_gpt()
  local groups = nn.get_optimizer_grouped_parameters(g, 0.1)
  check_eq(#groups, 2)
  check_eq(groups[1].weight_decay, 0.1)
  check_eq(groups[2].weight_decay, 0.0)
  local decay = {}
  for _, p in ipairs(groups[1].params) do decay[p:id()] = true end
  local want_decay, want_rest = {}, {}
  for name, p in g:named_parameters() do
    if name:find('ln', 1, true) or name:find('bias', 1, true) then
      want_rest[#want_rest + 1] = name
    else
      want_decay[#want_decay + 1] = name
    end
  end
  local got_decay, got_rest = {}, {}
  for name, p in g:named_parameters() do
    if decay[p:id()] then got_decay[#got_decay + 1] = name else got_rest[#got_rest + 1] = name end
  end
  check(same_list(got_decay, want_decay), 'decayed: the weight matrices and embeddings ' .. list_str(got_decay))
  check_eq(#groups[2].params, #want_rest, 'the rest: biases and LayerNorm weights')
  check(groups[1].params[1] == g.wte.weight, 'groups keep definition order')
  -- LayerNorms are found by type, whatever the model calls them; frozen
  -- parameters are left out; the name list is the caller's to choose.
  local m = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
  m[1].weight:requires_grad(false)
  local gr = nn.get_optimizer_grouped_parameters(m, 0.01)
  check(#gr[1].params == 0 and #gr[2].params == 3, 'frozen weight left out, LayerNorm by type')
  gr = nn.get_optimizer_grouped_parameters(nn.Sequential(nn.Linear(2, 2)), 0.01, {})
  check_eq(#gr[1].params, 2, 'an empty name list decays everything but LayerNorms')
  check_error(function() nn.get_optimizer_grouped_parameters({}, 0.1) end, 'expected a module')
end)

test('submodules_are_fields_of_zl', function()
  check(zl.nn == nn and zl.optim == require('zlua.optim') and zl.utils == require('zlua.utils'),
    'zl.nn, zl.optim and zl.utils are the modules require gives')
  check(zl.nn.Linear(2, 3).weight:size(1) == 3, 'zl.nn.Linear builds a layer')
  check(zl.no_such_module == nil, 'another name is nil')
end)

test('generate', function()
  zl.manual_seed(7)
  local g = tiny_gpt{ dropout = 0.1 }
  local idx = zl.tensor{ { 1, 2, 3 }, { 4, 5, 6 } }
  local a = g:generate(idx, 10, { seed = 42, top_k = 5, temperature = 0.9, slide = true })
  local b = g:generate(idx, 10, { seed = 42, top_k = 5, temperature = 0.9, slide = true })
  check(same_list(a:shape(), { 2, 13 }), 'max_new_tokens ids are appended past the block size')
  check_error(function() g:generate(idx, 10, { seed = 42 }) end, 'pass slide = true')
  check_close(a, b, 0, 'the same seed gives the same sample')
  check_close(a:narrow(2, 1, 3), idx, 0, 'the prompt is kept')
  local ok = true
  for _, v in ipairs(H.flat(a)) do ok = ok and v >= 0 and v < 13 end
  check(ok, 'ids are in the vocabulary')
  check(g.training and g.blocks[1].attn.attn_drop.training, 'training mode is restored')
  -- top_k = 1 is greedy decoding: the argmax of the last position.
  local greedy = g:generate(idx, 1, { top_k = 1 })
  g:eval()
  local want = g(idx):select(2, -1):argmax(-1)
  check_close(greedy:select(2, 4), want, 0, 'top_k = 1 takes the argmax')
  check(greedy.grad_fn == nil, 'no autograd graph is recorded')
  check_error(function() g:generate(idx, 2, { temperature = 0 }) end, 'temperature must be a positive number')
end)

H.done()
