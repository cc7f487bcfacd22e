/* The CPU's kernel table: the ops call their kernels through the table of
 * their inputs' memory, and find these for host tensors as they find a
 * device's for its tensors. */
#include "kernels.h"

const zli_dev_kernels zli_cpu_kernels = {
    .halves = false, .gemm_f16 = false,
    .unary = zli_cpu_unary, .unary_backward = zli_cpu_unary_backward,
    .softmax = zli_cpu_softmax, .softmax_backward = zli_cpu_softmax_backward,
    .dropout = zli_cpu_dropout, .dropout_backward = zli_cpu_dropout_backward,
    .select = zli_cpu_select, .binary = zli_cpu_binary, .binary_int = zli_cpu_binary_int,
    .reduce_dim = zli_cpu_reduce_dim, .reduce_all = zli_cpu_reduce_all, .reduce_backward = zli_cpu_reduce_backward,
    .cumsum = zli_cpu_cumsum, .var = zli_cpu_var, .var_backward = zli_cpu_var_backward,
    .sum_to = zli_cpu_sum_to,
    .ln_forward = zli_cpu_ln_forward, .ln_backward_x = zli_cpu_ln_backward_x, .ln_backward_wb = zli_cpu_ln_backward_wb,
    .rms_forward = zli_cpu_rms_forward, .rms_backward = zli_cpu_rms_backward,
    .pool_forward = zli_cpu_pool_forward, .pool_backward = zli_cpu_pool_backward,
    .avg_pool_forward = zli_cpu_avg_pool_forward, .avg_pool_backward = zli_cpu_avg_pool_backward,
    .ce_forward = zli_cpu_ce_forward, .ce_backward = zli_cpu_ce_backward,
    .mse_forward = zli_cpu_mse_forward, .mse_backward = zli_cpu_mse_backward,
    .index_select = zli_cpu_index_select, .index_select_backward = zli_cpu_index_select_backward,
    .emb_forward = zli_cpu_emb_forward, .emb_backward = zli_cpu_emb_backward, .rotary = zli_cpu_rotary,
    .matmul = zli_cpu_matmul, .linear = zli_cpu_linear, .linear_backward = zli_cpu_linear_backward,
    .conv2d = zli_cpu_conv2d, .conv2d_backward = zli_cpu_conv2d_backward,
    .attention = zli_cpu_attention, .attention_backward = zli_cpu_attention_backward,
};
