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

/* ---- reductions: dim may be ZL_ALL_DIMS ---- */
ZL_API zl_tensor *zl_sum(zl_tensor *x, int dim, bool keepdim);
ZL_API zl_tensor *zl_mean(zl_tensor *x, int dim, bool keepdim);
/* Max values; the gradient goes to the first maximal element. */
ZL_API zl_tensor *zl_max(zl_tensor *x, int dim, bool keepdim);
/* Index (i64) of the first maximal element. */
ZL_API zl_tensor *zl_argmax(zl_tensor *x, int dim, bool keepdim);

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
ZL_API zl_tensor *zl_mse_loss(zl_tensor *input, zl_tensor *target, zl_reduction red);
/* Normalise over the last `nnorm` dims; weight and bias (shape of those dims) may be NULL. */
ZL_API zl_tensor *zl_layer_norm(zl_tensor *x, int nnorm, zl_tensor *weight, zl_tensor *bias,
                                double eps);
/* weight [V, D], indices (any shape, i64/i32) -> [..., D]. */
ZL_API zl_tensor *zl_embedding(zl_tensor *weight, zl_tensor *indices);
/* Zero each element with probability p and scale the rest by 1/(1-p); identity when !training. */
ZL_API zl_tensor *zl_dropout(zl_tensor *x, double p, bool training, zl_generator *g);
/* x [N, C, H, W], w [O, C, kh, kw], b [O] or NULL. */
ZL_API zl_tensor *zl_conv2d(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w,
                            int pad_h, int pad_w);
/* x [N, C, H, W]; padding is -inf. */
ZL_API zl_tensor *zl_max_pool2d(zl_tensor *x, int kh, int kw, int stride_h, int stride_w,
                                int pad_h, int pad_w);
/* q, k, v [..., T, D]; softmax(q k^T * scale + causal mask) v. scale <= 0 means 1/sqrt(D). */
ZL_API zl_tensor *zl_attention(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal, double scale);

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
