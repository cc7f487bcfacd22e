/* The f32 GEMM (engine/ops/cpu/sgemm.c): each library it can call against a
 * double reference, on every layout and on shapes below and above the size
 * where oneDNN takes over; the libraries against each other; repeatable bits
 * run to run; the library switch and its errors. */
#include <math.h>
#include <stdlib.h>
#include "gradcheck.h"
#include "../../engine/ops/cpu/gemm.h"

#define U_F32 0x1p-24

/* The libraries this build can run. */
static int libraries(const char *out[2])
{
    int n = 0;
    out[n++] = "openblas";
    if (!zli_sgemm_select("onednn")) out[n++] = "onednn";
    zl_clear_error();
    zli_sgemm_select(NULL);
    return n;
}

static float *random_f32(int64_t n, unsigned seed)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((double)(seed >> 8) / (double)(1u << 24) - 0.5);
    }
    return p;
}

/* alpha op(A) op(B) + beta C0 for every layout, padded leading dims: each
 * entry within f32 accumulation of the double reference. */
TEST(sgemm_against_double)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 70, 5}, {33, 45, 0}, {64, 64, 64}, {200, 130, 140},
                                        {96, 300, 257}};
    const char *lib[2];
    int nl = libraries(lib);
    for (int l = 0; l < nl; l++) {
        CHECK(zli_sgemm_select(lib[l]) == ZL_OK);
        CHECK(!strcmp(zli_sgemm_library(), lib[l]));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            for (int mode = 0; mode < 8; mode++) {
                bool ta = mode & 1, tb = mode & 2, acc = mode & 4;
                float alpha = 0.75f, beta = acc ? 0.5f : 0.0f;
                int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                float *A = random_f32((ta ? K : M) * lda, 1u + (unsigned)s), *B = random_f32((tb ? N : K) * ldb, 7u);
                float *C0 = random_f32(M * ldc, 11u), *C = malloc((size_t)(M * ldc) * sizeof *C);
                memcpy(C, C0, (size_t)(M * ldc) * sizeof *C);
                zli_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                int bad = 0, pad = 0;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        if (j >= N) { pad += C[i * ldc + j] != C0[i * ldc + j]; continue; }
                        double ref = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            double p = (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                                       (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
                            ref += p;
                            mag += fabs(p);
                        }
                        ref = alpha * ref + beta * (double)C0[i * ldc + j];
                        mag = alpha * mag + fabs(beta * (double)C0[i * ldc + j]);
                        double tol = (double)(K + 3) * 2 * U_F32 * mag + 1e-30;
                        if (fabs(C[i * ldc + j] - ref) > tol && bad++ == 0)
                            zt_fail(__FILE__, __LINE__, "%s M=%lld N=%lld K=%lld ta=%d tb=%d beta=%g: C[%lld,%lld] "
                                    "= %.9g, expected %.9g", lib[l], (long long)M, (long long)N, (long long)K, ta,
                                    tb, beta, (long long)i, (long long)j, C[i * ldc + j], ref);
                    }
                CHECK(pad == 0);   /* the padding between rows is not written */
                free(A);
                free(B);
                free(C0);
                free(C);
            }
        }
    }
    zli_sgemm_select(NULL);
}

/* The same call twice gives the same bits, whichever library runs it. */
TEST(sgemm_repeats_its_bits)
{
    const char *lib[2];
    int nl = libraries(lib);
    int64_t M = 150, N = 260, K = 300;
    float *A = random_f32(M * K, 3u), *B = random_f32(K * N, 5u);
    float *C1 = malloc((size_t)(M * N) * sizeof *C1), *C2 = malloc((size_t)(M * N) * sizeof *C2);
    for (int l = 0; l < nl; l++) {
        CHECK(zli_sgemm_select(lib[l]) == ZL_OK);
        zli_sgemm(true, false, M, N, K, 1.0f, A, M, B, N, 0.0f, C1, N);
        zli_sgemm(true, false, M, N, K, 1.0f, A, M, B, N, 0.0f, C2, N);
        CHECK(memcmp(C1, C2, (size_t)(M * N) * sizeof *C1) == 0);
    }
    free(A);
    free(B);
    free(C1);
    free(C2);
    zli_sgemm_select(NULL);
}

TEST(sgemm_library_switch)
{
    const char *saved = getenv("ZLUA_GEMM");
    char *copy = saved ? strdup(saved) : NULL;
    const char *lib[2];
    bool dnnl = libraries(lib) == 2;
    setenv("ZLUA_GEMM", "openblas", 1);
    CHECK(zli_sgemm_select(NULL) == ZL_OK);
    CHECK(!strcmp(zli_sgemm_library(), "openblas"));
    setenv("ZLUA_GEMM", "onednn", 1);
    CHECK(zli_sgemm_select(NULL) == ZL_OK);
    CHECK(!strcmp(zli_sgemm_library(), dnnl ? "onednn" : "openblas"));
    unsetenv("ZLUA_GEMM");
    CHECK(zli_sgemm_select("auto") == ZL_OK);
    __builtin_cpu_init();
    CHECK(!strcmp(zli_sgemm_library(), dnnl && __builtin_cpu_supports("avx512f") ? "onednn" : "openblas"));
    CHECK_ERR(zli_sgemm_select("mkl"), "f32 gemm: unknown library 'mkl' (expected auto, openblas or onednn)");
    if (!dnnl) CHECK_ERR(zli_sgemm_select("onednn"), "this build has no oneDNN");
    if (copy) setenv("ZLUA_GEMM", copy, 1);
    else unsetenv("ZLUA_GEMM");
    free(copy);
    zli_sgemm_select(NULL);
}
