/* Private: the bf16 GEMM behind matmul and linear when both operands are bf16,
 * and the switch between its two paths (see gemm_bf16.c). Row-major. */
#ifndef ZL_GEMM_BF16_H
#define ZL_GEMM_BF16_H

#include "../op_util.h"

/* C[M,N] = op(A)[M,K] · op(B)[K,N] + bias[N] (added to every row; NULL for
 * none). A and B are bf16 with leading dims lda and ldb, read transposed when
 * ta / tb; products are accumulated in f32, the bias added in f32, and the sum
 * rounded once when c_dtype is ZL_DTYPE_BF16 (ZL_DTYPE_F32 keeps it). C [out]
 * has leading dim ldc and must not overlap A, B or bias.
 * Errors: ZL_ENOMEM when a working buffer cannot be had (C is then undefined). */
ZLI_HIDDEN zl_status zli_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                   int64_t lda, const uint16_t *B, int64_t ldb, const float *bias, void *C,
                                   zl_dtype c_dtype, int64_t ldc);

/* The path the next call takes: "onednn" (bf16 dot products in hardware) or
 * "f32" (both operands widened to f32, OpenBLAS sgemm, one rounding). */
ZLI_HIDDEN const char *zli_gemm_bf16_path(void);
/* Choose the path: "auto" (the best this CPU runs), "onednn", "f32" or "off"
 * (the f32 path); NULL re-reads ZLUA_BF16_GEMM. ZL_EINVAL for an unknown name
 * or "onednn" where it cannot run. Not to be called while a GEMM runs. */
ZLI_HIDDEN zl_status zli_gemm_bf16_select(const char *name);

#endif
