/* zli_sgemm, the engine's one f32 GEMM: which library runs it (OpenBLAS, or
 * oneDNN's sgemm on CPUs where it measures faster) and who threads it. Every
 * f32 product of matmul, linear, attention and convolution comes through here. */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "gemm.h"
#ifdef ZLUA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* Design note. On an AMD EPYC Zen 4 (AVX-512) oneDNN 2.6's sgemm ran the GPT
 * benchmark's GEMMs 2-12% faster than Debian's OpenBLAS 0.3.21 on one thread,
 * and the LM head's weight gradient (50257 x 256 x 512) 30% faster on two
 * (it threads over our OpenMP pool; OpenBLAS's slices scale poorly there);
 * limited to AVX2 the two were even, shape by shape either way. With B
 * transposed (a linear's forward, X W^T) oneDNN is 4-8% faster on one thread
 * (the LM head 107 against 103 GFLOP/s, a 256 -> 1024 layer 112 against 106)
 * but on two it ran the layers' shapes (0.1-0.3 GFLOP) at a sixth of
 * OpenBLAS's rate, and the whole step was no faster with it taking the LM
 * head's alone. Below about 128^3 multiply-adds its fixed cost per call
 * (1-10 us) loses to OpenBLAS. So: oneDNN on CPUs with AVX-512 from that size
 * up, with B transposed only on one thread; OpenBLAS otherwise; ZLUA_GEMM=
 * openblas or onednn overrides the CPU test. The choice depends only on the
 * CPU, the environment, the thread count and the shape, so a run's bits
 * repeat. oneDNN takes its packing buffers from malloc on every call: the
 * zlua executable's malloc settings (lua/src/zlua.c) keep those in the heap. */
#define ONEDNN_MIN_MACS ((int64_t)1 << 21)

enum { LIB_OPENBLAS = 0, LIB_ONEDNN = 1 };
static const char *const lib_names[] = {"openblas", "onednn"};
static int chosen = -1;   /* zli_choice's slot */

static bool onednn_built(void)
{
#ifdef ZLUA_HAVE_DNNL
    return true;
#else
    return false;
#endif
}

/* "auto": oneDNN where it is built and the CPU has AVX-512. */
static int auto_lib(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (onednn_built() && __builtin_cpu_supports("avx512f")) return LIB_ONEDNN;
#endif
    return LIB_OPENBLAS;
}

static int from_environment(void)
{
    const char *env = getenv("ZLUA_GEMM");
    if (env && !strcmp(env, "openblas")) return LIB_OPENBLAS;
    if (env && !strcmp(env, "onednn")) return onednn_built() ? LIB_ONEDNN : LIB_OPENBLAS;
    return auto_lib();
}

static int current_lib(void) { return zli_choice(&chosen, from_environment); }

const char *zli_sgemm_library(void) { return lib_names[current_lib()]; }

zl_status zli_sgemm_select(const char *name)
{
    if (!name) {
        __atomic_store_n(&chosen, from_environment(), __ATOMIC_RELAXED);
        return ZL_OK;
    }
    int want;
    if (!strcmp(name, "auto")) want = auto_lib();
    else if (!strcmp(name, "openblas")) want = LIB_OPENBLAS;
    else if (!strcmp(name, "onednn")) want = LIB_ONEDNN;
    else return zl_error(ZL_EINVAL, "f32 gemm: unknown library '%s' (expected auto, openblas or onednn)", name);
    if (want == LIB_ONEDNN && !onednn_built())
        return zl_error(ZL_EINVAL, "f32 gemm: this build has no oneDNN (configured with -DZLUA_ONEDNN=OFF)");
    __atomic_store_n(&chosen, want, __ATOMIC_RELAXED);
    return ZL_OK;
}

static void sgemm_blocks(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    /* BLAS counts in int: rows beyond INT_MAX go in blocks (each block's A and
     * C start further down). N, K and the leading dimensions are not split: one
     * of them past INT_MAX means a single row of over 8 GiB, which no caller
     * builds on a CPU of this class. */
    const int64_t MAXB = INT_MAX;
    for (int64_t i0 = 0; i0 < M; i0 += MAXB) {
        int64_t m = M - i0 < MAXB ? M - i0 : MAXB;
        const float *a = ta ? A + i0 : A + i0 * lda;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                    (blasint)N, (blasint)K, alpha, a, (blasint)lda, B, (blasint)ldb, beta, C + i0 * ldc, (blasint)ldc);
    }
}

/* Who threads an OpenBLAS GEMM. By default the engine's own OpenMP threads
 * each run a single-threaded BLAS call on a slice of C: one thread pool for
 * the whole step, where OpenBLAS's own pool would spin beside OpenMP's on the
 * same cores between calls (sched_yield took 6% of a step).
 * ZLUA_GEMM_THREADS=blas hands the threads to BLAS instead (kept at the
 * context's count). oneDNN threads on the same OpenMP pool by itself. */
static _Atomic int blas_owns_threads = -1;
static _Atomic int blas_threads;

static void set_blas_threads(int n)
{
    if (blas_threads != n) {
        openblas_set_num_threads(n);
        blas_threads = n;
    }
}

/* The threads a GEMM called here may use: one inside a parallel region. */
static int gemm_threads(void)
{
#ifdef _OPENMP
    if (!omp_in_parallel()) return omp_get_max_threads();
#endif
    return 1;
}

/* Slices are whole multiples of 16 rows or columns, so each one starts where
 * the BLAS kernels' panels would. */
static int64_t slice(int64_t n, int parts) { return ((n + parts - 1) / parts + 15) / 16 * 16; }

static void openblas_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (blas_owns_threads < 0) {
        const char *env = getenv("ZLUA_GEMM_THREADS");
        blas_owns_threads = env && strcmp(env, "blas") == 0;
    }
    int nt = gemm_threads();
    if (blas_owns_threads) {
        set_blas_threads(nt);
        sgemm_blocks(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    set_blas_threads(1);
    /* Below a few hundred thousand multiply-adds a second thread costs more
     * than it saves. */
    bool by_cols = N >= M;
    int64_t wide = by_cols ? N : M, step = slice(wide, nt);
    if (nt == 1 || M * N * K < ((int64_t)1 << 18) || wide < 32) {
        sgemm_blocks(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int parts = (int)((wide + step - 1) / step);
    #pragma omp parallel for schedule(static, 1) num_threads(parts)
    for (int p = 0; p < parts; p++) {
        int64_t lo = p * step, n = wide - lo < step ? wide - lo : step;
        if (by_cols)
            sgemm_blocks(ta, tb, M, n, K, alpha, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
        else
            sgemm_blocks(ta, tb, n, N, K, alpha, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc);
    }
}

void zli_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
#ifdef ZLUA_HAVE_DNNL
    /* oneDNN refuses only arguments OpenBLAS would refuse too; then OpenBLAS
     * says so in its own way. */
    if (current_lib() == LIB_ONEDNN && M * N * K >= ONEDNN_MIN_MACS && (!tb || gemm_threads() == 1) &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success)
        return;
#endif
    openblas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
