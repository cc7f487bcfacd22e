/* GEMM on a CUDA device through cuBLASLt, for the ops' kernel table: the
 * engine's row-major f32 GEMM, computed in strict f32 (no TF32, so results
 * stay comparable with the CPU's), and bf16 or f16 operands multiplied into
 * f32 with f32 accumulation (tensor cores), one cuBLASLt handle per device. */
#include <pthread.h>
#include <stdint.h>
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

/* A layout of rows x cols (column-major), leading dim ld, `batch` of them
 * `stride` elements apart. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                             int32_t batch, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutCreate(l, type, rows, cols, ld);
    if (!s && batch > 1)
        s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (!s && batch > 1)
        s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return s;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt
 * gets B first, and each row-major matrix read as its column-major transpose.
 * A and B are `ab` (es bytes an element), C f32; cuBLASLt counts batches in
 * int32: more go in groups. */
static zl_status lt_gemm(int index, cudaDataType_t ab, size_t es, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                         float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    if (zli_cuda_use(index)) return zli_last_code();
    if (M <= 0 || N <= 0 || batch <= 0) return ZL_OK;
    if (K <= 0) {   /* an empty product: C = beta C, which the callers ask for with beta 0 or 1 */
        if (beta == 1.0f) return ZL_OK;
        if (beta != 0.0f) return zl_error(ZL_EINVAL, "cuda:%d: matmul: an empty product with beta %g", index, beta);
        for (int64_t b = 0; b < batch; b++) {
            cudaError_t e = cudaMemset2D(C + b * sc, (size_t)ldc * sizeof *C, 0, (size_t)N * sizeof *C, (size_t)M);
            if (e) return zli_cuda_done(index, "matmul", (int)e);
        }
        return zli_cuda_done(index, "matmul", 0);
    }
    cublasLtHandle_t h = handle_of(index);
    if (!h) return ZL_EDEVICE;
    for (int64_t b0 = 0; b0 < batch; b0 += INT32_MAX) {
        int32_t nb = (int32_t)(batch - b0 < INT32_MAX ? batch - b0 : INT32_MAX);
        cublasLtMatmulDesc_t desc = NULL;
        cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
        cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        const char *what = "matmul descriptor";
        cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        if (!s) s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
        if (!s) s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
        if (!s) {
            what = "matrix layout";
            s = layout(&la, ab, tb ? (uint64_t)K : (uint64_t)N, tb ? (uint64_t)N : (uint64_t)K, ldb, nb, sb);
        }
        if (!s) s = layout(&lb, ab, ta ? (uint64_t)M : (uint64_t)K, ta ? (uint64_t)K : (uint64_t)M, lda, nb, sa);
        if (!s) s = layout(&lc, CUDA_R_32F, (uint64_t)N, (uint64_t)M, ldc, nb, sc);
        if (!s) {
            what = "matmul";
            s = cublasLtMatmul(h, desc, &alpha, (const char *)B + (size_t)(b0 * sb) * es, la,
                               (const char *)A + (size_t)(b0 * sa) * es, lb, &beta, C + b0 * sc, lc, C + b0 * sc, lc,
                               NULL, NULL, 0, NULL);
        }
        if (lc) cublasLtMatrixLayoutDestroy(lc);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (desc) cublasLtMatmulDescDestroy(desc);
        if (s) return lt_error(index, what, s);
    }
    return zli_cuda_done(index, "matmul", 0);
}

zl_status zli_cuda_gemm_batched(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                                float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    return lt_gemm(index, CUDA_R_32F, sizeof(float), ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                   batch);
}

zl_status zli_cuda_gemm_half(int index, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                             float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    if (dt != ZL_DTYPE_BF16 && dt != ZL_DTYPE_F16)
        return zl_error(ZL_EINVAL, "cuda:%d: matmul: half-precision operands must be bf16 or f16, not %s", index,
                        zl_dtype_name((zl_dtype)dt));
    return lt_gemm(index, dt == ZL_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F, 2, ta, tb, M, N, K, alpha, A, lda, sa, B,
                   ldb, sb, beta, C, ldc, sc, batch);
}

zl_status zli_cuda_gemm(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float *C, int64_t ldc)
{
    return zli_cuda_gemm_batched(index, ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1);
}
