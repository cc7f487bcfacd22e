/* The bf16 GEMM (engine/ops/cpu/gemm_bf16.c) and matmul / linear on bf16
 * operands: results against a double reference computed from the same bf16
 * values, within f32 accumulation and one bf16 rounding; gradients against the
 * reference and the f32 path; the two paths against each other; the path
 * switch, memory accounting and allocation failures. */
#include <stdlib.h>
#include "gradcheck.h"
#include "../../engine/ops/cpu/gemm_bf16.h"

#define U_BF16 0x1p-8    /* unit roundoff of bf16 (8 significant bits) */
#define U_F32 0x1p-24

static bool cpu_has_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
}

/* The paths this build and CPU can run. */
static int paths(const char *out[2])
{
    int n = 0;
    out[n++] = "f32";
    if (!zli_gemm_bf16_select("onednn")) out[n++] = "onednn";
    zl_clear_error();
    zli_gemm_bf16_select(NULL);
    return n;
}

static float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Distance in units in the last place between two finite bf16 values. */
static int ulps(uint16_t a, uint16_t b)
{
    int ia = a & 0x8000 ? -(a & 0x7fff) : a, ib = b & 0x8000 ? -(b & 0x7fff) : b;
    return abs(ia - ib);
}

static uint16_t *random_bf16(int64_t n)
{
    uint16_t *p = malloc((size_t)n * sizeof *p);
    int64_t shape[1] = {n};
    zl_tensor *t = zl_tensor_randn(ZL_DTYPE_F32, 1, shape, NULL);
    for (int64_t i = 0; i < n; i++) p[i] = zl_f32_to_bf16((float)zl_tensor_get(t, i));
    zl_tensor_release(t);
    return p;
}

/* One product out of a reference in double from the bf16 inputs: the exact
 * value, and the sum of |a||b| that bounds the f32 accumulation error. */
static void ref_entry(bool ta, bool tb, int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                      int64_t i, int64_t j, double *val, double *mag)
{
    double s = 0, m = 0;
    for (int64_t k = 0; k < K; k++) {
        double a = bf16_value(ta ? A[k * lda + i] : A[i * lda + k]);
        double b = bf16_value(tb ? B[j * ldb + k] : B[k * ldb + j]);
        s += a * b;
        m += fabs(a * b);
    }
    *val = s;
    *mag = m;
}

/* |got - ref| within f32 accumulation over K terms, plus one bf16 rounding
 * when the result is bf16. */
static bool within(double got, double ref, double mag, int64_t K, bool rounded)
{
    double acc = (double)(K + 2) * 2 * U_F32 * mag;
    double tol = acc + (rounded ? U_BF16 * (fabs(ref) + acc) : 0) + 1e-30;
    return fabs(got - ref) <= tol;
}

/* Every combination of transposes, padded leading dims, bias, output dtype and
 * path, on shapes from 1 to past the kernels' blocking. */
TEST(gemm_kernel_against_double)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {1, 17, 9}, {7, 1, 33}, {5, 6, 0}, {33, 45, 70},
                                        {64, 64, 64}, {130, 67, 129}};
    const char *path[2];
    int np = paths(path);
    for (int p = 0; p < np; p++) {
        CHECK(zli_gemm_bf16_select(path[p]) == ZL_OK);
        CHECK(!strcmp(zli_gemm_bf16_path(), path[p]));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            for (int mode = 0; mode < 16; mode++) {
                bool ta = mode & 1, tb = mode & 2, with_bias = mode & 4, round = mode & 8;
                int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                uint16_t *A = random_bf16((ta ? K : M) * lda + 1), *B = random_bf16((tb ? N : K) * ldb + 1);
                float *bias = malloc((size_t)N * sizeof *bias);
                for (int64_t j = 0; j < N; j++) bias[j] = (float)(0.25 * (double)(j % 7) - 0.5);
                size_t es = round ? 2 : 4;
                unsigned char *C = malloc((size_t)(M * ldc) * es);
                memset(C, 0x5a, (size_t)(M * ldc) * es);
                zl_status st = zli_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, with_bias ? bias : NULL, C,
                                             round ? ZL_DTYPE_BF16 : ZL_DTYPE_F32, ldc);
                CHECK(st == ZL_OK);
                int bad = 0, pad = 0;
                for (int64_t i = 0; i < M; i++) {
                    for (int64_t j = 0; j < ldc; j++) {
                        const unsigned char *e = C + (size_t)(i * ldc + j) * es;
                        if (j >= N) {   /* the padding between rows is not written */
                            for (size_t q = 0; q < es; q++) pad += e[q] != 0x5a;
                            continue;
                        }
                        double val, mag, got;
                        ref_entry(ta, tb, K, A, lda, B, ldb, i, j, &val, &mag);
                        if (with_bias) val += bias[j];
                        if (round) { uint16_t h; memcpy(&h, e, 2); got = bf16_value(h); }
                        else { float f; memcpy(&f, e, 4); got = f; }
                        if (!within(got, val, mag, K, round) && bad++ == 0)
                            zt_fail(__FILE__, __LINE__, "%s M=%lld N=%lld K=%lld ta=%d tb=%d bias=%d bf16=%d: "
                                    "C[%lld,%lld] = %.9g, expected %.9g", path[p], (long long)M, (long long)N,
                                    (long long)K, ta, tb, with_bias, round, (long long)i, (long long)j, got, val);
                    }
                }
                CHECK(pad == 0);
                free(A);
                free(B);
                free(bias);
                free(C);
            }
        }
    }
    zli_gemm_bf16_select(NULL);
}

/* The two paths see the same bf16 inputs and differ only in f32 summation
 * order: one bf16 rounding apart, plus the accumulation error where the sum
 * cancels (there a few ulps of a small result are within f32 error). */
TEST(gemm_paths_agree)
{
    const char *path[2];
    if (paths(path) < 2) {
        printf("     (only the f32 path runs here: nothing to compare)\n");
        return;
    }
    static const int64_t shapes[][3] = {{3, 5, 7}, {96, 80, 200}, {256, 384, 512}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        uint16_t *A = random_bf16(M * K), *B = random_bf16(K * N);
        uint16_t *C[2] = {malloc((size_t)(M * N) * 2), malloc((size_t)(M * N) * 2)};
        for (int p = 0; p < 2; p++) {
            zli_gemm_bf16_select(path[p]);
            CHECK(zli_gemm_bf16(false, true, M, N, K, A, K, B, K, NULL, C[p], ZL_DTYPE_BF16, N) == ZL_OK);
        }
        int64_t within_one = 0;
        for (int64_t i = 0; i < M * N; i++) {
            double val, mag, x = bf16_value(C[0][i]), y = bf16_value(C[1][i]);
            ref_entry(false, true, K, A, K, B, K, i / N, i % N, &val, &mag);
            double tol = U_BF16 * fmax(fabs(x), fabs(y)) + 2 * (double)(K + 2) * 2 * U_F32 * mag;
            within_one += ulps(C[0][i], C[1][i]) <= 1;
            if (fabs(x - y) > tol) {
                zt_fail(__FILE__, __LINE__, "M=%lld N=%lld K=%lld: element %lld is %.9g on one path, %.9g on the "
                        "other", (long long)M, (long long)N, (long long)K, (long long)i, x, y);
                break;
            }
        }
        CHECK(within_one >= M * N * 99 / 100);   /* cancellation is the exception */
        free(A);
        free(B);
        free(C[0]);
        free(C[1]);
    }
    zli_gemm_bf16_select(NULL);
}

TEST(gemm_deterministic)
{
    int64_t M = 200, N = 300, K = 500;
    uint16_t *A = random_bf16(M * K), *B = random_bf16(K * N);
    uint16_t *C1 = malloc((size_t)(M * N) * 2), *C2 = malloc((size_t)(M * N) * 2);
    CHECK(zli_gemm_bf16(false, false, M, N, K, A, K, B, N, NULL, C1, ZL_DTYPE_BF16, N) == ZL_OK);
    CHECK(zli_gemm_bf16(false, false, M, N, K, A, K, B, N, NULL, C2, ZL_DTYPE_BF16, N) == ZL_OK);
    CHECK(memcmp(C1, C2, (size_t)(M * N) * 2) == 0);
    free(A);
    free(B);
    free(C1);
    free(C2);
}

TEST(gemm_path_switch)
{
    const char *saved = getenv("ZLUA_BF16_GEMM");
    char *copy = saved ? strdup(saved) : NULL;
    const char *best = cpu_has_bf16() && !zli_gemm_bf16_select("onednn") ? "onednn" : "f32";
    zl_clear_error();
    setenv("ZLUA_BF16_GEMM", "off", 1);
    CHECK(zli_gemm_bf16_select(NULL) == ZL_OK);
    CHECK(!strcmp(zli_gemm_bf16_path(), "f32"));
    unsetenv("ZLUA_BF16_GEMM");
    CHECK(zli_gemm_bf16_select(NULL) == ZL_OK);
    CHECK(!strcmp(zli_gemm_bf16_path(), best));
    CHECK(zli_gemm_bf16_select("off") == ZL_OK);
    CHECK(!strcmp(zli_gemm_bf16_path(), "f32"));
    CHECK(zli_gemm_bf16_select("auto") == ZL_OK);
    CHECK(!strcmp(zli_gemm_bf16_path(), best));
    CHECK_ERR(zli_gemm_bf16_select("fast"), "bf16 gemm: unknown path 'fast' (expected auto, onednn, f32 or off)");
    if (!strcmp(best, "f32"))
        CHECK_ERR(zli_gemm_bf16_select("onednn"), "the onednn path needs oneDNN and a CPU with AVX512-BF16");
    if (copy) setenv("ZLUA_BF16_GEMM", copy, 1);
    free(copy);
    zli_gemm_bf16_select(NULL);
}

/* ---- matmul and linear on bf16 tensors ---- */

static zl_tensor *bf16_randn(int ndim, const int64_t *shape, bool grad)
{
    zl_tensor *f = zl_tensor_randn(ZL_DTYPE_F32, ndim, shape, NULL);
    zl_tensor *t = zl_tensor_to(f, ZL_DTYPE_BF16);
    zl_tensor_release(f);
    if (grad) zl_tensor_set_requires_grad(t, true);
    return t;
}

static double *values(const zl_tensor *t)
{
    double *v = malloc((size_t)zl_tensor_numel(t) * sizeof *v);
    zl_tensor_to_f64(t, v);
    return v;
}

/* out[bat, M, N] = a[bat?, M, K] · b[bat?, K, N] in double, with |a||b| sums;
 * an operand with bstride 0 is shared by every batch. */
static void ref_matmul(int64_t bat, int64_t M, int64_t N, int64_t K, const double *a, int64_t sa, const double *b,
                       int64_t sb, double *out, double *mag)
{
    for (int64_t q = 0; q < bat; q++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, m = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = a[q * sa + i * K + k] * b[q * sb + k * N + j];
                    s += p;
                    m += fabs(p);
                }
                out[(q * M + i) * N + j] = s;
                mag[(q * M + i) * N + j] = m;
            }
}

static void check_against(const char *name, const zl_tensor *t, const double *ref, const double *mag, int64_t K,
                          bool rounded)
{
    double *got = values(t);
    int64_t n = zl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!within(got[i], ref[i], mag[i], K, rounded)) {
            zt_fail(__FILE__, __LINE__, "%s: element %lld = %.9g, expected %.9g", name, (long long)i, got[i], ref[i]);
            break;
        }
    free(got);
}

/* Both paths: [M,K]x[K,N], b as a transposed view, batched with one weight
 * (the folded GEMM), broadcast batches, and 1-D operands. */
TEST(matmul_bf16_forward)
{
    const char *path[2];
    int np = paths(path);
    for (int p = 0; p < np; p++) {
        zli_gemm_bf16_select(path[p]);
        int64_t M = 9, K = 21, N = 14;
        zl_tensor *a = bf16_randn(SHAPE(M, K), false), *b = bf16_randn(SHAPE(K, N), false);
        zl_tensor *bt_src = bf16_randn(SHAPE(N, K), false), *bt = zl_tensor_transpose(bt_src, 0, 1);
        double *va = values(a), *vb = values(b), *vbt = values(bt);
        double ref[4 * 3 * 9 * 14], mag[4 * 3 * 9 * 14];

        zl_tensor *y = zl_matmul(a, b);
        CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_BF16);
        ref_matmul(1, M, N, K, va, 0, vb, 0, ref, mag);
        if (y) check_against(path[p], y, ref, mag, K, true);
        zl_tensor_release(y);

        y = zl_matmul(a, bt);   /* column-major b: no copy, the transpose flag */
        ref_matmul(1, M, N, K, va, 0, vbt, 0, ref, mag);
        if (y) check_against(path[p], y, ref, mag, K, true);
        CHECK(y != NULL);
        zl_tensor_release(y);

        zl_tensor *a3 = bf16_randn(SHAPE(4, 3, M, K), false);
        double *va3 = values(a3);
        y = zl_matmul(a3, b);
        ref_matmul(12, M, N, K, va3, M * K, vb, 0, ref, mag);
        CHECK(y && zl_tensor_ndim(y) == 4 && zl_tensor_size(y, 0) == 4 && zl_tensor_size(y, 3) == N);
        if (y) check_against(path[p], y, ref, mag, K, true);
        zl_tensor_release(y);

        zl_tensor *ab = bf16_randn(SHAPE(3, 1, M, K), false), *bb = bf16_randn(SHAPE(4, K, N), false);
        double *vab = values(ab), *vbb = values(bb);
        y = zl_matmul(ab, bb);   /* [3,1,M,K] x [4,K,N] -> [3,4,M,N] */
        CHECK(y && zl_tensor_size(y, 0) == 3 && zl_tensor_size(y, 1) == 4);
        if (y) {
            double *got = values(y);
            for (int64_t i = 0; i < 3; i++)
                for (int64_t j = 0; j < 4; j++) {
                    ref_matmul(1, M, N, K, vab + i * M * K, 0, vbb + j * K * N, 0, ref, mag);
                    for (int64_t e = 0; e < M * N; e++)
                        if (!within(got[(i * 4 + j) * M * N + e], ref[e], mag[e], K, true)) {
                            zt_fail(__FILE__, __LINE__, "%s: broadcast batch (%lld,%lld) element %lld", path[p],
                                    (long long)i, (long long)j, (long long)e);
                            i = 3;
                            break;
                        }
                }
            free(got);
        }
        zl_tensor_release(y);

        zl_tensor *v = bf16_randn(SHAPE(K), false);
        double *vv = values(v);
        y = zl_matmul(a, v);   /* [M,K] x [K] -> [M] */
        ref_matmul(1, M, 1, K, va, 0, vv, 0, ref, mag);
        CHECK(y && zl_tensor_ndim(y) == 1 && zl_tensor_size(y, 0) == M);
        if (y) check_against(path[p], y, ref, mag, K, true);
        zl_tensor_release(y);

        zl_tensor *bf = zl_tensor_to(b, ZL_DTYPE_F32);   /* mixed dtypes: the f32 GEMM, an f32 result */
        y = zl_matmul(a, bf);
        ref_matmul(1, M, N, K, va, 0, vb, 0, ref, mag);
        CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_F32);
        if (y) check_against("mixed", y, ref, mag, K, false);
        zl_tensor_release(y);

        zl_tensor *t[] = {a, b, bt_src, bt, a3, ab, bb, v, bf};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) zl_tensor_release(t[i]);
        double *d[] = {va, vb, vbt, va3, vab, vbb, vv};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) free(d[i]);
    }
    zli_gemm_bf16_select(NULL);
}

/* y[.., N] = x[.., K] · w[N, K]ᵀ + b in double. */
static void ref_linear(int64_t rows, int64_t N, int64_t K, const double *x, const double *w, const double *b,
                       double *out, double *mag)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0, m = 0;
            for (int64_t k = 0; k < K; k++) {
                s += x[r * K + k] * w[j * K + k];
                m += fabs(x[r * K + k] * w[j * K + k]);
            }
            out[r * N + j] = s;
            mag[r * N + j] = m;
        }
}

TEST(linear_bf16_forward)
{
    const char *path[2];
    int np = paths(path);
    for (int p = 0; p < np; p++) {
        zli_gemm_bf16_select(path[p]);
        int64_t K = 37, N = 19, rows = 2 * 5;
        zl_tensor *x = bf16_randn(SHAPE(2, 5, K), false), *w = bf16_randn(SHAPE(N, K), false);
        zl_tensor *b32 = zt_randn(SHAPE(N)), *b16 = zl_tensor_to(b32, ZL_DTYPE_BF16);
        double *vx = values(x), *vw = values(w), *vb32 = values(b32), *vb16 = values(b16);
        double ref[10 * 19], mag[10 * 19];
        zl_tensor *bias[3] = {NULL, b32, b16};
        double *vbias[3] = {NULL, vb32, vb16};
        for (int k = 0; k < 3; k++) {
            zl_tensor *y = zl_linear(x, w, bias[k]);
            CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_BF16 && zl_tensor_ndim(y) == 3 && zl_tensor_size(y, 2) == N);
            ref_linear(rows, N, K, vx, vw, vbias[k], ref, mag);
            if (y) check_against(path[p], y, ref, mag, K, true);
            zl_tensor_release(y);
        }
        zl_tensor *t[] = {x, w, b32, b16};
        for (size_t i = 0; i < 4; i++) zl_tensor_release(t[i]);
        free(vx); free(vw); free(vb32); free(vb16);
    }
    zli_gemm_bf16_select(NULL);
}

/* Gradients of bf16 operands, seeded with R: against the double reference of
 * the same product with R rounded to bf16 (what the gradient GEMMs read),
 * within f32 accumulation over K terms and the rounding of the bf16 leaf's
 * .grad; and against the f32 path on the same values (gradcheck-style), within
 * the bf16 roundings of R and of the gradient. */
static void check_grad(const char *name, const zl_tensor *g16, const zl_tensor *g32, const double *ref,
                       const double *mag, int64_t K)
{
    CHECK(g16 && g32);
    if (!g16 || !g32) return;
    CHECK(zl_tensor_dtype(g16) == ZL_DTYPE_BF16);
    check_against(name, g16, ref, mag, K, true);
    double *a = values(g16), *b = values(g32);
    for (int64_t i = 0; i < zl_tensor_numel(g16); i++) {
        double acc = (double)(K + 2) * 2 * U_F32 * mag[i];
        double tol = 1.01 * U_BF16 * (mag[i] + fabs(b[i])) + 2 * acc + 1e-30;
        if (fabs(a[i] - b[i]) > tol) {
            zt_fail(__FILE__, __LINE__, "%s: bf16 grad %lld = %.9g, f32 path %.9g (tol %.3g)", name, (long long)i,
                    a[i], b[i], tol);
            break;
        }
    }
    free(a);
    free(b);
}

/* A new leaf with t's values in dtype dt (no history back to t). */
static zl_tensor *leaf_copy(zl_tensor *t, zl_dtype dt)
{
    bool was = zl_grad_set_enabled(false);
    zl_tensor *c = zl_tensor_to(t, dt);
    zl_grad_set_enabled(was);
    zl_tensor_set_requires_grad(c, true);
    return c;
}

static double *rounded_values(zl_tensor *t)
{
    zl_tensor *r = zl_tensor_to(t, ZL_DTYPE_BF16);
    double *v = values(r);
    zl_tensor_release(r);
    return v;
}

static double *transposed(const double *v, int64_t rows, int64_t cols)
{
    double *t = malloc((size_t)(rows * cols) * sizeof *t);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) t[j * rows + i] = v[i * cols + j];
    return t;
}

/* [B, M, K] x [K, N]: a's gradient per batch, b's folded over the batch into
 * one [K, B*M] x [B*M, N] GEMM. Then [M, K] x [B, K, N]: a's gradient summed
 * over the broadcast batch. */
TEST(matmul_bf16_backward)
{
    const char *path[2];
    int np = paths(path);
    for (int p = 0; p < np; p++) {
        zli_gemm_bf16_select(path[p]);
        int64_t B = 3, M = 6, K = 11, N = 8;
        zl_tensor *a = bf16_randn(SHAPE(B, M, K), true), *b = bf16_randn(SHAPE(K, N), true);
        zl_tensor *a32 = leaf_copy(a, ZL_DTYPE_F32), *b32 = leaf_copy(b, ZL_DTYPE_F32);
        zl_tensor *R = zt_randn(SHAPE(B, M, N));
        zl_tensor *y = zl_matmul(a, b), *y32 = zl_matmul(a32, b32);
        CHECK(y && y32 && zl_backward(y, R, false) == ZL_OK && zl_backward(y32, R, false) == ZL_OK);
        double *va = values(a), *vb = values(b), *vr = rounded_values(R);
        double *vbt = transposed(vb, K, N), *vat = transposed(va, B * M, K);
        double ga[3 * 6 * 11], ma[3 * 6 * 11], gb[11 * 8], mb[11 * 8];
        ref_matmul(1, B * M, K, N, vr, 0, vbt, 0, ga, ma);
        ref_matmul(1, K, N, B * M, vat, 0, vr, 0, gb, mb);
        check_grad("matmul grad a", zl_tensor_grad(a), zl_tensor_grad(a32), ga, ma, N);
        check_grad("matmul grad b (folded)", zl_tensor_grad(b), zl_tensor_grad(b32), gb, mb, B * M);
        zl_tensor *t[] = {a, b, a32, b32, R, y, y32};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) zl_tensor_release(t[i]);
        free(va); free(vb); free(vr); free(vbt); free(vat);

        a = bf16_randn(SHAPE(M, K), true);
        b = bf16_randn(SHAPE(B, K, N), true);
        a32 = leaf_copy(a, ZL_DTYPE_F32);
        b32 = leaf_copy(b, ZL_DTYPE_F32);
        R = zt_randn(SHAPE(B, M, N));
        y = zl_matmul(a, b);
        y32 = zl_matmul(a32, b32);
        CHECK(y && y32 && zl_backward(y, R, false) == ZL_OK && zl_backward(y32, R, false) == ZL_OK);
        va = values(a);
        vb = values(b);
        vr = rounded_values(R);
        vat = transposed(va, M, K);
        double gb3[3 * 11 * 8], mb3[3 * 11 * 8];
        for (int64_t e = 0; e < M * K; e++) ga[e] = ma[e] = 0;
        for (int64_t q = 0; q < B; q++) {
            double g1[6 * 11], m1[6 * 11];
            vbt = transposed(vb + q * K * N, K, N);
            ref_matmul(1, M, K, N, vr + q * M * N, 0, vbt, 0, g1, m1);
            for (int64_t e = 0; e < M * K; e++) { ga[e] += g1[e]; ma[e] += m1[e]; }
            ref_matmul(1, K, N, M, vat, 0, vr + q * M * N, 0, gb3 + q * K * N, mb3 + q * K * N);
            free(vbt);
        }
        check_grad("matmul grad a (broadcast)", zl_tensor_grad(a), zl_tensor_grad(a32), ga, ma, B * N);
        check_grad("matmul grad b (batched)", zl_tensor_grad(b), zl_tensor_grad(b32), gb3, mb3, M);
        zl_tensor *t2[] = {a, b, a32, b32, R, y, y32};
        for (size_t i = 0; i < sizeof t2 / sizeof t2[0]; i++) zl_tensor_release(t2[i]);
        free(va); free(vb); free(vr); free(vat);
    }
    zli_gemm_bf16_select(NULL);
}

TEST(linear_bf16_backward)
{
    const char *path[2];
    int np = paths(path);
    for (int p = 0; p < np; p++) {
        zli_gemm_bf16_select(path[p]);
        int64_t rows = 4 * 7, K = 23, N = 13;
        zl_tensor *x = bf16_randn(SHAPE(4, 7, K), true), *w = bf16_randn(SHAPE(N, K), true);
        zl_tensor *b = bf16_randn(SHAPE(N), true);
        zl_tensor *x32 = leaf_copy(x, ZL_DTYPE_F32), *w32 = leaf_copy(w, ZL_DTYPE_F32);
        zl_tensor *b32 = leaf_copy(b, ZL_DTYPE_F32);
        zl_tensor *R = zt_randn(SHAPE(4, 7, N));
        zl_tensor *y = zl_linear(x, w, b), *y32 = zl_linear(x32, w32, b32);
        CHECK(y && y32 && zl_backward(y, R, false) == ZL_OK && zl_backward(y32, R, false) == ZL_OK);
        double *vx = values(x), *vw = values(w), *vr = rounded_values(R), *vr32 = values(R);
        double *vrt = transposed(vr, rows, N);
        double gx[28 * 23], mx[28 * 23], gw[13 * 23], mw[13 * 23];
        ref_matmul(1, rows, K, N, vr, 0, vw, 0, gx, mx);     /* gx = R · w */
        ref_matmul(1, N, K, rows, vrt, 0, vx, 0, gw, mw);    /* gw = Rᵀ · x */
        check_grad("linear grad x", zl_tensor_grad(x), zl_tensor_grad(x32), gx, mx, N);
        check_grad("linear grad w", zl_tensor_grad(w), zl_tensor_grad(w32), gw, mw, rows);
        /* the bias gradient sums the f32 R, then is stored as bf16 */
        double gbias[13], mbias[13];
        for (int64_t j = 0; j < N; j++) {
            gbias[j] = mbias[j] = 0;
            for (int64_t r = 0; r < rows; r++) { gbias[j] += vr32[r * N + j]; mbias[j] += fabs(vr32[r * N + j]); }
        }
        CHECK(zl_tensor_grad(b) && zl_tensor_dtype(zl_tensor_grad(b)) == ZL_DTYPE_BF16);
        if (zl_tensor_grad(b)) check_against("linear grad b", zl_tensor_grad(b), gbias, mbias, rows, true);
        zl_tensor *t[] = {x, w, b, x32, w32, b32, R, y, y32};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) zl_tensor_release(t[i]);
        free(vx); free(vw); free(vr); free(vr32); free(vrt);
    }
    zli_gemm_bf16_select(NULL);
}

/* An f32 input with a bf16 weight (a bf16 model's activations on a CPU
 * without bf16 dot products): the weight widened a panel of rows at a time,
 * here 4096 inputs make a panel 256 rows, so 600 outputs take three panels.
 * The output is f32, against the double reference; gx sums the panels'
 * products, gw and gb are the f32 ones stored as bf16. */
TEST(linear_f32_input_bf16_weight)
{
    int64_t rows = 3, K = 4096, N = 600;
    zl_tensor *x32 = zt_randn(SHAPE(rows, K)), *w = bf16_randn(SHAPE(N, K), true);
    zl_tensor *b = bf16_randn(SHAPE(N), true);
    zl_tensor *x = leaf_copy(x32, ZL_DTYPE_F32), *R = zt_randn(SHAPE(rows, N));
    zl_tensor *y = zl_linear(x, w, b);
    CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_F32 && zl_tensor_size(y, 1) == N);
    double *vx = values(x), *vw = values(w), *vb = values(b), *vr = values(R);
    double *ref = malloc((size_t)(rows * N) * sizeof *ref), *mag = malloc((size_t)(rows * N) * sizeof *mag);
    ref_linear(rows, N, K, vx, vw, vb, ref, mag);
    if (y) check_against("f32 x, bf16 w", y, ref, mag, K, false);
    CHECK(y && zl_backward(y, R, false) == ZL_OK);
    double *gx = malloc((size_t)(rows * K) * sizeof *gx), *mx = malloc((size_t)(rows * K) * sizeof *mx);
    double *gw = malloc((size_t)(N * K) * sizeof *gw), *mw = malloc((size_t)(N * K) * sizeof *mw);
    double *vrt = transposed(vr, rows, N);
    ref_matmul(1, rows, K, N, vr, 0, vw, 0, gx, mx);    /* gx = R · w */
    ref_matmul(1, N, K, rows, vrt, 0, vx, 0, gw, mw);   /* gw = Rᵀ · x */
    CHECK(zl_tensor_grad(x) && zl_tensor_dtype(zl_tensor_grad(x)) == ZL_DTYPE_F32);
    if (zl_tensor_grad(x)) check_against("f32 x, bf16 w: grad x", zl_tensor_grad(x), gx, mx, N, false);
    CHECK(zl_tensor_grad(w) && zl_tensor_dtype(zl_tensor_grad(w)) == ZL_DTYPE_BF16);
    if (zl_tensor_grad(w)) check_against("f32 x, bf16 w: grad w", zl_tensor_grad(w), gw, mw, rows, true);
    CHECK(zl_tensor_grad(b) && zl_tensor_dtype(zl_tensor_grad(b)) == ZL_DTYPE_BF16);
    zl_tensor *t[] = {x32, w, b, x, R, y};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) zl_tensor_release(t[i]);
    double *d[] = {vx, vw, vb, vr, ref, mag, gx, mx, gw, mw, vrt};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) free(d[i]);
}

/* Working buffers (the f32 copies, oneDNN's scratchpad) are charged to
 * activations and given back; a failed allocation anywhere in the op is an
 * error, never a crash or a leak. */
TEST(bf16_memory_and_failures)
{
    const char *path[2];
    int np = paths(path);
    for (int p = 0; p < np; p++) {
        zli_gemm_bf16_select(path[p]);
        zl_tensor *x = bf16_randn(SHAPE(64, 96), true), *w = bf16_randn(SHAPE(80, 96), true);
        zl_tensor *R = zt_randn(SHAPE(64, 80));
        int64_t before = zl_mem_stats_of(ZL_MEM_ACTIVATIONS).current;
        zl_tensor *y = zl_linear(x, w, NULL);
        CHECK(y && zl_backward(y, R, false) == ZL_OK);
        zl_tensor_release(y);
        zl_tensor_set_grad(x, NULL);
        zl_tensor_set_grad(w, NULL);
        CHECK(zl_mem_stats_of(ZL_MEM_ACTIVATIONS).current == before);
        bool succeeded = false;
        for (int64_t n = 1; n < 64 && !succeeded; n++) {
            zl_mem_fail_after(n);
            y = zl_linear(x, w, NULL);
            zl_status st = y ? zl_backward(y, R, false) : ZL_ENOMEM;
            zl_mem_fail_after(0);
            if (!y || st) CHECK(strstr(zl_last_error(), "out of memory") || strstr(zl_last_error(), "alloc"));
            succeeded = y && !st;
            zl_tensor_release(y);
            zl_tensor_set_grad(x, NULL);
            zl_tensor_set_grad(w, NULL);
            CHECK(zl_mem_stats_of(ZL_MEM_ACTIVATIONS).current == before);
        }
        CHECK(succeeded);
        zl_tensor_release(x);
        zl_tensor_release(w);
        zl_tensor_release(R);
    }
    zli_gemm_bf16_select(NULL);
}

TEST(bf16_bad_inputs)
{
    zl_tensor *a = bf16_randn(SHAPE(3, 4), false), *b = bf16_randn(SHAPE(5, 6), false);
    zl_tensor *c = bf16_randn(SHAPE(2, 3, 4), false), *d = bf16_randn(SHAPE(3, 4, 6), false);
    CHECK_ERR(zl_matmul(a, b), "matmul: inner dimensions differ (shapes [3, 4] and [5, 6])");
    CHECK_ERR(zl_matmul(c, d), "matmul: batch dimensions cannot be broadcast");
    CHECK_ERR(zl_linear(a, b, NULL), "linear: input's last dimension must equal weight's second");
    zl_tensor *w = bf16_randn(SHAPE(6, 4), false), *bias = bf16_randn(SHAPE(5), false);
    CHECK_ERR(zl_linear(a, w, bias), "linear: bias must be [out]");
    zl_tensor *t[] = {a, b, c, d, w, bias};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) zl_tensor_release(t[i]);
}
