--[[ zlua.nn.llama_activations: the activation memory of one training step of
  zlua.nn.Llama, from its shape alone, as zlua.nn.gpt_activations gives the
  GPT's: what the forward keeps for backward (after_forward) and the most
  held at once during backward (peak), in bytes of the engine's activations
  category. scripts/estimate_memory.lua --llama prints it.

  local act = require 'zlua.nn.llama_activations'
  local e = act.estimate({ vocab_size = 32000, hidden_size = 512, intermediate_size = 1536,
                           num_hidden_layers = 4, num_attention_heads = 8, num_key_value_heads = 2 },
                         { batch = 4, seq = 256, precision = 'f32', checkpointing = false })

  The counts are the tensors this engine's ops keep, per token (N = batch x
  seq tokens, C hidden, K = num_key_value_heads x head_dim, M intermediate,
  H query heads, T positions, e bytes of the dtype):
    a layer keeps 10 C + 3 K + 4 M values (the two RMSNorms' inputs and
      outputs, q, k and v after rotation, the heads' output, the gate's and
      up projection's outputs, SiLU's output and the product), one C more in
      bf16 or fp16, and its attention probabilities, B x H x T x T in f32;
    outside the layers: the logits (N x vocabulary), the embedding's output
      and the final norm's (2 N x C), and the rotary tables (2 T x head_dim
      in f32, and their copy in the model's dtype);
    backward adds, at its worst, the logits' gradient with the last norm's
      ((vocabulary + C) N in f32; in halves 6 (vocabulary + C) N bytes, the
      f32 gradient and its copy for the GEMMs, or 8 where a bf16 GEMM widens
      that copy to f32, on a CPU without bf16 dot products and for fp16) or
      one layer's temporaries (3 M N in f32; 16 M + 8 C bytes a token in
      halves).
  With checkpointing a layer keeps only its input (N x C), and the layer
  rebuilt in backward holds what a layer holds besides its temporaries.
  Read off the allocator (zl.memory()) over shapes that separate each term;
  tests/lua/test_llama_activations.lua checks them within 20% of the
  measured peak. ]]

local args = require('zlua.nn.estimate_args')('llama_activations')
local positive = args.positive

local M = {}

--- M.estimate(config, opts) -> { after_forward =, peak =, per_layer =, kept_per_layer = } in
--- bytes. config: nn.Llama's (Hugging Face's) names; opts: batch, seq (default
--- max_position_embeddings), precision ('f32', 'bf16' or 'fp16'), checkpointing.
function M.estimate(config, opts)
  opts = args.start(config, opts)
  local C = positive('hidden_size', config.hidden_size)
  local H = positive('num_attention_heads', config.num_attention_heads)
  local D = positive('head_dim', config.head_dim or C // H)
  local K = positive('num_key_value_heads', config.num_key_value_heads or H) * D
  local Mi = positive('intermediate_size', config.intermediate_size)
  local L = positive('num_hidden_layers', config.num_hidden_layers)
  local V = positive('vocab_size', config.vocab_size)
  local B = positive('batch', opts.batch)
  local T = positive('seq', opts.seq or config.max_position_embeddings)
  local e = args.bytes(opts.precision)
  local N = B * T
  local probs = B * H * T * T * 4
  local layer = (10 * C + 3 * K + 4 * Mi + (e == 4 and 0 or C)) * N * e + probs
  local rope = 2 * T * D * 4 + (e == 4 and 0 or 2 * T * D * e)
  local base = (V + 2 * C) * N * e + rope
  local head_temps, layer_temps
  if e == 4 then
    head_temps, layer_temps = (V + C) * N * 4, 3 * Mi * N * 4
  else
    local widened = opts.precision ~= 'bf16' or not require('zlua').core.bf16_dot_products()
    head_temps, layer_temps = (widened and 8 or 6) * (V + C) * N, (16 * Mi + 8 * C) * N
  end
  local kept = opts.checkpointing and N * C * e or layer
  local after_forward = L * kept + base
  local peak
  if opts.checkpointing then
    peak = after_forward + math.max(head_temps, layer + layer_temps + N * C * e)
  else
    peak = after_forward + math.max(head_temps, layer_temps)
  end
  return { after_forward = after_forward, peak = peak, per_layer = layer, kept_per_layer = kept }
end

return M
