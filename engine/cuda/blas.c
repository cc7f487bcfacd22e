/* GEMM on a CUDA device through cuBLASLt, for the ops' kernel table: the
 * engine's row-major f32 GEMM, computed in strict f32 (no TF32, so results
 * stay comparable with the CPU's), and bf16 or f16 operands multiplied into
 * f32 with f32 accumulation (tensor cores), one cuBLASLt handle per device.
 * Each call's algorithm is the heuristic's first choice for its shapes and
 * its pointers' real alignment, with a 32 MiB workspace per device (split-K
 * and stream-K kernels need one), asked once per shape and kept; when no
 * plan fits, or the chosen one is refused, cuBLASLt picks its own without a
 * workspace, as before. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "blas_lib.h"
#include "cuda_impl.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t g_handle[ZLI_CUDA_MAX_DEVICES];
/* Set by the first handle_of, which every other use follows. */
static const zli_lt_api *g_lt;

#define LT_WORKSPACE ((int64_t)32 << 20)
static zl_tensor *g_workspace[ZLI_CUDA_MAX_DEVICES];
static atomic_bool g_refuse_plans;
static atomic_llong g_fallbacks;

/* What a plan depends on; zeroed whole before it is filled, so that two keys
 * compare with memcmp. */
typedef struct lt_key {
    int index, ab, ct;
    bool ta, tb, bias;
    int32_t nb;
    int64_t M, N, K, lda, ldb, ldc, sa, sb, sc;
    uint32_t align[4];
} lt_key;

/* C's type (f32 for the plain GEMMs; bf16 or f16 for linear_half, es bytes
 * an element), the f32 bias its epilogue adds (or NULL), and where to say
 * that cuBLASLt refused it (NULL: a refusal is an error). */
typedef struct lt_out {
    cudaDataType_t type;
    size_t es;
    const float *bias;
    bool *unsupported;
} lt_out;

static const lt_out LT_F32 = {CUDA_R_32F, sizeof(float), NULL, NULL};

typedef struct lt_plan {
    lt_key key;
    bool used, found;
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
} lt_plan;

#define LT_PLANS 1024
static lt_plan g_plans[LT_PLANS];

void zli_cuda_blas_refuse_plans(bool on) { atomic_store(&g_refuse_plans, on); }
int64_t zli_cuda_blas_fallbacks(void) { return atomic_load(&g_fallbacks); }

static zl_status lt_error(int index, const char *what, cublasStatus_t s)
{
    return zl_error(ZL_EDEVICE, "cuda:%d: cuBLASLt %s failed: %s", index, what, g_lt->cublasLtGetStatusString(s));
}

static cublasLtHandle_t handle_of(int index)
{
    pthread_mutex_lock(&g_mu);
    if (!g_lt) g_lt = zli_lt_api_get();
    cublasLtHandle_t h = g_lt ? g_handle[index] : NULL;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (g_lt && !h && (s = g_lt->cublasLtCreate(&g_handle[index])) == CUBLAS_STATUS_SUCCESS) h = g_handle[index];
    pthread_mutex_unlock(&g_mu);
    if (!h && g_lt) lt_error(index, "create", s);
    return h;
}

/* The largest power of two up to 256 dividing the pointer, the leading
 * dimension and (for batches) the batch stride, in bytes: what the algorithm
 * may assume of the operand. */
static uint32_t alignment(const void *p, int64_t ld, int64_t stride, size_t es, int32_t nb)
{
    uint64_t bits = (uint64_t)(uintptr_t)p | (uint64_t)ld * es | (nb > 1 ? (uint64_t)stride * es : 0) | 256u;
    return (uint32_t)(bits & (~bits + 1));
}

static void *workspace_of(int index)
{
    pthread_mutex_lock(&g_mu);
    if (!g_workspace[index])
        g_workspace[index] = zli_cuda_new(ZL_DTYPE_U8, 1, (int64_t[]){LT_WORKSPACE}, ZL_MEM_OTHER, index);
    void *p = g_workspace[index] ? zl_tensor_data(g_workspace[index]) : NULL;
    pthread_mutex_unlock(&g_mu);
    return p;
}

static uint64_t key_hash(const lt_key *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211u;
    return h;
}

/* The table's entry for key, or NULL with *room the slot a new one takes
 * (the first free one of 8 probes, else the one the key hashes to). Called
 * with g_mu held. */
static lt_plan *plan_entry(const lt_key *key, lt_plan **room)
{
    uint64_t hash = key_hash(key);
    *room = &g_plans[hash % LT_PLANS];
    for (int probe = 0; probe < 8; probe++) {
        lt_plan *e = &g_plans[(hash + (uint64_t)probe) % LT_PLANS];
        if (!e->used) {
            *room = e;
            return NULL;
        }
        if (!memcmp(&e->key, key, sizeof *key)) return e;
    }
    return NULL;
}

/* The plan for key (the heuristic asked on a miss). *plan is a copy, taken
 * under the lock. */
static void plan_for(cublasLtHandle_t h, const lt_key *key, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                     cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, bool have_workspace, lt_plan *plan)
{
    pthread_mutex_lock(&g_mu);
    lt_plan *slot, *e = plan_entry(key, &slot);
    if (e) {
        *plan = *e;
        pthread_mutex_unlock(&g_mu);
        return;
    }
    memset(slot, 0, sizeof *slot);
    slot->key = *key;
    slot->used = true;
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = have_workspace ? (uint64_t)LT_WORKSPACE : 0;
    cublasStatus_t s = g_lt->cublasLtMatmulPreferenceCreate(&pref);
    if (!s)
        s = g_lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    /* cuBLASLt's A is our B (row-major as column-major, operands swapped). */
    const uint32_t align[4] = {key->align[1], key->align[0], key->align[2], key->align[2]};
    for (int i = 0; i < 4 && !s; i++)
        s = g_lt->cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i], sizeof align[i]);
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    if (!s) s = g_lt->cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &r, &found);
    if (!s && found > 0 && r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= ws) {
        slot->found = true;
        slot->algo = r.algo;
        slot->workspace = r.workspaceSize;
    }
    if (pref) g_lt->cublasLtMatmulPreferenceDestroy(pref);
    *plan = *slot;
    pthread_mutex_unlock(&g_mu);
}

/* A plan found to be refused is not asked for again. */
static void plan_refused(const lt_key *key)
{
    pthread_mutex_lock(&g_mu);
    lt_plan *room, *e = plan_entry(key, &room);
    if (e) e->found = false;
    pthread_mutex_unlock(&g_mu);
}

/* A layout of rows x cols (column-major), leading dim ld, `batch` of them
 * `stride` elements apart. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                             int32_t batch, int64_t stride)
{
    cublasStatus_t s = g_lt->cublasLtMatrixLayoutCreate(l, type, rows, cols, ld);
    if (!s && batch > 1)
        s = g_lt->cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (!s && batch > 1)
        s = g_lt->cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                   sizeof stride);
    return s;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt
 * gets B first, and each row-major matrix read as its column-major transpose
 * (so a bias over C's columns is one over C^T's rows, as the epilogue adds
 * it). A and B are `ab` (es bytes an element), C as `out` says; cuBLASLt
 * counts batches in int32: more go in groups. */
static zl_status lt_gemm(int index, cudaDataType_t ab, size_t es, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                         float beta, void *C, int64_t ldc, int64_t sc, int64_t batch, const lt_out *out)
{
    if (zli_cuda_use(index)) return zli_last_code();
    if (M <= 0 || N <= 0 || batch <= 0) return ZL_OK;
    if (K <= 0 && out->unsupported) {   /* the bias alone: the caller's other path writes it */
        *out->unsupported = true;
        return ZL_OK;
    }
    if (K <= 0) {   /* an empty product: C = beta C, which the callers ask for with beta 0 or 1 */
        if (beta == 1.0f) return ZL_OK;
        if (beta != 0.0f) return zl_error(ZL_EINVAL, "cuda:%d: matmul: an empty product with beta %g", index, beta);
        for (int64_t b = 0; b < batch; b++) {
            cudaError_t e = cudaMemset2D((char *)C + (size_t)(b * sc) * out->es, (size_t)ldc * out->es, 0,
                                         (size_t)N * out->es, (size_t)M);
            if (e) return zli_cuda_done(index, "matmul", (int)e);
        }
        return zli_cuda_done(index, "matmul", 0);
    }
    cublasLtHandle_t h = handle_of(index);
    if (!h) return ZL_EDEVICE;
    void *ws = workspace_of(index);
    for (int64_t b0 = 0; b0 < batch; b0 += INT32_MAX) {
        int32_t nb = (int32_t)(batch - b0 < INT32_MAX ? batch - b0 : INT32_MAX);
        cublasLtMatmulDesc_t desc = NULL;
        cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
        cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        const char *what = "matmul descriptor";
        cublasStatus_t s = g_lt->cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        if (!s) s = g_lt->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
        if (!s) s = g_lt->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
        if (!s && out->bias) {
            cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
            cudaDataType_t bt = CUDA_R_32F;
            s = g_lt->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
            if (!s) s = g_lt->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &out->bias,
                                                       sizeof out->bias);
            if (!s)
                s = g_lt->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        }
        if (!s) {
            what = "matrix layout";
            s = layout(&la, ab, tb ? (uint64_t)K : (uint64_t)N, tb ? (uint64_t)N : (uint64_t)K, ldb, nb, sb);
        }
        if (!s) s = layout(&lb, ab, ta ? (uint64_t)M : (uint64_t)K, ta ? (uint64_t)K : (uint64_t)M, lda, nb, sa);
        if (!s) s = layout(&lc, out->type, (uint64_t)N, (uint64_t)M, ldc, nb, sc);
        const void *pb = (const char *)B + (size_t)(b0 * sb) * es, *pa = (const char *)A + (size_t)(b0 * sa) * es;
        void *pc = (char *)C + (size_t)(b0 * sc) * out->es;
        lt_key key;
        memset(&key, 0, sizeof key);
        key.index = index;
        key.ab = (int)ab;
        key.ct = (int)out->type;
        key.bias = out->bias != NULL;
        key.ta = ta;
        key.tb = tb;
        key.nb = nb;
        key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.sa = sa, key.sb = sb,
        key.sc = sc;
        key.align[0] = alignment(pa, lda, sa, es, nb);
        key.align[1] = alignment(pb, ldb, sb, es, nb);
        key.align[2] = alignment(pc, ldc, sc, out->es, nb);
        key.align[3] = out->bias ? alignment(out->bias, 0, 0, sizeof(float), 1) : 0;
        lt_plan plan = {0};
        if (!s) plan_for(h, &key, desc, la, lb, lc, ws != NULL, &plan);
        if (!s && plan.found) {
            what = "matmul";
            s = atomic_load(&g_refuse_plans)
                    ? CUBLAS_STATUS_NOT_SUPPORTED
                    : g_lt->cublasLtMatmul(h, desc, &alpha, pb, la, pa, lb, &beta, pc, lc, pc, lc, &plan.algo,
                                     plan.workspace ? ws : NULL, plan.workspace, NULL);
            if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
                plan_refused(&key);
                plan.found = false;
                s = CUBLAS_STATUS_SUCCESS;
            }
        }
        if (!s && !plan.found) {
            what = "matmul";
            atomic_fetch_add(&g_fallbacks, 1);
            s = g_lt->cublasLtMatmul(h, desc, &alpha, pb, la, pa, lb, &beta, pc, lc, pc, lc, NULL, NULL, 0, NULL);
        }
        if (lc) g_lt->cublasLtMatrixLayoutDestroy(lc);
        if (lb) g_lt->cublasLtMatrixLayoutDestroy(lb);
        if (la) g_lt->cublasLtMatrixLayoutDestroy(la);
        if (desc) g_lt->cublasLtMatmulDescDestroy(desc);
        /* linear_half's caller has another way, which reports a real error
         * itself: any refusal here (an epilogue or bias type this cuBLASLt
         * lacks, say) sends it there. */
        if (s && out->unsupported) {
            *out->unsupported = true;
            return ZL_OK;
        }
        if (s) return lt_error(index, what, s);
    }
    return zli_cuda_done(index, "matmul", 0);
}

static cudaDataType_t half_type(int dt) { return dt == ZL_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

zl_status zli_cuda_gemm_batched(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                                float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    return lt_gemm(index, CUDA_R_32F, sizeof(float), ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                   batch, &LT_F32);
}

zl_status zli_cuda_gemm_half(int index, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                             float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    if (dt != ZL_DTYPE_BF16 && dt != ZL_DTYPE_F16)
        return zl_error(ZL_EINVAL, "cuda:%d: matmul: half-precision operands must be bf16 or f16, not %s", index,
                        zl_dtype_name((zl_dtype)dt));
    return lt_gemm(index, half_type(dt), 2, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch,
                   &LT_F32);
}

zl_status zli_cuda_linear_half(int index, int dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                               const void *B, int64_t ldb, const float *bias, void *D, int64_t ldd, bool *done)
{
    bool unsupported = false;
    *done = false;
    if (dt != ZL_DTYPE_BF16 && dt != ZL_DTYPE_F16) return ZL_OK;
    cudaDataType_t t = half_type(dt);
    lt_out out = {t, 2, bias, &unsupported};
    zl_status st = lt_gemm(index, t, 2, false, true, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, D, ldd, 0, 1, &out);
    *done = !st && !unsupported;
    return st;
}

zl_status zli_cuda_gemm(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float *C, int64_t ldc)
{
    return zli_cuda_gemm_batched(index, ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1);
}
