/* The one list of op cases: every op of zlua/ops.h with the shapes, dtypes,
 * strided and broadcast views and edge values it must handle, run on the
 * CPU (tests/c/test_op_cases.c, also against finite differences), on the
 * stand-in device (the same file) and on a GPU (tests/gpu/test_cuda_op_cases.c),
 * each against the host. op_cases.h says how inputs are written. */
#include "op_cases.h"

#define OP(fn, expr) \
    static zl_tensor *fn(zl_tensor **in) { return expr; }

OP(add, zl_add(in[0], in[1]))
OP(sub, zl_sub(in[0], in[1]))
OP(mul, zl_mul(in[0], in[1]))
OP(div_, zl_div(in[0], in[1]))
OP(pow_, zl_pow(in[0], in[1]))
OP(eq, zl_eq(in[0], in[1]))
OP(lt, zl_lt(in[0], in[1]))
OP(gt, zl_gt(in[0], in[1]))
OP(ne, zl_ne(in[0], in[1]))
OP(le, zl_le(in[0], in[1]))
OP(ge, zl_ge(in[0], in[1]))

OP(neg, zl_neg(in[0]))
OP(exp_, zl_exp(in[0]))
OP(log_, zl_log(in[0]))
OP(sqrt_, zl_sqrt(in[0]))
OP(tanh_, zl_tanh(in[0]))
OP(sigmoid, zl_sigmoid(in[0]))
OP(relu, zl_relu(in[0]))
OP(abs_, zl_abs(in[0]))
OP(pow_scalar, zl_pow_scalar(in[0], 2.5))
OP(pow_scalar_neg, zl_pow_scalar(in[0], -1.0))
OP(affine, zl_affine(in[0], -1.5, 0.25))
OP(gelu, zl_gelu(in[0], false))
OP(gelu_tanh, zl_gelu(in[0], true))
OP(silu, zl_silu(in[0]))
OP(sin_, zl_sin(in[0]))
OP(cos_, zl_cos(in[0]))
OP(log1p_, zl_log1p(in[0]))
OP(softplus, zl_softplus(in[0], 2.0, 3.0))
OP(leaky_relu, zl_leaky_relu(in[0], 0.1))
OP(clamp, zl_clamp(in[0], -0.7, 0.4))
OP(clamp_open, zl_clamp(in[0], -INFINITY, 0.25))
OP(clamp_int, zl_clamp(in[0], 2, 6))

OP(sum_all, zl_sum(in[0], ZL_ALL_DIMS, false))
OP(sum_1k, zl_sum(in[0], 1, true))
OP(mean_all, zl_mean(in[0], ZL_ALL_DIMS, false))
OP(mean_0, zl_mean(in[0], 0, false))
OP(max_1, zl_max(in[0], 1, false))
OP(max_all, zl_max(in[0], ZL_ALL_DIMS, false))
OP(argmax_1, zl_argmax(in[0], 1, true))
OP(argmax_all, zl_argmax(in[0], ZL_ALL_DIMS, false))
OP(min_1, zl_min(in[0], 1, false))
OP(min_0k, zl_min(in[0], 0, true))
OP(argmin_0, zl_argmin(in[0], 0, false))
OP(sum_dims, zl_sum_dims(in[0], 2, (int[]){0, 2}, false))
OP(sum_dims_all, zl_sum_dims(in[0], 0, NULL, true))
OP(mean_dims, zl_mean_dims(in[0], 2, (int[]){2, 1}, true))
OP(var, zl_var(in[0], 2, (int[]){0, 2}, 1, false))
OP(var_all, zl_var(in[0], 0, NULL, 0, true))
OP(std_, zl_std(in[0], 2, (int[]){2, 1}, 1, true))
OP(std_one, zl_std(in[0], 1, (int[]){1}, 1, false))
OP(cumsum_1, zl_cumsum(in[0], 1))
OP(cumsum_0, zl_cumsum(in[0], 0))

OP(matmul, zl_matmul(in[0], in[1]))
OP(linear, zl_linear(in[0], in[1], in[2]))
OP(linear_nb, zl_linear(in[0], in[1], NULL))

OP(softmax_last, zl_softmax(in[0], -1))
OP(softmax_0, zl_softmax(in[0], 0))
OP(softmax_1, zl_softmax(in[0], 1))
OP(log_softmax_last, zl_log_softmax(in[0], -1))
OP(log_softmax_1, zl_log_softmax(in[0], 1))
OP(ce_mean, zl_cross_entropy(in[0], in[1], -100, ZL_REDUCE_MEAN))
OP(ce_sum_ignore, zl_cross_entropy(in[0], in[1], 3, ZL_REDUCE_SUM))
OP(ce_none, zl_cross_entropy(in[0], in[1], -100, ZL_REDUCE_NONE))
OP(ce_as_f32, zl_cross_entropy_as(in[0], in[1], -100, ZL_REDUCE_MEAN, ZL_DTYPE_F32))
OP(ce_as_bf16, zl_cross_entropy_as(in[0], in[1], 2, ZL_REDUCE_NONE, ZL_DTYPE_BF16))
OP(ce_ex, zl_cross_entropy_ex(in[0], in[1], in[2], -100, 0.1, ZL_REDUCE_MEAN, ZL_DTYPE_F32))
OP(ce_ex_smooth, zl_cross_entropy_ex(in[0], in[1], NULL, 1, 0.2, ZL_REDUCE_SUM, ZL_DTYPE_F32))
OP(ce_weights, zl_cross_entropy_ex(in[0], in[1], in[2], 2, 0.0, ZL_REDUCE_NONE, ZL_DTYPE_BF16))
OP(mse_mean, zl_mse_loss(in[0], in[1], ZL_REDUCE_MEAN))
OP(mse_sum, zl_mse_loss(in[0], in[1], ZL_REDUCE_SUM))
OP(mse_none, zl_mse_loss(in[0], in[1], ZL_REDUCE_NONE))
OP(layer_norm_1, zl_layer_norm(in[0], 1, in[1], in[2], 1e-5))
OP(layer_norm_2, zl_layer_norm(in[0], 2, in[1], in[2], 1e-5))
OP(layer_norm_bare, zl_layer_norm(in[0], 1, NULL, NULL, 1e-3))
OP(embedding, zl_embedding(in[0], in[1]))
OP(embedding_padded, zl_embedding_padded(in[0], in[1], 2))
OP(rms_norm, zl_rms_norm(in[0], 1, in[1], 1e-6))
OP(rms_norm_bare, zl_rms_norm(in[0], 2, NULL, 1e-5))
OP(rotary, zl_rotary(in[0], in[1], in[2]))

static zl_tensor *dropout(zl_tensor **in)
{
    zl_generator *g = zl_generator_new(1234);
    zl_tensor *y = g ? zl_dropout(in[0], 0.3, true, g) : NULL;
    zl_generator_free(g);
    return y;
}

OP(dropout_eval, zl_dropout(in[0], 0.3, false, NULL))
OP(conv2d, zl_conv2d(in[0], in[1], in[2], 1, 1, 1, 1))
OP(conv2d_strided, zl_conv2d(in[0], in[1], NULL, 2, 1, 0, 2))
OP(conv2d_ex, zl_conv2d_ex(in[0], in[1], in[2], 1, 2, 2, 1, 2, 1, 2))
OP(max_pool, zl_max_pool2d(in[0], 2, 2, 2, 2, 0, 0))
OP(max_pool_pad, zl_max_pool2d(in[0], 3, 3, 2, 2, 1, 1))
OP(avg_pool, zl_avg_pool2d(in[0], 2, 2, 2, 2, 0, 0, true))
OP(avg_pool_pad, zl_avg_pool2d(in[0], 3, 3, 2, 1, 1, 1, true))
OP(avg_pool_nopad, zl_avg_pool2d(in[0], 3, 3, 2, 2, 1, 1, false))
OP(attention_causal, zl_attention(in[0], in[1], in[2], true, 0))
OP(attention_scaled, zl_attention(in[0], in[1], in[2], false, 0.5))
OP(attention_masked_null, zl_attention_masked(in[0], in[1], in[2], NULL, true, 0))
OP(attention_masked, zl_attention_masked(in[0], in[1], in[2], in[3], false, 0))

OP(gather_2, zl_gather(in[0], 2, in[1]))
OP(gather_0, zl_gather(in[0], 0, in[1]))
OP(scatter_2, zl_scatter(in[0], 2, in[1], in[2]))
OP(scatter_add_2, zl_scatter_add(in[0], 2, in[1], in[2]))
OP(scatter_add_0, zl_scatter_add(in[0], 0, in[1], in[2]))
OP(cat_0, zl_cat(in, 2, 0))
OP(cat_1, zl_cat(in, 3, 1))
OP(stack_1, zl_stack(in, 3, 1))
OP(stack_0, zl_stack(in, 2, 0))
OP(index_select_0, zl_index_select(in[0], 0, in[1]))
OP(index_select_1, zl_index_select(in[0], 1, in[1]))
OP(where_, zl_where(in[0], in[1], in[2]))
OP(masked_fill, zl_masked_fill(in[0], in[1], -1e9))
OP(masked_fill_inf, zl_masked_fill(in[0], in[1], -INFINITY))

enum { G = CASE_GRAD, NOFD = CASE_NO_FD, CLOSE = CASE_CLOSE };

const op_case op_cases[] = {
    /* elementwise, broadcasting */
    {"zl_add", "same shape", "f32[3,5] f32[3,5]", add, G},
    {"zl_add", "strided and a broadcast row", "f32[3,5]^T f32[5]", add, G},
    {"zl_add", "an expanded view and a column", "f32[1,5]>[4,5] f32[4,1]", add, G},
    {"zl_add", "bf16", "bf16[4,6] bf16[4,6]", add, G},
    {"zl_add", "f16 broadcast over a batch", "f16[2,3,4] f16[1,4]", add, G},
    {"zl_add", "a host scalar", "f32[3,5] f32[]@h", add, G},
    {"zl_add", "integers", "i64[3,5]<9 i64[5]<9", add, 0},
    {"zl_add", "mixed dtypes", "bf16[3,5] f32[3,5]", add, G},
    {"zl_add", "edge values", "f32[4,6]! f32[4,6]!", add, 0},
    {"zl_sub", "broadcast row", "f32[3,5] f32[5]", sub, G},
    {"zl_sub", "bf16 strided", "bf16[4,6]^T bf16[4,6]", sub, G},
    {"zl_sub", "integers", "i32[3,4]<5 i32[3,4]<5", sub, 0},
    {"zl_mul", "broadcast column", "f32[2,3,4] f32[3,1]", mul, G},
    {"zl_mul", "f16", "f16[3,5] f16[3,5]", mul, G},
    {"zl_mul", "a host scalar", "f32[3,5]^T f32[1]@h", mul, G},
    {"zl_mul", "edge values", "f32[4,6]! f32[4,6]!", mul, 0},
    {"zl_div", "positive divisors", "f32[3,5] f32[3,5]+", div_, G},
    {"zl_div", "bf16 broadcast", "bf16[4,6] bf16[6]+", div_, G},
    {"zl_div", "edge values", "f32[4,6]! f32[4,6]!", div_, 0},
    {"zl_pow", "positive bases", "f32[3,5]+ f32[3,5]", pow_, G},
    {"zl_pow", "broadcast exponent", "f32[3,5]+ f32[5]", pow_, G},
    {"zl_pow", "edge values", "f32[4,6]! f32[4,6]!", pow_, 0},
    {"zl_eq", "ties", "f32[3,5]~ f32[3,5]~", eq, 0},
    {"zl_eq", "integers broadcast", "i64[3,4]<4 i64[4]<4", eq, 0},
    {"zl_lt", "ties", "f32[3,5]~ f32[5]~", lt, 0},
    {"zl_lt", "bf16 and NaN", "bf16[4,6]! bf16[4,6]", lt, 0},
    {"zl_gt", "ties", "f32[3,5]~^T f32[3,5]~", gt, 0},
    {"zl_gt", "a host scalar", "f32[3,5] f32[]@h", gt, 0},
    {"zl_ne", "ties and NaN", "f32[4,6]! f32[4,6]~", ne, 0},
    {"zl_le", "ties", "f16[3,5]~ f16[3,5]~", le, 0},
    {"zl_ge", "integers", "i32[3,4]<3 i32[3,4]<3", ge, 0},
    {"zl_ge", "ties", "f32[3,5]~ f32[3,1]~", ge, 0},

    /* elementwise, unary */
    {"zl_neg", "strided", "f32[3,5]^T", neg, G},
    {"zl_neg", "bf16 edge values", "bf16[4,6]!", neg, 0},
    {"zl_exp", "strided", "f32[3,5]^T", exp_, G},
    {"zl_exp", "bf16", "bf16[4,6]", exp_, G},
    {"zl_exp", "edge values", "f32[4,6]!", exp_, 0},
    {"zl_log", "positive", "f32[3,5]+", log_, G},
    {"zl_log", "f16 positive", "f16[4,6]+", log_, G},
    {"zl_log", "edge values", "f32[4,6]!", log_, 0},
    {"zl_sqrt", "positive", "f32[3,5]+^T", sqrt_, G},
    {"zl_sqrt", "edge values", "f32[4,6]!", sqrt_, 0},
    {"zl_tanh", "strided", "f32[3,5]^T", tanh_, G},
    {"zl_tanh", "bf16 edge values", "bf16[4,6]!", tanh_, 0},
    {"zl_sigmoid", "plain", "f32[3,5]", sigmoid, G},
    {"zl_sigmoid", "f16", "f16[4,6]", sigmoid, G},
    {"zl_sigmoid", "edge values", "f32[4,6]!", sigmoid, 0},
    {"zl_relu", "strided", "f32[3,5]^T", relu, G},
    {"zl_relu", "edge values", "f32[4,6]!", relu, 0},
    {"zl_abs", "plain", "f32[3,5]", abs_, G},
    {"zl_abs", "edge values", "bf16[4,6]!", abs_, 0},
    {"zl_pow_scalar", "positive", "f32[3,5]+", pow_scalar, G},
    {"zl_pow_scalar", "a negative exponent", "f32[3,5]+^T", pow_scalar_neg, G},
    {"zl_pow_scalar", "edge values", "f32[4,6]!", pow_scalar, 0},
    {"zl_affine", "strided", "f32[3,5]^T", affine, G},
    {"zl_affine", "bf16", "bf16[4,6]", affine, G},
    {"zl_gelu", "exact", "f32[3,5]", gelu, G},
    {"zl_gelu", "tanh form, bf16", "bf16[4,6]", gelu_tanh, G},
    {"zl_gelu", "edge values", "f32[4,6]!", gelu, 0},
    {"zl_silu", "strided", "f32[3,5]^T", silu, G},
    {"zl_silu", "f16", "f16[4,6]", silu, G},
    {"zl_silu", "edge values", "f32[4,6]!", silu, 0},
    {"zl_sin", "plain", "f32[3,5]", sin_, G},
    {"zl_sin", "edge values", "f32[4,6]!", sin_, 0},
    {"zl_cos", "strided", "f32[3,5]^T", cos_, G},
    {"zl_cos", "bf16", "bf16[4,6]", cos_, G},
    {"zl_log1p", "positive", "f32[3,5]+", log1p_, G},
    {"zl_log1p", "edge values", "f32[4,6]!", log1p_, 0},
    {"zl_softplus", "beta and threshold", "f32[3,5]", softplus, G},
    {"zl_softplus", "edge values", "f32[4,6]!", softplus, 0},
    {"zl_leaky_relu", "strided", "f32[3,5]^T", leaky_relu, G},
    {"zl_leaky_relu", "bf16 edge values", "bf16[4,6]!", leaky_relu, 0},
    {"zl_clamp", "both bounds", "f32[3,5]", clamp, G},
    {"zl_clamp", "one side open", "f32[3,5]^T", clamp_open, G},
    {"zl_clamp", "edge values", "f32[4,6]!", clamp, 0},
    {"zl_clamp", "integers", "i32[3,4]<9", clamp_int, 0},

    /* reductions */
    {"zl_sum", "everything", "f32[3,5]", sum_all, G},
    {"zl_sum", "a dim, kept, strided", "f32[2,3,4]^T", sum_1k, G},
    {"zl_sum", "bf16 everything", "bf16[5,7]", sum_all, G},
    {"zl_sum", "integers", "i64[3,5]<9", sum_all, 0},
    {"zl_sum", "edge values", "f32[4,6]!", sum_1k, 0},
    {"zl_mean", "everything", "f32[3,5]^T", mean_all, G},
    {"zl_mean", "dim 0, bf16", "bf16[4,6]", mean_0, G},
    {"zl_max", "a dim with ties", "f32[3,6]~", max_1, G | NOFD},
    {"zl_max", "a dim", "f32[2,4,3]^T", max_1, G},
    {"zl_max", "everything", "f32[3,5]", max_all, G},
    {"zl_max", "edge values", "f32[4,6]!", max_1, 0},
    {"zl_argmax", "a dim with ties, kept", "f32[3,6]~", argmax_1, 0},
    {"zl_argmax", "everything", "f32[4,5]^T", argmax_all, 0},
    {"zl_min", "a dim", "f32[3,6]", min_1, G},
    {"zl_min", "dim 0 with ties, kept", "f32[4,3]~^T", min_0k, G | NOFD},
    {"zl_argmin", "dim 0 with ties", "f32[4,3]~", argmin_0, 0},
    {"zl_sum_dims", "two dims", "f32[2,3,4]", sum_dims, G},
    {"zl_sum_dims", "every dim, kept", "f32[3,4]^T", sum_dims_all, G},
    {"zl_mean_dims", "two dims, kept", "f32[2,3,4]", mean_dims, G},
    {"zl_var", "two dims", "f32[2,3,4]", var, G},
    {"zl_var", "everything, no correction", "f32[3,5]^T", var_all, G},
    {"zl_std", "two dims, kept", "f32[2,3,4]", std_, G},
    {"zl_std", "a dim of one element", "f32[3,1]", std_one, 0},
    {"zl_cumsum", "a dim", "f32[3,5]", cumsum_1, G},
    {"zl_cumsum", "strided", "f32[4,3]^T", cumsum_0, G},
    {"zl_cumsum", "integers", "i32[3,4]<5", cumsum_0, 0},

    /* linear algebra */
    {"zl_matmul", "2-d", "f32[4,6] f32[6,5]", matmul, G | CLOSE},
    {"zl_matmul", "a transposed operand", "f32[4,6] f32[6,5]^T", matmul, G | CLOSE},
    {"zl_matmul", "batched", "f32[3,4,6] f32[3,6,5]", matmul, G | CLOSE},
    {"zl_matmul", "a batch against a matrix", "f32[3,4,6] f32[6,5]", matmul, G | CLOSE},
    {"zl_matmul", "batch dims broadcast", "f32[2,3,4,6] f32[3,6,5]", matmul, G | CLOSE},
    {"zl_matmul", "vector times matrix", "f32[6] f32[6,5]", matmul, G | CLOSE},
    {"zl_matmul", "matrix times vector", "f32[4,6] f32[6]", matmul, G | CLOSE},
    {"zl_matmul", "bf16", "bf16[4,6] bf16[6,5]", matmul, G | CLOSE},
    {"zl_matmul", "f16 batched", "f16[3,4,6] f16[3,6,5]^T", matmul, G | CLOSE},
    {"zl_linear", "with a bias", "f32[2,3,6] f32[5,6] f32[5]", linear, G | CLOSE},
    {"zl_linear", "no bias, strided input", "f32[4,6]^T f32[5,6]", linear_nb, G | CLOSE},
    {"zl_linear", "bf16", "bf16[4,6] bf16[5,6] bf16[5]", linear, G | CLOSE},

    /* neural-network ops */
    {"zl_softmax", "last dim", "f32[3,5]", softmax_last, G},
    {"zl_softmax", "dim 0, strided", "f32[4,3]^T", softmax_0, G},
    {"zl_softmax", "middle dim, bf16", "bf16[2,3,4]", softmax_1, G},
    {"zl_softmax", "edge values", "f32[4,6]!", softmax_last, 0},
    {"zl_log_softmax", "last dim", "f32[3,5]", log_softmax_last, G},
    {"zl_log_softmax", "middle dim, f16", "f16[2,3,4]", log_softmax_1, G},
    {"zl_cross_entropy", "mean", "f32[4,7] i64[4]<7", ce_mean, G},
    {"zl_cross_entropy", "sum, an ignored class", "f32[6,5] i64[6]<5", ce_sum_ignore, G},
    {"zl_cross_entropy", "none, strided logits", "f32[4,7]^T i32[4]<7", ce_none, G},
    {"zl_cross_entropy", "one row", "f32[7] i64[]<7", ce_mean, G},
    {"zl_cross_entropy_as", "bf16 logits, an f32 loss", "bf16[4,7] i64[4]<7", ce_as_f32, G},
    {"zl_cross_entropy_as", "a bf16 loss per row", "f32[5,4] i64[5]<4", ce_as_bf16, G},
    {"zl_cross_entropy_ex", "class weights, label smoothing", "f32[4,7] i64[4]<7 f32[7]+=", ce_ex, G},
    {"zl_cross_entropy_ex", "label smoothing, an ignored class", "f32[5,4] i64[5]<4", ce_ex_smooth, G},
    {"zl_cross_entropy_ex", "bf16 logits, weights and smoothing, an f32 loss", "bf16[6,5] i64[6]<5 bf16[5]+=", ce_ex,
     G},
    {"zl_cross_entropy_ex", "class weights alone, a bf16 loss per row", "f32[6,5] i64[6]<5 f32[5]+=", ce_weights, G},
    {"zl_mse_loss", "mean", "f32[3,5] f32[3,5]", mse_mean, G},
    {"zl_mse_loss", "sum, strided", "f32[3,5]^T f32[3,5]", mse_sum, G},
    {"zl_mse_loss", "none", "f32[3,5] f32[3,5]", mse_none, G},
    {"zl_layer_norm", "weight and bias", "f32[2,3,8] f32[8] f32[8]", layer_norm_1, G | CLOSE},
    {"zl_layer_norm", "two dims", "f32[2,3,4] f32[3,4] f32[3,4]", layer_norm_2, G | CLOSE},
    {"zl_layer_norm", "bare, strided", "f32[6,5]^T", layer_norm_bare, G | CLOSE},
    {"zl_layer_norm", "bf16", "bf16[4,8] bf16[8] bf16[8]", layer_norm_1, G | CLOSE},
    {"zl_embedding", "i64 indices", "f32[10,4] i64[2,3]<10", embedding, G},
    {"zl_embedding", "i32 indices, bf16", "bf16[10,4] i32[5]<10", embedding, G},
    {"zl_embedding_padded", "row 2 padding", "f32[6,4] i64[3,4]<6", embedding_padded, G | NOFD},
    {"zl_rms_norm", "weight", "f32[2,3,8] f32[8]", rms_norm, G},
    {"zl_rms_norm", "two dims, bare", "f32[3,4,5]", rms_norm_bare, G},
    {"zl_rms_norm", "bf16", "bf16[4,8] bf16[8]", rms_norm, G},
    {"zl_rms_norm", "rows over chunks, lanes and a tail", "f32[70,21] f32[21]", rms_norm, G},
    {"zl_rotary", "cos and sin of [T, D]", "f32[2,2,4,6] f32[4,6]= f32[4,6]=", rotary, G | CLOSE},
    {"zl_rotary", "bf16, [B, 1, T, D] tables", "bf16[2,2,3,4] bf16[2,1,3,4]= bf16[2,1,3,4]=", rotary, G | CLOSE},
    {"zl_dropout", "training", "f32[4,8]", dropout, G | NOFD},
    {"zl_dropout", "evaluation", "f32[4,8]^T", dropout_eval, G},
    {"zl_conv2d", "padded, a bias", "f32[2,3,6,6] f32[4,3,3,3] f32[4]", conv2d, G | CLOSE},
    {"zl_conv2d", "strided, no bias", "f32[1,2,7,5] f32[3,2,3,2]", conv2d_strided, G | CLOSE},
    {"zl_conv2d_ex", "dilation and groups", "f32[1,4,7,7] f32[4,2,3,3] f32[4]", conv2d_ex, G | CLOSE},
    {"zl_max_pool2d", "2x2", "f32[2,3,6,6]", max_pool, G},
    {"zl_max_pool2d", "3x3 padded, ties", "f32[1,2,7,7]~", max_pool_pad, G | NOFD},
    {"zl_avg_pool2d", "2x2", "f32[2,3,6,6]", avg_pool, G},
    {"zl_avg_pool2d", "padding counted", "f32[1,2,5,6]", avg_pool_pad, G},
    {"zl_avg_pool2d", "padding left out", "f32[1,2,7,7]", avg_pool_nopad, G},
    {"zl_attention", "causal", "f32[2,2,4,8] f32[2,2,4,8] f32[2,2,4,8]", attention_causal, G | CLOSE},
    {"zl_attention", "a scale, not causal", "f32[1,2,3,4] f32[1,2,5,4] f32[1,2,5,4]", attention_scaled, G | CLOSE},
    {"zl_attention", "grouped queries, a KV cache", "f32[1,4,3,8] f32[1,2,5,8] f32[1,2,5,8]", attention_causal,
     G | CLOSE},
    /* bf16 and f16 at a GPU's flash widths: key tiles of 64, their edges crossed */
    {"zl_attention", "bf16, causal over two key tiles", "bf16[1,2,70,64] bf16[1,2,70,64] bf16[1,2,70,64]",
     attention_causal, G | CLOSE},
    {"zl_attention", "f16, not causal, more keys", "f16[2,2,5,64] f16[2,2,130,64] f16[2,2,130,64]", attention_scaled,
     G | CLOSE},
    {"zl_attention", "bf16, grouped queries, width 128", "bf16[1,4,65,128] bf16[1,1,66,128] bf16[1,1,66,128]",
     attention_causal, G | CLOSE},
    {"zl_attention_masked", "no mask", "f32[1,2,4,8] f32[1,2,4,8] f32[1,2,4,8]", attention_masked_null, G | CLOSE},
    {"zl_attention_masked", "a mask", "f32[1,2,3,4] f32[1,2,5,4] f32[1,2,5,4] bool[1,1,3,5]?", attention_masked,
     G | CLOSE},

    /* gather and scatter */
    {"zl_gather", "the last dim", "f32[2,3,4] i64[2,3,2]<4", gather_2, G},
    {"zl_gather", "dim 0, i32", "f32[4,3]^T i32[2,3]<4", gather_0, G},
    {"zl_scatter", "the last dim", "f32[2,3,4] i64[2,3,2]<4 f32[2,3,2]", scatter_2, G | NOFD},
    {"zl_scatter_add", "the last dim", "f32[2,3,4] i64[2,3,2]<4 f32[2,3,2]", scatter_add_2, G},
    {"zl_scatter_add", "dim 0, repeated indices", "f32[3,4] i64[5,4]<3 f32[5,4]", scatter_add_0, G},

    /* structure */
    {"zl_cat", "dim 0", "f32[2,3] f32[4,3]^T", cat_0, G},
    {"zl_cat", "dim 1, bf16", "bf16[2,3] bf16[2,1] bf16[2,4]", cat_1, G},
    {"zl_cat", "integers", "i64[2,3]<5 i64[1,3]<5", cat_0, 0},
    {"zl_stack", "dim 1", "f32[2,3] f32[2,3]^T f32[2,3]", stack_1, G},
    {"zl_stack", "dim 0, f16", "f16[3,2] f16[3,2]", stack_0, G},
    {"zl_index_select", "dim 0", "f32[5,4] i64[3]<5", index_select_0, G},
    {"zl_index_select", "dim 1, strided, repeats", "f32[3,6]^T i64[8]<6", index_select_1, G},
    {"zl_index_select", "integers", "i32[5,4]<9 i64[3]<5", index_select_0, 0},
    {"zl_where", "broadcast", "bool[3,5]? f32[3,5] f32[5]", where_, G},
    {"zl_where", "a u8 column, a host scalar", "u8[3,1]? f32[3,5]^T f32[]@h", where_, G},
    {"zl_where", "bf16", "bool[4,6]? bf16[4,6] bf16[4,6]", where_, G},
    {"zl_masked_fill", "a broadcast mask", "f32[3,5] bool[5]?", masked_fill, G},
    {"zl_masked_fill", "-inf, strided", "f32[4,3]^T bool[4,3]?", masked_fill_inf, G | NOFD},
};

const int op_case_count = (int)(sizeof op_cases / sizeof *op_cases);
