--[[ zlua.nn.causal_lm: what the language models (zlua.nn.GPT, zlua.nn.Llama)
  share: the loss of model(ids, targets), gradient checkpointing's switch,
  the key/value cache and generate. causal_lm.extend(class, layers) gives a
  class these methods, layers naming its ModuleList of blocks. Private to
  zlua.nn. ]]

local zl = require 'zlua'

local M = {}

function M.extend(class, layers)
  --- model:loss(logits [B, T, V], targets [B, T]): the mean cross-entropy
  --- (targets of -100 ignored), taken in f32 whatever the logits' dtype, as
  --- autocast does: a bf16 loss keeps 3 digits.
  function class:loss(logits, targets)
    local b, t, v = logits:size(1), logits:size(2), logits:size(3)
    return zl.cross_entropy(logits:reshape(b * t, v), targets:reshape(b * t), { dtype = 'f32' })
  end

  --- model:gradient_checkpointing_enable() / _disable(): each block computed
  --- again in backward (zl.checkpoint) instead of keeping its activations;
  --- the gradients are the same bits. Returns the model.
  function class:gradient_checkpointing_enable()
    self.checkpointing = true
    return self
  end

  function class:gradient_checkpointing_disable()
    self.checkpointing = false
    return self
  end

  --- model:new_cache(): an empty key/value cache for forward_cached.
  function class:new_cache()
    local caches = {}
    for i = 1, #self[layers] do caches[i] = {} end
    return { len = 0, layers = caches }
  end

  --- model:generate(ids, {max_new_tokens =, do_sample = false, temperature =,
  --- top_k =, top_p =, repetition_penalty =, attention_mask =, seed =, ...})
  --- or the older model:generate(idx, n [, opts]) (which samples): see
  --- zlua.nn.generate.
  function class:generate(idx, n, opts)
    return require('zlua.nn.generate')(self, idx, n, opts)
  end
end

return M
