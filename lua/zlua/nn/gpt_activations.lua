--[[ zlua.nn.gpt_activations: the activation memory of one training step of
  zlua.nn.GPT, from its shape alone: what the forward keeps for backward
  (after_forward) and the most held at once during backward (peak), in bytes
  of the engine's activations category. scripts/estimate_memory.lua prints
  it beside DeepSpeed's model-state tables; examples/gpt prints the measured
  peak for comparison.

  local act = require 'zlua.nn.gpt_activations'
  local e = act.estimate({ n_layer = 12, n_embd = 768, n_head = 12, vocab_size = 50257 },
                         { batch = 4, block_size = 128, precision = 'f32', checkpointing = false })
  -- e.after_forward, e.peak, e.per_layer (bytes)

  The counts are the tensors the ops of this engine keep, per token and
  channel (N = batch x block_size tokens, C channels, H heads, T positions):
    a block keeps 19 N x C values (the two LayerNorms' inputs and outputs, q,
      k and v, the heads' output, the projections, the MLP's 4C input and its
      GELU), in the model's dtype, and its attention probabilities, B x H x
      T x T in f32 whatever the dtype;
    outside the blocks: the embeddings' sum, the final LayerNorm's output and
      the dropout mask's worth (3 N x C), and the logits (N x vocabulary);
    backward adds, at its worst, the gradient of the logits (N x vocabulary
      in f32) or one block's largest temporaries (8 N x C in f32; in bf16 24
      N x C halves, the f32 widening of its GEMMs' operands, or 14 with the
      attention probabilities' gradient).
  With checkpointing a block keeps only its input (N x C) and one block at a
  time is rebuilt in backward, holding what a block holds.
  These were read off the allocator (zl.memory()) over shapes that separate
  each term, and checked within 20% of the measured peak by
  tests/lua/test_gpt_activations.lua. ]]

local args = require('zlua.nn.estimate_args')('gpt_activations')
local positive = args.positive

local M = {}

--- M.estimate(config, opts) -> { after_forward =, peak =, per_layer =, kept_per_layer = } in
--- bytes. config: the GPT's n_layer, n_embd, n_head, vocab_size; opts: batch, block_size
--- (the step's sequence length), precision ('f32', 'bf16' or 'fp16'), checkpointing.
function M.estimate(config, opts)
  opts = args.start(config, opts)
  local L = positive('n_layer', config.n_layer)
  local C = positive('n_embd', config.n_embd)
  local H = positive('n_head', config.n_head)
  local V = positive('vocab_size', config.vocab_size)
  local B = positive('batch', opts.batch)
  local T = positive('block_size', opts.block_size or config.block_size)
  local e = args.bytes(opts.precision)
  local N = B * T
  local probs = B * H * T * T * 4
  local block = 19 * N * C * e + probs
  local base = 3 * N * C * e + N * V * e
  local temporaries
  if e == 4 then
    temporaries = math.max(8 * N * C * 4, 4 * N * C * 4 + probs, N * V * 4)
  else
    temporaries = math.max(24 * N * C * e, 14 * N * C * e + probs, N * V * 4)
  end
  local kept = opts.checkpointing and N * C * e or block
  local after_forward = L * kept + base
  local peak = after_forward + temporaries
  if opts.checkpointing then peak = peak + block end
  return { after_forward = after_forward, peak = peak, per_layer = block, kept_per_layer = kept }
end

return M
