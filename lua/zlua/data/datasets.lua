--[[ zlua.data.datasets: TensorDatasets built from the file readers of zlua
  (plain or gzip files; a bad file is an error naming it and the offset).

  datasets.mnist(images_path, labels_path [, {raw = false}])
      idx images [N, H, W] and labels [N] -> samples {x [1, H, W], y}: x f32
      in [0, 1] (u8 as stored with raw = true), y an i64 class id.
  datasets.cifar10(path_or_paths [, {raw = false}])
      one CIFAR-10 binary batch or a list of them, concatenated in order ->
      samples {x [3, 32, 32], y}: x f32 in [0, 1] (u8 with raw), y i64 0..9.
  datasets.lm_blocks(ids, block_size)
      a 1-d i64 tensor of token ids cut into floor((N - 1) / block_size)
      consecutive blocks -> samples {x [block_size], y [block_size]} where y
      is x shifted by one token (the next-token targets); the tail that does
      not fill a block is left out.
  datasets.tokens(path, bytes_per_token, block_size)
      lm_blocks of a token file (2: uint16, 4: uint32).
  datasets.text(path, block_size) -> dataset, vocab
      lm_blocks of a text file's character (byte) ids, and its vocabulary as
      a string: zl.text_decode(ids, vocab) spells ids back. ]]

local zl = require 'zlua'
local util = require 'zlua.data.util'
local TensorDataset = require 'zlua.data.TensorDataset'

local fmt, concat = string.format, table.concat

local datasets = {}

local raw_only = { raw = true }

-- u8 pixels as f32 in [0, 1], or as they are.
local function pixels(images, raw)
  if raw then return images end
  return images:float() / 255
end

function datasets.mnist(images_path, labels_path, opts)
  local o = util.options('datasets.mnist', opts, raw_only)
  local images, labels = zl.read_idx(images_path), zl.read_idx(labels_path)
  if images:dim() ~= 3 then
    zl.raise(fmt('datasets.mnist: %s holds a tensor of shape {%s}, expected images [N, H, W]',
                 images_path, concat(images:shape(), ', ')))
  end
  if labels:dim() ~= 1 or labels:size(1) ~= images:size(1) then
    zl.raise(fmt('datasets.mnist: %s holds a tensor of shape {%s}, expected labels [%d] for the %d images of %s',
                 labels_path, concat(labels:shape(), ', '), images:size(1), images:size(1), images_path))
  end
  local x = images:unsqueeze(2)
  return TensorDataset(pixels(x, o.raw), labels:long())
end

function datasets.cifar10(paths, opts)
  local o = util.options('datasets.cifar10', opts, raw_only)
  if type(paths) == 'string' then paths = { paths } end
  if type(paths) ~= 'table' or #paths == 0 then
    zl.raise('datasets.cifar10: expected a path or a non-empty list of paths')
  end
  local images, labels = {}, {}
  for k, p in ipairs(paths) do images[k], labels[k] = zl.read_cifar10(p) end
  local x, y = images[1], labels[1]
  if #paths > 1 then x, y = zl.cat(images), zl.cat(labels) end
  return TensorDataset(pixels(x, o.raw), y)
end

function datasets.lm_blocks(ids, block_size)
  local C = 'datasets.lm_blocks'
  if not zl.is_tensor(ids) or ids:dim() ~= 1 then
    zl.raise(fmt('%s: ids must be a 1-d tensor of token ids, got %s', C,
                 zl.is_tensor(ids) and 'shape {' .. concat(ids:shape(), ', ') .. '}' or type(ids)))
  end
  local b = util.integer(C, 'block_size', block_size, 1)
  local n = ids:size(1)
  local m = (n - 1) // b
  if m < 1 then
    zl.raise(fmt('%s: %d tokens make no block of %d (a block needs block_size + 1 = %d tokens)',
                 C, n, b, b + 1))
  end
  local x = ids:narrow(1, 1, m * b):reshape(m, b)
  local y = ids:narrow(1, 2, m * b):reshape(m, b)
  return TensorDataset(x, y)
end

function datasets.tokens(path, bytes_per_token, block_size)
  return datasets.lm_blocks(zl.read_tokens(path, bytes_per_token), block_size)
end

function datasets.text(path, block_size)
  local text = zl.read_text(path)
  local vocab = zl.text_vocab(text)
  return datasets.lm_blocks(zl.text_encode(text, vocab), block_size), vocab
end

return datasets
