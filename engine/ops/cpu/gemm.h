/* Private: the engine's f32 GEMM (sgemm.c), the one place it calls BLAS. Row-major. */
#ifndef ZL_GEMM_H
#define ZL_GEMM_H

#include "../op_util.h"

/* C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, row-major with leading dims. */
ZLI_HIDDEN void zli_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                          int64_t ldc);

/* The library large GEMMs go to: "openblas" or "onednn". */
ZLI_HIDDEN const char *zli_sgemm_library(void);
/* Choose it: "auto" (the faster on this CPU), "openblas" or "onednn"; NULL
 * re-reads ZLUA_GEMM. ZL_EINVAL for an unknown name, or onednn in a build
 * without it. Not to be called while a GEMM runs. */
ZLI_HIDDEN zl_status zli_sgemm_select(const char *name);

#endif
