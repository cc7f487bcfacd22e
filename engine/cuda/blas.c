/* GEMM on a CUDA device through cuBLASLt, for the ops' kernel table: the
 * engine's row-major f32 GEMM, computed in strict f32 (no TF32, so results
 * stay comparable with the CPU's), one cuBLASLt handle per device. */
#include <pthread.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include "cuda_impl.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t g_handle[ZLI_CUDA_MAX_DEVICES];

static zl_status lt_error(int index, const char *what, cublasStatus_t s)
{
    return zl_error(ZL_EDEVICE, "cuda:%d: cuBLASLt %s failed: %s", index, what, cublasLtGetStatusString(s));
}

static cublasLtHandle_t handle_of(int index)
{
    pthread_mutex_lock(&g_mu);
    cublasLtHandle_t h = g_handle[index];
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (!h && (s = cublasLtCreate(&g_handle[index])) == CUBLAS_STATUS_SUCCESS) h = g_handle[index];
    pthread_mutex_unlock(&g_mu);
    if (!h) lt_error(index, "create", s);
    return h;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt
 * gets B first, and each row-major matrix read as its column-major transpose. */
zl_status zli_cuda_gemm(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float *C, int64_t ldc)
{
    if (zli_cuda_use(index)) return zli_last_code();
    cublasLtHandle_t h = handle_of(index);
    if (!h) return ZL_EDEVICE;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const char *what = "matmul descriptor";
    cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!s) s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (!s) s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (!s) {
        what = "matrix layout";
        s = cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, tb ? (uint64_t)K : (uint64_t)N, tb ? (uint64_t)N : (uint64_t)K,
                                       ldb);
    }
    if (!s) s = cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, ta ? (uint64_t)M : (uint64_t)K,
                                           ta ? (uint64_t)K : (uint64_t)M, lda);
    if (!s) s = cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)N, (uint64_t)M, ldc);
    if (!s) {
        what = "matmul";
        const float one = 1.0f, zero = 0.0f;
        s = cublasLtMatmul(h, desc, &one, B, la, A, lb, &zero, C, lc, C, lc, NULL, NULL, 0, NULL);
    }
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (s) return lt_error(index, what, s);
    return zli_cuda_done(index, "matmul", 0);
}
