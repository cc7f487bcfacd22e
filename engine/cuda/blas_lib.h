/* Private to engine/cuda: cuBLASLt opened on the first device GEMM instead
 * of linked, since linking it costs every process about 90 MB of memory and
 * a tenth of a second at start, GPU or not. The functions blas.c calls,
 * under their own names, in one table. */
#ifndef ZL_CUDA_BLAS_LIB_H
#define ZL_CUDA_BLAS_LIB_H

#include <cublasLt.h>

#define ZLI_LT_FUNCTIONS(X)                                                                    \
    X(cublasLtCreate) X(cublasLtGetStatusString) X(cublasLtMatmul)                             \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate)                        \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                 \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)

#define ZLI_LT_FIELD(f) __typeof__(f) *f;
typedef struct zli_lt_api {
    ZLI_LT_FUNCTIONS(ZLI_LT_FIELD)
} zli_lt_api;
#undef ZLI_LT_FIELD

/* The table, the library opened on the first call (thread-safe); NULL with
 * ZL_EDEVICE naming the library and why it did not load. */
const zli_lt_api *zli_lt_api_get(void);

#endif
