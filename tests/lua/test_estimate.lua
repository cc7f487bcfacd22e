-- zlua.zero.estimate and scripts/estimate_memory.lua: DeepSpeed's ZeRO-2/3
-- memory estimates against values worked out by hand from its formulas
-- (DeepSpeed's documented 2851M-parameter example, and an odd size on two
-- nodes where int() truncates), the model counter on a net with a tied
-- weight, and the script run as a user runs it, bad options included.
local H = require 'harness'
local zl = require 'zlua'
local nn = require 'zlua.nn'
local est = require 'zlua.zero.estimate'
local test, check, check_eq, check_error = H.test, H.check, H.check_eq, H.check_error

local SCRIPT = H.source_dir .. '/scripts/estimate_memory.lua'

-- rows as "param/optimizer/zero_init per_cpu per_gpu" lines, one string.
local function show(rows)
  local out = {}
  for _, r in ipairs(rows) do
    out[#out + 1] = string.format('%s/%s/%s %d %d', r.offload_param, r.offload_optimizer,
                                  tostring(r.zero_init), r.per_cpu, r.per_gpu)
  end
  return table.concat(out, '\n')
end

test('zero2: 2851M params on 8 GPUs (DeepSpeed docs example)', function()
  -- P = 2851e6, G = 8: offload: cpu P*max(4G,16)*1.5 = 48P, gpu 2P;
  -- none: gpu 2P + 18P/8, cpu P*4*8*1.5 = 48P.
  local rows = est.zero2(2851e6, { num_gpus_per_node = 8, num_nodes = 1 })
  check_eq(show(rows), table.concat({
    'none/cpu/nil 136848000000 5702000000',
    'none/none/nil 136848000000 12116750000',
  }, '\n'))
  check(math.type(rows[1].per_cpu) == 'integer' and math.type(rows[2].per_gpu) == 'integer',
        'bytes are integers')
end)

test('zero3: 2851M params, 32M largest layer on 8 GPUs (DeepSpeed docs example)', function()
  -- LL = 4*32e6 = 128e6. cpu/cpu: 18P*1.5, or P*max(32,18)*1.5; none/cpu: 16P*1.5,
  -- gpu LL + 2P/8; none/none: 32e6*4*8*1.5, gpu LL + 18P/8.
  local rows = est.zero3(2851e6, 32e6, { num_gpus_per_node = 8 })
  check_eq(show(rows), table.concat({
    'cpu/cpu/1 76977000000 128000000',
    'cpu/cpu/0 136848000000 128000000',
    'none/cpu/1 68424000000 840750000',
    'none/cpu/0 136848000000 840750000',
    'none/none/1 1536000000 6542750000',
    'none/none/0 136848000000 6542750000',
  }, '\n'))
end)

test('two nodes, 7 GPUs each, an odd size: int() truncates', function()
  -- P = 1000000003, G = 14, 1/nodes = 0.5. zero2: cpu 84P, gpu 2P;
  -- none: gpu 2P + floor(18P/14) = 2000000006 + 1285714289, cpu 42P.
  local hw = { num_gpus_per_node = 7, num_nodes = 2, additional_buffer_factor = 1.5 }
  local p = 1000000003
  check_eq(show(est.zero2(p, hw)), 'none/cpu/nil 84000000252 2000000006\nnone/none/nil 42000000126 3285714295')
  -- L = 123456789, LL = 493827156. cpu/cpu/1: 18P*0.5*1.5 = 13500000040.5;
  -- none/cpu gpu: LL + floor(2P/14) = LL + 142857143; none/none/1 cpu: 42L.
  check_eq(show(est.zero3(p, 123456789, hw)), table.concat({
    'cpu/cpu/1 13500000040 493827156',
    'cpu/cpu/0 42000000126 493827156',
    'none/cpu/1 12000000036 636684299',
    'none/cpu/0 42000000126 636684299',
    'none/none/1 5185185138 1779541445',
    'none/none/0 42000000126 1779541445',
  }, '\n'))
end)

test('defaults: 1 GPU, 1 node, factor 1.5; max() picks 16 and 18', function()
  -- zero2 offload cpu P*max(4,16)*1.5; zero3 zero_init=0 P*max(4,18)*1.5 and P*max(4,16)*1.5.
  local z2 = est.zero2(1000000)
  check_eq(z2[1].per_cpu, 24000000)
  check_eq(z2[2].per_gpu, 2000000 + 18000000)
  local z3 = est.zero3(1000000, 1000)
  check_eq(z3[2].per_cpu, 27000000)
  check_eq(z3[4].per_cpu, 24000000)
  check_eq(z3[5].per_cpu, 6000)
  check_eq(est.zero2(1000000, { additional_buffer_factor = 2 })[1].per_cpu, 32000000)
end)

test('bad arguments name what is wrong', function()
  check_error(function() est.zero2(-1) end, 'total_params must be a non-negative integer, got -1')
  check_error(function() est.zero2(1.5) end, 'total_params must be a non-negative integer, got 1.5')
  check_error(function() est.zero2('10') end, 'total_params must be a non-negative integer, got 10')
  check_error(function() est.zero2(10, { num_gpus_per_node = 0 }) end, 'num_gpus_per_node must be a positive integer')
  check_error(function() est.zero2(10, { gpus = 2 }) end, 'unknown option gpus')
  check_error(function() est.zero2(10, { additional_buffer_factor = -1 }) end,
              'additional_buffer_factor must be a positive number, got -1')
  check_error(function() est.zero3(10, 20) end, 'largest_layer_params (20) is more than total_params (10)')
  check_error(function() est.zero2(1e16) end, 'is over 5e+14')
  check_error(function() est.count({}) end, 'expected a zlua.nn module')
end)

test('count: a tied weight once in the total, in every module holding it for the largest layer', function()
  local Net = nn.Module:extend('Net')
  function Net:__init()
    self.emb = nn.Embedding(10, 4)                 -- 40
    self.fc = nn.Linear(4, 3)                      -- 15
    self.head = nn.Linear(4, 10)                   -- weight tied to emb's, bias 10
    self.head.weight = self.emb.weight
    self.scale = zl.ones(4)                        -- 4, owned by the model itself
    self.tail = nn.Sequential(nn.Linear(3, 2))     -- 8, one level down
  end
  local total, largest, name = est.count(Net())
  check_eq(total, 40 + 15 + 10 + 4 + 8, 'total')
  check_eq(largest, 40 + 10, 'largest layer: head owns the tied weight and its bias')
  check_eq(name, 'head')
end)

local function run(...) return H.run_script(SCRIPT, ...) end

local function has(out, line) check(out:find(line, 1, true) ~= nil, 'missing "' .. line .. '" in:\n' .. out) end

test('script: --params prints DeepSpeed\'s tables', function()
  local status, out = run('--params', '2851e6', '--largest_layer', '32e6', '--gpus_per_node', '8')
  check_eq(status, 0, 'exit status')
  has(out, 'HW: Setup with 1 node, 8 GPUs per node.')
  has(out, 'SW: Model with 2851M total params, 32M largest layer params.')
  -- The ZeRO-3 lines of DeepSpeed's documentation, in GiB.
  has(out, '    71.69GiB |    0.12GiB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n')
  has(out, '    63.72GiB |    0.78GiB | offload_param=none, offload_optimizer=cpu , zero_init=1\n')
  has(out, '     1.43GiB |    6.09GiB | offload_param=none, offload_optimizer=none, zero_init=1\n')
  has(out, '   127.45GiB |    6.09GiB | offload_param=none, offload_optimizer=none, zero_init=0\n')
  -- ZeRO-2 from the formulas: 48P and 2P + 18P/8 bytes.
  has(out, '   127.45GiB |    5.31GiB | offload_optimizer=cpu\n')
  has(out, '   127.45GiB |   11.28GiB | offload_optimizer=none\n')
  has(out, 'On a CPU-only zlua build "GPU" is the memory of each training process')

  status, out = run('--params', '1.3e9')
  check_eq(status, 0, 'exit status without --largest_layer')
  has(out, 'SW: Model with 1300M total params.')
  has(out, 'needs --largest_layer N')
end)

test('script: --gpt builds and counts the model', function()
  -- v=11, t=5, 2 layers, c=8, biases: wte 88 + wpe 40 + 2 blocks of 872 + ln_f 16;
  -- the largest layer is the first MLP's c -> 4c Linear, 4c*c + 4c = 288.
  local status, out = run('--gpt', 'n_layer=2,n_embd=8,n_head=2,vocab_size=11,block_size=5', '--nodes', '2')
  check_eq(status, 0, 'exit status')
  has(out, ': 1888 parameters')
  has(out, 'largest layer blocks.1.mlp.1 with 288')
  has(out, 'HW: Setup with 2 nodes, 1 GPU per node.')
end)

test('script: --llama builds and counts the model and its activations', function()
  -- v=10, c=8, m=12, 1 layer, 2 heads of 4, 1 key/value head, untied: embed 80 + head 80 + norm 8
  -- + layer (q 64, k 32, v 32, o 64, gate 96, up 96, down 96, two norms 16) 496.
  local status, out = run('--llama', 'vocab_size=10,hidden_size=8,intermediate_size=12,num_hidden_layers=1,'
    .. 'num_attention_heads=2,num_key_value_heads=1,max_position_embeddings=16', '--batch', '2')
  check_eq(status, 0, 'exit status')
  has(out, ': 664 parameters')
  has(out, 'Activations of one step, 2 x 16 tokens a rank, f32 (zlua.nn.llama_activations)')
end)

test('script: bad options fail with a message', function()
  local cases = {
    { { '--params', '1e9', '--bogus', '3' }, 'unknown option --bogus' },
    { { '--params', '-5' }, "--params expects a positive whole number of parameters, got '-5'" },
    { { '--params', 'lots' }, "--params expects a positive whole number of parameters, got 'lots'" },
    { { '--params', '1e9', '--gpus_per_node', '0' }, '--gpus_per_node must be positive, got 0' },
    { { '--params', '1e9', '--nodes', 'two' }, 'option --nodes expects an integer, got "two"' },
    { { '--gpt', 'n_layer=2,n_embd=8' }, '--gpt: GPT: vocab_size must be a positive integer' },
    { {}, 'give --params N, --gpt KEY=VALUE,... or --llama KEY=VALUE,...' },
    { { '--gpt', 'n_layer=1', '--llama', 'vocab_size=4' }, 'give --gpt or --llama, not both' },
  }
  for _, c in ipairs(cases) do
    local status, out = run(table.unpack(c[1]))
    check(status ~= 0, table.concat(c[1], ' ') .. ': exit status 0')
    check(out:find('^estimate_memory: ') ~= nil, 'no estimate_memory: prefix in ' .. out)
    has(out, c[2])
  end
end)

H.done()
