/* Private: the one place the engine calls BLAS. Row-major, f32. */
#ifndef ZL_GEMM_H
#define ZL_GEMM_H

#include "../op_util.h"

/* C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, row-major with leading dims. */
ZLI_HIDDEN void zli_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                          int64_t ldc);

#endif
