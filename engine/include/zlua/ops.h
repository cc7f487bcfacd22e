/* zlua/ops.h — tensor operations. Each returns a new reference or NULL with
 * zl_last_error(); each is recorded by autograd when grad mode is on and an input
 * requires grad, and fires the inputs' use hooks. Float dtypes compute in f32
 * (f16/bf16 inputs are widened and the result narrowed back); index arguments
 * are i64 (i32 accepted). Binary elementwise ops broadcast with numpy's rules. */
#ifndef ZLUA_OPS_H
#define ZLUA_OPS_H

#include "tensor.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pass as `dim` to a reduction to reduce over every dimension. */
#define ZL_ALL_DIMS (-1000)

typedef enum zl_reduction { ZL_REDUCE_MEAN = 0, ZL_REDUCE_SUM = 1, ZL_REDUCE_NONE = 2 } zl_reduction;

/* ---- elementwise, broadcasting ---- */
ZL_API zl_tensor *zl_add(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_sub(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_mul(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_div(zl_tensor *a, zl_tensor *b);
/* a ^ b elementwise; gradient w.r.t. b needs a > 0. */
ZL_API zl_tensor *zl_pow(zl_tensor *a, zl_tensor *b);
/* Comparisons give bool tensors (no gradient). */
ZL_API zl_tensor *zl_eq(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_lt(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_gt(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_ne(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_le(zl_tensor *a, zl_tensor *b);
ZL_API zl_tensor *zl_ge(zl_tensor *a, zl_tensor *b);

/* ---- elementwise, unary ---- */
ZL_API zl_tensor *zl_neg(zl_tensor *x);
ZL_API zl_tensor *zl_exp(zl_tensor *x);
ZL_API zl_tensor *zl_log(zl_tensor *x);
ZL_API zl_tensor *zl_sqrt(zl_tensor *x);
ZL_API zl_tensor *zl_tanh(zl_tensor *x);
ZL_API zl_tensor *zl_sigmoid(zl_tensor *x);
ZL_API zl_tensor *zl_relu(zl_tensor *x);
ZL_API zl_tensor *zl_abs(zl_tensor *x);
/* x ^ e for a scalar exponent. */
ZL_API zl_tensor *zl_pow_scalar(zl_tensor *x, double e);
/* x * s + a, one pass (used for scalar arithmetic from bindings). */
ZL_API zl_tensor *zl_affine(zl_tensor *x, double s, double a);
/* GELU: exact (erf) when approximate is false, the tanh form otherwise. */
ZL_API zl_tensor *zl_gelu(zl_tensor *x, bool approximate);
/* x * sigmoid(x) (SiLU, "swish"). */
ZL_API zl_tensor *zl_silu(zl_tensor *x);
ZL_API zl_tensor *zl_sin(zl_tensor *x);
ZL_API zl_tensor *zl_cos(zl_tensor *x);
/* log(1 + x), exact near 0. */
ZL_API zl_tensor *zl_log1p(zl_tensor *x);
/* log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's). */
ZL_API zl_tensor *zl_softplus(zl_tensor *x, double beta, double threshold);
/* x where x >= 0, slope * x elsewhere. */
ZL_API zl_tensor *zl_leaky_relu(zl_tensor *x, double slope);
/* min(max(x, lo), hi); -INFINITY or INFINITY leave that side open; NaN stays
 * NaN. The gradient passes strictly inside the bounds (an open side always),
 * not at them nor at NaN, as torch's with number bounds. An integer x stays
 * an integer for whole bounds (bool becomes i64); NaN bounds are an error. */
ZL_API zl_tensor *zl_clamp(zl_tensor *x, double lo, double hi);

/* ---- reductions: dim may be ZL_ALL_DIMS ---- */
ZL_API zl_tensor *zl_sum(zl_tensor *x, int dim, bool keepdim);
ZL_API zl_tensor *zl_mean(zl_tensor *x, int dim, bool keepdim);
/* Max values; the gradient goes to the first maximal element. */
ZL_API zl_tensor *zl_max(zl_tensor *x, int dim, bool keepdim);
/* Index (i64) of the first maximal element. */
ZL_API zl_tensor *zl_argmax(zl_tensor *x, int dim, bool keepdim);
/* Min values (the gradient to the first minimal element) and their index (i64). */
ZL_API zl_tensor *zl_min(zl_tensor *x, int dim, bool keepdim);
ZL_API zl_tensor *zl_argmin(zl_tensor *x, int dim, bool keepdim);
/* Sum or mean over the n dims listed (distinct, each in [0, ndim)); n == 0
 * reduces over every dimension. */
ZL_API zl_tensor *zl_sum_dims(zl_tensor *x, int n, const int *dims, bool keepdim);
ZL_API zl_tensor *zl_mean_dims(zl_tensor *x, int n, const int *dims, bool keepdim);
/* Variance and standard deviation over the n dims listed (n == 0: all), the
 * sum of squares divided by count - correction (1: unbiased, torch's default);
 * where that is not positive, inf (NaN without spread), as torch's. std's
 * gradient is 0 where std is 0. Float x only. */
ZL_API zl_tensor *zl_var(zl_tensor *x, int n, const int *dims, double correction, bool keepdim);
ZL_API zl_tensor *zl_std(zl_tensor *x, int n, const int *dims, double correction, bool keepdim);
/* Running sum along dim; integers give i64, as torch's. */
ZL_API zl_tensor *zl_cumsum(zl_tensor *x, int dim);

/* ---- linear algebra (OpenBLAS sgemm) ---- */
/* numpy matmul: 1-D and 2-D operands, batch dims broadcast. */
ZL_API zl_tensor *zl_matmul(zl_tensor *a, zl_tensor *b);
/* x [..., in] · w [out, in]^T + b [out] (b may be NULL). */
ZL_API zl_tensor *zl_linear(zl_tensor *x, zl_tensor *w, zl_tensor *b);
/* Whether bf16 matmuls and linears on the CPU run on bf16 dot products
 * (oneDNN, on a CPU with AVX512-BF16 or AMX). Otherwise each widens both
 * operands to f32, and bf16 activations cost conversions f32 ones do not
 * (ZLUA_BF16_GEMM=f32 asks for that path on any CPU). */
ZL_API bool zl_bf16_dot_products(void);

/* ---- neural-network ops ---- */
ZL_API zl_tensor *zl_softmax(zl_tensor *x, int dim);
ZL_API zl_tensor *zl_log_softmax(zl_tensor *x, int dim);
/* logits [N, C] (or [C]), target [N] (or []) class indices; targets equal to
 * ignore_index contribute nothing and are left out of the mean. */
ZL_API zl_tensor *zl_cross_entropy(zl_tensor *logits, zl_tensor *target, int64_t ignore_index,
                                   zl_reduction red);
/* The same with the loss in `dtype` (f32, bf16 or f16), whatever the logits'
 * dtype; the gradient of the logits keeps theirs. The math is f32 throughout,
 * so bf16 logits give an f32 loss bit for bit as zl_cross_entropy of their f32
 * copy, without making the copy (as autocast runs cross-entropy in f32). */
ZL_API zl_tensor *zl_cross_entropy_as(zl_tensor *logits, zl_tensor *target, int64_t ignore_index,
                                      zl_reduction red, zl_dtype dtype);
/* cross_entropy with torch's options: weight [C] (or NULL) scales each
 * class's loss and the mean divides by the targets' weights summed;
 * label_smoothing in [0, 1] mixes the target with the uniform distribution
 * (a row's loss (1 - eps) * w[t] * nll + eps / C * sum_c w[c] * -log p[c]).
 * The weights get no gradient. With NULL and 0 it is zl_cross_entropy_as. */
ZL_API zl_tensor *zl_cross_entropy_ex(zl_tensor *logits, zl_tensor *target, zl_tensor *weight,
                                      int64_t ignore_index, double label_smoothing, zl_reduction red,
                                      zl_dtype dtype);
ZL_API zl_tensor *zl_mse_loss(zl_tensor *input, zl_tensor *target, zl_reduction red);
/* Normalise over the last `nnorm` dims; weight and bias (shape of those dims) may be NULL. */
ZL_API zl_tensor *zl_layer_norm(zl_tensor *x, int nnorm, zl_tensor *weight, zl_tensor *bias,
                                double eps);
/* weight [V, D], indices (any shape, i64/i32) -> [..., D]. */
ZL_API zl_tensor *zl_embedding(zl_tensor *weight, zl_tensor *indices);
/* The same, row padding_idx (in [0, V)) getting no gradient. */
ZL_API zl_tensor *zl_embedding_padded(zl_tensor *weight, zl_tensor *indices, int64_t padding_idx);
/* Root-mean-square norm over the last `nnorm` dims, computed in f32 and
 * rounded to x's dtype before the weight (shape of those dims, or NULL)
 * multiplies it, as Hugging Face's LLaMA: weight * (x / sqrt(mean(x^2) + eps)).
 * The result's dtype is x's and weight's promoted; eps finite and >= 0. */
ZL_API zl_tensor *zl_rms_norm(zl_tensor *x, int nnorm, zl_tensor *weight, double eps);
/* Rotary position embedding as Hugging Face applies it: x [..., T, D] (D
 * even) times cos plus rotate_half(x) times sin, rotate_half(x) being
 * [-x[D/2:], x[:D/2]]; cos and sin broadcast to x (typically [B, 1, T, D] or
 * [T, D]), live where x does, and get no gradient. Computed in f32 and
 * rounded once to the three dtypes' promotion. */
ZL_API zl_tensor *zl_rotary(zl_tensor *x, zl_tensor *cos, zl_tensor *sin);
/* Zero each element with probability p and scale the rest by 1/(1-p); identity when !training. */
ZL_API zl_tensor *zl_dropout(zl_tensor *x, double p, bool training, zl_generator *g);
/* x [N, C, H, W], w [O, C, kh, kw], b [O] or NULL. */
ZL_API zl_tensor *zl_conv2d(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w,
                            int pad_h, int pad_w);
/* The same with dilation (the spacing of the kernel's taps, at least 1) and
 * groups: w [O, C / groups, kh, kw], C and O multiples of groups, output
 * channel o reading the input channels of its group o / (O / groups). */
ZL_API zl_tensor *zl_conv2d_ex(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w,
                               int pad_h, int pad_w, int dilation_h, int dilation_w, int groups);
/* x [N, C, H, W]; padding is -inf. */
ZL_API zl_tensor *zl_max_pool2d(zl_tensor *x, int kh, int kw, int stride_h, int stride_w,
                                int pad_h, int pad_w);
/* x [N, C, H, W]; the mean of each window, padding counted as zeros when
 * count_include_pad (torch's default) and left out otherwise. Padding is at
 * most half the kernel and the output rounds down, as torch's ceil_mode false. */
ZL_API zl_tensor *zl_avg_pool2d(zl_tensor *x, int kh, int kw, int stride_h, int stride_w, int pad_h,
                                int pad_w, bool count_include_pad);
/* q [..., H, Tq, D], k and v [..., Hkv, Tk, D]: softmax(q k^T * scale + mask) v.
 * k and v may have fewer heads (dim -3) than q where their count divides q's
 * (grouped-query attention: query head h reads key/value head
 * h / (H / Hkv)); the other batch dims are equal. causal lets query
 * i see keys up to i + Tk - Tq (the last queries of the sequence, as a KV
 * cache has them; Tq > Tk is refused). scale 0 means 1/sqrt(D); otherwise
 * it must be finite and positive. */
ZL_API zl_tensor *zl_attention(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal, double scale);
/* The same with mask (bool, broadcast to [..., H, Tq, Tk]): a query sees a
 * key only where mask is true (and causal allows); a query that sees no key
 * gets zeros. mask may be NULL; on a device it must be (ZL_EDEVICE). */
ZL_API zl_tensor *zl_attention_masked(zl_tensor *q, zl_tensor *k, zl_tensor *v, zl_tensor *mask, bool causal,
                                      double scale);

/* ---- gather and scatter (torch's semantics; index i64/i32, same ndim as x) ---- */
/* out[i][j] = x[index[i][j]][j] for dim 0, and so on; out has index's shape. */
ZL_API zl_tensor *zl_gather(zl_tensor *x, int dim, zl_tensor *index);
/* A copy of x with src's elements written where index points along dim
 * (later writes win when indices repeat) or, for scatter_add, added there. */
ZL_API zl_tensor *zl_scatter(zl_tensor *x, int dim, zl_tensor *index, zl_tensor *src);
ZL_API zl_tensor *zl_scatter_add(zl_tensor *x, int dim, zl_tensor *index, zl_tensor *src);

/* ---- structure ---- */
ZL_API zl_tensor *zl_cat(zl_tensor *const *ts, int n, int dim);
ZL_API zl_tensor *zl_stack(zl_tensor *const *ts, int n, int dim);
/* Rows of x along dim picked by a 1-D index tensor. */
ZL_API zl_tensor *zl_index_select(zl_tensor *x, int dim, zl_tensor *index);
/* cond ? a : b, broadcasting all three; cond is bool/u8 (non-zero = true). */
ZL_API zl_tensor *zl_where(zl_tensor *cond, zl_tensor *a, zl_tensor *b);
/* x with `value` where mask is true (mask broadcasts to x). */
ZL_API zl_tensor *zl_masked_fill(zl_tensor *x, zl_tensor *mask, double value);

#ifdef __cplusplus
}
#endif
#endif
