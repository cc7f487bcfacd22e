--[[ zlua.nn.LlamaDecoderLayer(config): one layer of LLaMA (and Qwen2,
  Mistral), pre-norm with RMSNorm:
    x = x + self_attn(input_layernorm(x));  x = x + mlp(post_attention_layernorm(x))
  config is zlua.nn.Llama's. ]]

local Module = require 'zlua.nn.Module'
local RMSNorm = require 'zlua.nn.RMSNorm'
local LlamaAttention = require 'zlua.nn.LlamaAttention'
local LlamaMLP = require 'zlua.nn.LlamaMLP'

local LlamaDecoderLayer = Module:extend('LlamaDecoderLayer')

function LlamaDecoderLayer:__init(c)
  self.self_attn = LlamaAttention{ hidden_size = c.hidden_size, num_heads = c.num_attention_heads,
                                   num_kv_heads = c.num_key_value_heads, head_dim = c.head_dim,
                                   qkv_bias = c.qkv_bias, o_bias = c.attention_bias }
  self.mlp = LlamaMLP(c.hidden_size, c.intermediate_size, c.mlp_bias)
  self.input_layernorm = RMSNorm(c.hidden_size, { eps = c.rms_norm_eps })
  self.post_attention_layernorm = RMSNorm(c.hidden_size, { eps = c.rms_norm_eps })
end

--- layer(x, cos, sin [, cache [, mask]]): as LlamaAttention's.
function LlamaDecoderLayer:forward(x, cos, sin, cache, mask)
  x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, mask)
  return x + self.mlp(self.post_attention_layernorm(x))
end

--- The Linear layers whose output is added to the residual stream.
function LlamaDecoderLayer:residual_projections()
  return { self.self_attn.o_proj, self.mlp.down_proj }
end

return LlamaDecoderLayer
