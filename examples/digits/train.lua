-- A two-layer MLP (64 -> 128 -> 10) trained on the 1,797 handwritten digits of
-- digits.csv.gz (8x8 images, pixels 0..16, then the label; see digits.rst),
-- written with the tensor API alone: the parameters are tensors that require
-- grad and the optimizer (Adam) is a few lines of Lua below.
--   zlua examples/digits/train.lua [path/to/digits.csv[.gz]]
local zl = require 'zlua'

local here = arg and arg[0] and arg[0]:match('^(.*)/[^/]*$') or '.'
local path = arg and arg[1] or here .. '/digits.csv.gz'

local seed, hidden, epochs, batch = 1, 128, 20, 32
local lr, beta1, beta2, eps = 3e-3, 0.9, 0.999, 1e-8
zl.manual_seed(seed)
local gen = zl.Generator(seed)

-- A data file that is missing or corrupt stops the script with one line.
local ok, data = pcall(zl.read_csv, path)
if not ok then
  io.stderr:write('digits: ', tostring(data), '\n')
  os.exit(1)
end
local n, cols = data:size(1), data:size(2)
if cols ~= 65 then
  io.stderr:write(('digits: %s: expected 65 columns (64 pixels and a label), got %d\n'):format(path, cols))
  os.exit(1)
end
local x_all = data:narrow(2, 1, 64) / 16    -- [n, 64], scaled to [0, 1]
local y_all = data:select(2, 65):long()     -- [n], class ids 0..9

-- A fixed split: a seeded permutation of the rows, the last 20% held out.
local perm = zl.randperm(n, gen)
local ntest = n // 5
local ntrain = n - ntest
local train_rows, test_rows = perm:narrow(1, 1, ntrain), perm:narrow(1, ntrain + 1, ntest)
local x_train, y_train = x_all:index_select(1, train_rows), y_all:index_select(1, train_rows)
local x_test, y_test = x_all:index_select(1, test_rows), y_all:index_select(1, test_rows)

-- He initialisation for the ReLU layer, a smaller one for the output layer.
local w1 = (zl.randn(hidden, 64, gen) * math.sqrt(2 / 64)):requires_grad(true)
local b1 = zl.zeros(hidden):requires_grad(true)
local w2 = (zl.randn(10, hidden, gen) * math.sqrt(1 / hidden)):requires_grad(true)
local b2 = zl.zeros(10):requires_grad(true)
local params = { w1, b1, w2, b2 }

local function forward(x)
  return zl.linear(zl.linear(x, w1, b1):relu(), w2, b2)
end

-- Adam: the moments live here, one pair per parameter, and are updated with
-- grad mode off; the parameters are updated in place and their gradients cleared.
local m, v, t = {}, {}, 0
for i, p in ipairs(params) do
  m[i], v[i] = zl.zeros_like(p), zl.zeros_like(p)
end
local function adam_step()
  t = t + 1
  local c1, c2 = 1 - beta1 ^ t, 1 - beta2 ^ t
  zl.no_grad(function()
    for i, p in ipairs(params) do
      local g = p.grad
      m[i] = m[i] * beta1 + g * (1 - beta1)
      v[i] = v[i] * beta2 + g * g * (1 - beta2)
      p:copy_(p - (m[i] / c1) / ((v[i] / c2):sqrt() + eps) * lr)
      p:zero_grad()
    end
  end)
end

local function accuracy(x, y)
  return zl.no_grad(function()
    return forward(x):argmax(-1):eq(y):float():sum():item() / y:size(1)
  end)
end

print(('digits: %d images, %d for training, %d held out; MLP 64 -> %d -> 10, Adam lr %g'):format(
  n, ntrain, ntest, hidden, lr))
for epoch = 1, epochs do
  local order = zl.randperm(ntrain, gen)
  local total, batches = 0, 0
  for start = 1, ntrain, batch do
    local rows = order:narrow(1, start, math.min(batch, ntrain - start + 1))
    local loss = zl.cross_entropy(forward(x_train:index_select(1, rows)), y_train:index_select(1, rows))
    loss:backward()
    adam_step()
    total, batches = total + loss:item(), batches + 1
  end
  if epoch == 1 or epoch % 5 == 0 then
    print(('epoch %2d  loss %.4f  train accuracy %.2f%%'):format(
      epoch, total / batches, 100 * accuracy(x_train, y_train)))
  end
end
local acc = accuracy(x_test, y_test)
print(('held-out accuracy: %.2f%% (%d/%d)'):format(100 * acc, math.floor(acc * ntest + 0.5), ntest))
