/* The CUDA kernels' math (engine/math) built for the host and run over the
 * same inputs as the CPU ops, forward and backward, in f32, bf16 and f16: f32
 * to 1e-6 relative (bit for bit where the expression is the CPU's), halves to
 * one unit in the last place of the storage type. */
#include <float.h>
#include <stdlib.h>
#include "harness.h"
#include "math/attention.h"
#include "math/binary.h"
#include "math/binary_int.h"
#include "math/conv.h"
#include "math/cross_entropy.h"
#include "math/dropout.h"
#include "math/embedding.h"
#include "math/erf.h"
#include "math/grad.h"
#include "math/index_select.h"
#include "math/layer_norm.h"
#include "math/mse.h"
#include "math/optim.h"
#include "math/reduce.h"
#include "math/select.h"
#include "math/pool.h"
#include "math/softmax.h"
#include "math/unary.h"
#include "optim/device_optim.h"

/* ---- data ---- */

static uint64_t rng = 42;

static uint64_t next_u64(void)
{
    rng += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(void) { return ((double)(next_u64() >> 11) + 0.5) * 0x1p-53; }
static float normal(void) { return (float)(sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01())); }

static const int dtypes[3] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};

/* v rounded to dt and widened back: the value a tensor of dt holds. */
static float in_dtype(int dt, float v)
{
    uint16_t h[1];
    if (dt == ZLM_F32) return v;
    zlm_store(h, dt, 0, v);
    return zlm_load(h, dt, 0);
}

/* A tensor of dt holding data (already representable in dt). */
static zl_tensor *tensor_of(int dt, int ndim, const int64_t *shape, const float *data)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (dt == ZL_DTYPE_F32) return zl_tensor_from_data(ZL_DTYPE_F32, ndim, shape, data);
    uint16_t *h = malloc((size_t)(n ? n : 1) * 2);
    for (int64_t i = 0; i < n; i++) zlm_store(h, dt, i, data[i]);
    zl_tensor *t = zl_tensor_from_data((zl_dtype)dt, ndim, shape, h);
    free(h);
    return t;
}

static zl_tensor *leaf_of(int dt, int ndim, const int64_t *shape, const float *data)
{
    zl_tensor *t = tensor_of(dt, ndim, shape, data);
    zl_tensor_set_requires_grad(t, true);
    /* An f32 gradient on a half leaf shows the kernels' f32 result unrounded. */
    zl_tensor_set_grad_dtype(t, ZL_DTYPE_F32);
    return t;
}

/* Order-preserving integers of half bit patterns: neighbours differ by 1, +0 and -0 are equal. */
static int32_t half_ord(uint16_t h) { return h & 0x8000 ? -(int32_t)(h & 0x7fff) : (int32_t)h; }

/* mine against the CPU's value in the CPU tensor's dtype: f32 within 1e-6 of
 * max(|cpu|, scale) (scale: the size of the terms a result cancels from, 0 when
 * it cancels nothing), a half within one unit of its last place. */
static bool agrees(int dt, float mine, double cpu, double scale)
{
    if (isnan(cpu) || isnan(mine)) return isnan(cpu) && isnan(mine);
    if (dt != ZL_DTYPE_F32 && dt != ZL_DTYPE_F16 && dt != ZL_DTYPE_BF16) return mine == cpu;
    if (dt != ZL_DTYPE_F32) {
        uint16_t a = dt == ZL_DTYPE_F16 ? zlm_f32_to_f16(mine) : zlm_f32_to_bf16(mine);
        uint16_t b = dt == ZL_DTYPE_F16 ? zlm_f32_to_f16((float)cpu) : zlm_f32_to_bf16((float)cpu);
        return abs(half_ord(a) - half_ord(b)) <= 1;
    }
    if (isinf(cpu)) return mine == cpu;
    return fabs(mine - cpu) <= 1e-6 * fmax(fabs(cpu), scale);
}

/* Counts disagreements of mine [n] with tensor t, reporting the first. */
static int compare(const char *what, const float *mine, zl_tensor *t, double scale)
{
    if (!t) {
        zt_fail(__FILE__, __LINE__, "%s: no CPU result: %s", what, zl_last_error());
        return 1;
    }
    int64_t n = zl_tensor_numel(t);
    double *cpu = malloc((size_t)(n ? n : 1) * sizeof *cpu);
    zl_tensor_to_f64(t, cpu);
    int dt = zl_tensor_dtype(t), bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!agrees(dt, mine[i], cpu[i], scale) && bad++ == 0)
            zt_fail(__FILE__, __LINE__, "%s (%s): element %lld: mine %.9g, CPU %.9g", what, zl_dtype_name(dt),
                    (long long)i, mine[i], cpu[i]);
    free(cpu);
    return bad;
}

static double max_abs(const float *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) m = fmax(m, fabs(x[i]));
    return m;
}

/* ---- conversions ---- */

TEST(dtype_codes)
{
    CHECK((int)ZLM_F32 == (int)ZL_DTYPE_F32);
    CHECK((int)ZLM_F16 == (int)ZL_DTYPE_F16);
    CHECK((int)ZLM_BF16 == (int)ZL_DTYPE_BF16);
}

/* f32 -> bf16 by its definition: of the two bf16 values around f (f's bits
 * cut to 16, and the next one up) the nearer, a tie going to the even one. */
static uint16_t bf16_reference(float f)
{
    uint32_t u = zlm_f32_bits(f), lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double dl = fabs((double)f - (double)zlm_bits_f32(lo));
    double dh = (hi & 0x7fffffffu) >= 0x7f800000u ? INFINITY : fabs((double)zlm_bits_f32(hi) - (double)f);
    /* above the largest finite bf16 the next one up is inf: f rounds to it from
     * the midpoint 0x1.ffp127 on (a tie goes to inf, whose mantissa is even) */
    if ((hi & 0x7fffffffu) == 0x7f800000u && (lo & 0x7fffffffu) == 0x7f7f0000u)
        dh = fabs((double)f) >= 0x1.ffp127 ? 0 : INFINITY;
    bool up = dh < dl || (dh == dl && (lo >> 16 & 1u));
    return (uint16_t)((up ? hi : lo) >> 16);
}

/* The conversions (the kernels' and the host's zl_convert alike) against
 * independent references: the compiler's _Float16 (IEEE binary16, round to
 * nearest even) for f16, bf16's definition for bf16. NaN stays NaN. */
TEST(conversions_match_their_definitions)
{
    int bad = 0;
    static const uint32_t special[8] = {0, 1, 0x7fffff, 0x1000, 0xfff, 0x1fff, 0x8000, 0x7fff};
    for (uint32_t e = 0; e < 512; e++)
        for (int k = 0; k < 2048; k++) {
            uint32_t mant = k < 8 ? special[k] : (uint32_t)next_u64() & 0x7fffffu;
            float f = zlm_bits_f32(e << 23 | mant);
            uint16_t b = zlm_f32_to_bf16(f);
            bad += isnan(f) ? !isnan(zlm_bf16_to_f32(b)) : b != bf16_reference(f);
        }
    for (uint32_t h = 0; h < 65536; h++) bad += zlm_f32_bits(zlm_bf16_to_f32((uint16_t)h)) != h << 16;
    CHECK(bad == 0);
#ifdef __FLT16_MAX__
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 x;
        uint16_t hb = (uint16_t)h;
        memcpy(&x, &hb, 2);
        float want = (float)x, got = zlm_f16_to_f32(hb);
        bad += isnan(want) ? !isnan(got) : zlm_f32_bits(got) != zlm_f32_bits(want);
    }
    for (uint32_t e = 0; e < 512; e++)
        for (int k = 0; k < 2048; k++) {
            uint32_t mant = k < 8 ? special[k] : (uint32_t)next_u64() & 0x7fffffu;
            float f = zlm_bits_f32(e << 23 | mant);
            _Float16 x = (_Float16)f;
            uint16_t want;
            memcpy(&want, &x, 2);
            uint16_t got = zlm_f32_to_f16(f);
            bad += isnan(f) ? !isnan(zlm_f16_to_f32(got)) : got != want;
        }
    CHECK(bad == 0);
#else
    zt_skip("f16: this compiler has no _Float16 to check against");
#endif
}

/* The kernels' 16-byte loads and stores take half elements two to a word:
 * each pair gives the bits zlm_load and zlm_store give one at a time. */
TEST(half_pairs_are_two_elements)
{
    const int dts[2] = {ZLM_F16, ZLM_BF16};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4096; i++) {
            float v[2] = {zlm_bits_f32((uint32_t)next_u64()), (float)(i - 2048) * 0.37f}, got[2];
            uint16_t two[4];   /* room for two f32s: zlm_load reads as its dtype says */
            zlm_store(two, dts[k], 0, v[0]);
            zlm_store(two, dts[k], 1, v[1]);
            uint32_t w = zlm_pack_pair(v, dts[k]), ref;
            memcpy(&ref, two, 4);
            CHECK(w == ref);
            zlm_unpack_pair(w, dts[k], got);
            for (int e = 0; e < 2; e++)
                CHECK(zlm_f32_bits(got[e]) == zlm_f32_bits(zlm_load(two, dts[k], e)) || (isnan(got[e]) && isnan(v[e])));
        }
}

/* ---- unary ---- */

typedef zl_tensor *(*unary_fn)(zl_tensor *);

static zl_tensor *pow_op(zl_tensor *x) { return zl_pow_scalar(x, 2.5); }
static zl_tensor *affine_op(zl_tensor *x) { return zl_affine(x, 1.5, -0.25); }
static zl_tensor *gelu_op(zl_tensor *x) { return zl_gelu(x, false); }
static zl_tensor *gelu_tanh_op(zl_tensor *x) { return zl_gelu(x, true); }
static zl_tensor *softplus_op(zl_tensor *x) { return zl_softplus(x, 2.0, 15.0); }
static zl_tensor *leaky_relu_op(zl_tensor *x) { return zl_leaky_relu(x, 0.125); }
static zl_tensor *clamp_op(zl_tensor *x) { return zl_clamp(x, -0.5, 1.25); }
static zl_tensor *clamp_min_op(zl_tensor *x) { return zl_clamp(x, -0.5, INFINITY); }

static const struct {
    const char *name;
    int kind;
    unary_fn fn;
    float p0, p1;
    bool positive;   /* domain: x > 0 */
} unary_ops[] = {
    {"neg", ZLM_U_NEG, zl_neg, 0, 0, false},          {"exp", ZLM_U_EXP, zl_exp, 0, 0, false},
    {"log", ZLM_U_LOG, zl_log, 0, 0, true},           {"sqrt", ZLM_U_SQRT, zl_sqrt, 0, 0, true},
    {"tanh", ZLM_U_TANH, zl_tanh, 0, 0, false},       {"sigmoid", ZLM_U_SIGMOID, zl_sigmoid, 0, 0, false},
    {"relu", ZLM_U_RELU, zl_relu, 0, 0, false},       {"abs", ZLM_U_ABS, zl_abs, 0, 0, false},
    {"pow", ZLM_U_POW, pow_op, 2.5f, 0, true},        {"affine", ZLM_U_AFFINE, affine_op, 1.5f, -0.25f, false},
    {"gelu", ZLM_U_GELU, gelu_op, 0, 0, false},       {"gelu_tanh", ZLM_U_GELU_TANH, gelu_tanh_op, 0, 0, false},
    {"silu", ZLM_U_SILU, zl_silu, 0, 0, false},       {"sin", ZLM_U_SIN, zl_sin, 0, 0, false},
    {"cos", ZLM_U_COS, zl_cos, 0, 0, false},          {"log1p", ZLM_U_LOG1P, zl_log1p, 0, 0, true},
    {"softplus", ZLM_U_SOFTPLUS, softplus_op, 2.0f, 15.0f, false},
    {"leaky_relu", ZLM_U_LEAKY_RELU, leaky_relu_op, 0.125f, 0, false},
    {"clamp", ZLM_U_CLAMP, clamp_op, -0.5f, 1.25f, false},
    {"clamp_min", ZLM_U_CLAMP, clamp_min_op, -0.5f, INFINITY, false},
};

/* Random values, then the edges: zeros, tiny and huge magnitudes, infinities. */
static const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 20.0f, -20.0f, 88.0f, -88.0f,
                              1e4f, -1e4f, 3e38f, -3e38f, INFINITY, -INFINITY};
#define NEDGE ((int)(sizeof edges / sizeof edges[0]))

TEST(unary_forward_backward)
{
    const int64_t n = 1000;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *g = malloc(n * sizeof *g);
    float *gx = malloc(n * sizeof *gx);
    for (size_t k = 0; k < sizeof unary_ops / sizeof unary_ops[0]; k++)
        for (int di = 0; di < 3; di++) {
            int dt = dtypes[di];
            for (int64_t i = 0; i < n; i++) {
                float v = i < NEDGE ? edges[i] : 3.0f * normal();
                if (unary_ops[k].positive) v = fabsf(v);
                x[i] = in_dtype(dt, v);
                g[i] = in_dtype(dt, normal());
            }
            zl_tensor *tx = leaf_of(dt, 1, &n, x), *tg = tensor_of(dt, 1, &n, g);
            zl_tensor *ty = unary_ops[k].fn(tx);
            char what[64];
            snprintf(what, sizeof what, "%s forward", unary_ops[k].name);
            /* y as stored: backward differentiates through the stored output. */
            for (int64_t i = 0; i < n; i++)
                y[i] = in_dtype(dt, zlm_unary_forward(unary_ops[k].kind, x[i], unary_ops[k].p0, unary_ops[k].p1));
            compare(what, y, ty, 0);
            CHECK(zl_backward(ty, tg, false) == ZL_OK);
            for (int64_t i = 0; i < n; i++) gx[i] = zlm_unary_backward(unary_ops[k].kind, x[i], y[i], g[i], unary_ops[k].p0,
                                                                unary_ops[k].p1);
            snprintf(what, sizeof what, "%s backward", unary_ops[k].name);
            compare(what, gx, zl_tensor_grad(tx), 0);
            zl_tensor_release(ty);
            zl_tensor_release(tx);
            zl_tensor_release(tg);
        }
    free(x), free(y), free(g), free(gx);
}

/* ---- binary ---- */

typedef zl_tensor *(*binary_fn)(zl_tensor *, zl_tensor *);

static const struct {
    const char *name;
    int kind;
    binary_fn fn;
} binary_ops[] = {
    {"add", ZLM_B_ADD, zl_add}, {"sub", ZLM_B_SUB, zl_sub}, {"mul", ZLM_B_MUL, zl_mul}, {"div", ZLM_B_DIV, zl_div},
    {"pow", ZLM_B_POW, zl_pow}, {"eq", ZLM_B_EQ, zl_eq},    {"lt", ZLM_B_LT, zl_lt},    {"gt", ZLM_B_GT, zl_gt},
    {"ne", ZLM_B_NE, zl_ne},    {"le", ZLM_B_LE, zl_le},    {"ge", ZLM_B_GE, zl_ge},
};

/* Backward only in f32: the CPU builds a half operand's gradient from whole
 * half ops, rounding each intermediate (g * q2, q / b, ...) to the storage
 * type, where a fused kernel rounds once; that is several ulp apart by design. */
TEST(binary_forward_backward)
{
    const int64_t n = 777;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *g = malloc(n * sizeof *g);
    float *out = malloc(n * sizeof *out), *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
    for (size_t k = 0; k < sizeof binary_ops / sizeof binary_ops[0]; k++)
        for (int di = 0; di < 3; di++) {
            int dt = dtypes[di], kind = binary_ops[k].kind;
            bool cmp = kind >= ZLM_B_EQ;
            for (int64_t i = 0; i < n; i++) {
                float va = i < NEDGE ? edges[i] : 2.0f * normal(), vb = i < NEDGE ? edges[NEDGE - 1 - i] : 2.0f * normal();
                if (kind == ZLM_B_POW) va = fabsf(va), vb = vb * 0.5f;
                if (cmp && i % 5 == 0) vb = va;
                a[i] = in_dtype(dt, va);
                b[i] = in_dtype(dt, vb);
                g[i] = in_dtype(dt, normal());
            }
            zl_tensor *ta = leaf_of(dt, 1, &n, a), *tb = leaf_of(dt, 1, &n, b), *tg = tensor_of(dt, 1, &n, g);
            zl_tensor *to = binary_ops[k].fn(ta, tb);
            for (int64_t i = 0; i < n; i++) out[i] = zlm_binary_forward(kind, a[i], b[i]);
            char what[64];
            snprintf(what, sizeof what, "%s forward", binary_ops[k].name);
            compare(what, out, to, 0);
            if (!cmp && dt == ZL_DTYPE_F32) {
                CHECK(zl_backward(to, tg, false) == ZL_OK);
                for (int64_t i = 0; i < n; i++) {
                    ga[i] = zlm_binary_grad_a(kind, a[i], b[i], g[i]);
                    gb[i] = zlm_binary_grad_b(kind, a[i], b[i], g[i]);
                }
                snprintf(what, sizeof what, "%s backward a", binary_ops[k].name);
                compare(what, ga, zl_tensor_grad(ta), 0);
                snprintf(what, sizeof what, "%s backward b", binary_ops[k].name);
                compare(what, gb, zl_tensor_grad(tb), 0);
            }
            zl_tensor_release(to);
            zl_tensor_release(ta);
            zl_tensor_release(tb);
            zl_tensor_release(tg);
        }
    free(a), free(b), free(g), free(out), free(ga), free(gb);
}

/* Integer operands, every op: i64 against i32 with edges (0, negatives, 2^40,
 * a division by 0, a power past i64's range), the result's bytes as the CPU's. */
TEST(binary_integer_operands)
{
    const int64_t n = 64, av[8] = {0, -7, 5, 1099511627776, -3, 2, 9, 40};
    int64_t a[64];
    int32_t b[64];
    for (int64_t i = 0; i < n; i++) {
        a[i] = i < 8 ? av[i] : (int64_t)(next_u64() % 2001) - 1000;
        b[i] = i == 3 ? 40 : i % 9 == 0 ? 0 : (int32_t)(next_u64() % 21) - 10;
    }
    zl_tensor *ta = zl_tensor_from_data(ZL_DTYPE_I64, 1, &n, a), *tb = zl_tensor_from_data(ZL_DTYPE_I32, 1, &n, b);
    zlm_view v = {.ndim = 1, .shape = {64}, .stride = {1}};
    unsigned char out[64 * 8];
    for (size_t k = 0; k < sizeof binary_ops / sizeof binary_ops[0]; k++) {
        int kind = binary_ops[k].kind;
        zl_tensor *to = binary_ops[k].fn(ta, tb);
        int odt = to ? (int)zl_tensor_dtype(to) : ZLM_I64;
        for (int64_t i = 0; i < n; i++) zlm_binary_int_elem(kind, &v, a, ZLM_I64, &v, b, ZLM_I32, out, odt, i);
        if (!to || memcmp(out, zl_tensor_data(to), (size_t)n * zl_dtype_size((zl_dtype)odt)))
            zt_fail(__FILE__, __LINE__, "%s on integers differs from the CPU", binary_ops[k].name);
        zl_tensor_release(to);
    }
    zl_tensor_release(ta);
    zl_tensor_release(tb);
}

/* ---- softmax and log_softmax ---- */

/* Rows of random logits with, row by row: large offsets, masked (-inf)
 * entries, one dominant entry, and one row wholly masked (NaN on both sides). */
static void logits_fill(float *x, int64_t rows, int64_t cols, int dt)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = 2.0f * normal();
            switch (r % 6) {
            case 1: v += 1e4f; break;
            case 2: v = c % 3 == 0 ? -INFINITY : v; break;
            case 3: v = c == cols / 2 ? 80.0f : v * 1e-3f; break;
            case 4: v = -3e4f + v; break;
            case 5: v = r == 5 ? -INFINITY : v; break;
            default: break;
            }
            x[r * cols + c] = in_dtype(dt, v);
        }
}

TEST(softmax_rows)
{
    const int64_t shapes[2][2] = {{12, 37}, {7, 1000}};
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++)
            for (int is_log = 0; is_log < 2; is_log++)
                for (int dim = 0; dim < 2; dim++) {
                    int dt = dtypes[di];
                    int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
                    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *g = malloc(n * sizeof *g);
                    float *gx = malloc(n * sizeof *gx), *ys = malloc(n * 4);
                    logits_fill(x, rows, cols, dt);
                    for (int64_t i = 0; i < n; i++) g[i] = in_dtype(dt, normal());
                    int64_t shape[2] = {rows, cols};
                    zl_tensor *tx = leaf_of(dt, 2, shape, x), *tg = tensor_of(dt, 2, shape, g);
                    zl_tensor *ty = is_log ? zl_log_softmax(tx, dim) : zl_softmax(tx, dim);
                    /* dim 0 reads columns: rows of `rows` elements, `cols` apart. */
                    int64_t nrow = dim ? rows : cols, len = dim ? cols : rows, s = dim ? 1 : cols;
                    for (int64_t r = 0; r < nrow; r++) {
                        int64_t base = dim ? r * cols : r;
                        zlm_softmax_row(is_log, len, s, x + base, ZLM_F32, ys + base, ZLM_F32);
                    }
                    for (int64_t i = 0; i < n; i++) y[i] = in_dtype(dt, ys[i]);
                    char what[64];
                    snprintf(what, sizeof what, "%s [%lld, %lld] dim %d", is_log ? "log_softmax" : "softmax",
                             (long long)rows, (long long)cols, dim);
                    compare(what, y, ty, 0);
                    CHECK(zl_backward(ty, tg, false) == ZL_OK);
                    for (int64_t r = 0; r < nrow; r++) {
                        int64_t base = dim ? r * cols : r;
                        zlm_softmax_row_backward(is_log, len, s, y + base, ZLM_F32, g + base, ZLM_F32, gx + base);
                    }
                    strcat(what, " backward");
                    /* gx cancels g against <g, y>: measure against the gradient's size. */
                    compare(what, gx, zl_tensor_grad(tx), max_abs(gx, n));
                    zl_tensor_release(ty);
                    zl_tensor_release(tx);
                    zl_tensor_release(tg);
                    free(x), free(y), free(g), free(gx), free(ys);
                }
}

/* The middle dim of [6, 37, 5]: rows found by zlm_softmax_row_base, elements
 * 5 apart, forward and backward in the CPU's order. */
TEST(softmax_middle_dim)
{
    const int64_t shape[3] = {6, 37, 5}, n = 6 * 37 * 5;
    float *x = malloc(n * 4), *y = malloc(n * 4), *g = malloc(n * 4), *gx = malloc(n * 4);
    logits_fill(x, 30, 37, ZLM_F32);
    for (int64_t i = 0; i < n; i++) g[i] = normal();
    for (int is_log = 0; is_log < 2; is_log++) {
        zl_tensor *tx = leaf_of(ZL_DTYPE_F32, 3, shape, x), *tg = tensor_of(ZL_DTYPE_F32, 3, shape, g);
        zl_tensor *ty = is_log ? zl_log_softmax(tx, 1) : zl_softmax(tx, 1);
        for (int64_t r = 0; r < 30; r++) {
            int64_t b = zlm_softmax_row_base(r, 37, 5);
            zlm_softmax_row(is_log, 37, 5, x + b, ZLM_F32, y + b, ZLM_F32);
            zlm_softmax_row_backward(is_log, 37, 5, y + b, ZLM_F32, g + b, ZLM_F32, gx + b);
        }
        compare(is_log ? "log_softmax dim 1 of 3" : "softmax dim 1 of 3", y, ty, 0);
        CHECK(zl_backward(ty, tg, false) == ZL_OK);
        compare("its backward", gx, zl_tensor_grad(tx), max_abs(gx, n));
        zl_tensor_release(ty), zl_tensor_release(tx), zl_tensor_release(tg);
    }
    free(x), free(y), free(g), free(gx);
}

/* The storage-dtype row functions (what a kernel reading bf16 runs) against
 * the f32 ones fed the widened values: the same results. */
TEST(softmax_row_storage_dtypes)
{
    const int64_t d = 300;
    /* xh, yh hold halves; sized as floats, the widest storage a load may name. */
    float x[300], y32[300], y16[300], xh[300], yh[300];
    for (int di = 1; di < 3; di++) {
        int dt = dtypes[di];
        for (int64_t k = 0; k < d; k++) {
            x[k] = in_dtype(dt, 3.0f * normal());
            zlm_store(xh, dt, k, x[k]);
        }
        zlm_softmax_row(false, d, 1, xh, dt, yh, dt);
        zlm_softmax_row(false, d, 1, x, ZLM_F32, y32, ZLM_F32);
        for (int64_t k = 0; k < d; k++) y16[k] = zlm_load(yh, dt, k);
        int bad = 0;
        for (int64_t k = 0; k < d; k++) bad += in_dtype(dt, y32[k]) != y16[k];
        CHECK(bad == 0);
    }
}

/* ---- layer norm ---- */

TEST(layer_norm_rows)
{
    const int64_t shapes[2][2] = {{9, 64}, {4, 768}};
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++)
            for (int affine = 0; affine < 2; affine++) {
                int dt = dtypes[di];
                int64_t rows = shapes[si][0], m = shapes[si][1], n = rows * m;
                float *x = malloc(n * 4), *y = malloc(n * 4), *g = malloc(n * 4), *gx = malloc(n * 4);
                float *w = malloc(m * 4), *b = malloc(m * 4), *gw = malloc(m * 4), *gb = malloc(m * 4);
                float mean[16], rstd[16];
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = 0; j < m; j++) {
                        /* Row 1 sits far from 0 (the mean dominates); row 2 is tiny; row 3 constant. */
                        float v = normal();
                        v = r == 1 ? 1000.0f + v : r == 2 ? v * 1e-4f : r == 3 ? 0.5f : v;
                        x[r * m + j] = in_dtype(dt, v);
                    }
                for (int64_t i = 0; i < n; i++) g[i] = in_dtype(dt, normal());
                for (int64_t j = 0; j < m; j++) {
                    w[j] = in_dtype(dt, 1.0f + 0.1f * normal());
                    b[j] = in_dtype(dt, 0.1f * normal());
                }
                int64_t shape[2] = {rows, m};
                zl_tensor *tx = leaf_of(dt, 2, shape, x), *tg = tensor_of(dt, 2, shape, g);
                zl_tensor *tw = affine ? leaf_of(dt, 1, &m, w) : NULL, *tb = affine ? leaf_of(dt, 1, &m, b) : NULL;
                zl_tensor *ty = zl_layer_norm(tx, 1, tw, tb, 1e-5);
                for (int64_t r = 0; r < rows; r++)
                    zlm_ln_row(m, x + r * m, ZLM_F32, affine ? w : NULL, ZLM_F32, affine ? b : NULL, ZLM_F32, 1e-5,
                               y + r * m, ZLM_F32, &mean[r], &rstd[r]);
                double ys = max_abs(y, n);
                for (int64_t i = 0; i < n; i++) y[i] = in_dtype(dt, y[i]);
                char what[80];
                snprintf(what, sizeof what, "layer_norm [%lld, %lld]%s", (long long)rows, (long long)m,
                         affine ? " affine" : "");
                /* + b cancels (x - mean) * rstd * w: measured against the row's size. */
                compare(what, y, ty, ys);
                CHECK(zl_backward(ty, tg, false) == ZL_OK);
                for (int64_t r = 0; r < rows; r++)
                    zlm_ln_row_backward(m, x + r * m, ZLM_F32, affine ? w : NULL, ZLM_F32, mean[r], rstd[r],
                                        g + r * m, ZLM_F32, gx + r * m);
                strcat(what, " backward");
                compare(what, gx, zl_tensor_grad(tx), max_abs(gx, n));
                if (affine) {
                    for (int64_t j = 0; j < m; j++)
                        zlm_ln_column_backward(rows, m, j, x, ZLM_F32, mean, rstd, g, ZLM_F32, gw, gb);
                    compare("layer_norm weight grad", gw, zl_tensor_grad(tw), max_abs(gw, m));
                    compare("layer_norm bias grad", gb, zl_tensor_grad(tb), max_abs(gb, m));
                    /* The GPU's order: 32 lanes of rows, added in lane order. */
                    for (int64_t j = 0; j < m; j++) {
                        double sw = 0, sb = 0;
                        for (int l = 0; l < 32; l++) {
                            double aw, ab;
                            zlm_ln_column_lane(rows, m, j, l, 32, x, ZLM_F32, mean, rstd, g, ZLM_F32, &aw, &ab);
                            sw += aw;
                            sb += ab;
                        }
                        gw[j] = (float)sw;
                        gb[j] = (float)sb;
                    }
                    compare("layer_norm weight grad in lanes", gw, zl_tensor_grad(tw), max_abs(gw, m));
                    compare("layer_norm bias grad in lanes", gb, zl_tensor_grad(tb), max_abs(gb, m));
                }
                zl_tensor_release(ty);
                zl_tensor_release(tx), zl_tensor_release(tg), zl_tensor_release(tw), zl_tensor_release(tb);
                free(x), free(y), free(g), free(gx), free(w), free(b), free(gw), free(gb);
            }
}

/* ---- embedding ---- */

TEST(embedding_backward)
{
    const int64_t v = 50, d = 70, n = 300;
    for (int di = 0; di < 3; di++) {
        int dt = dtypes[di];
        float *w = malloc(v * d * 4), *g = malloc(n * d * 4), *gw = malloc(v * d * 4);
        int64_t idx[300];
        for (int64_t i = 0; i < v * d; i++) w[i] = in_dtype(dt, normal());
        for (int64_t i = 0; i < n * d; i++) g[i] = in_dtype(dt, normal());
        /* Row 0 is hit many times (sums in position order); the last row never. */
        for (int64_t p = 0; p < n; p++) idx[p] = p % 4 == 0 ? 0 : (int64_t)(next_u64() % (uint64_t)(v - 1));
        int64_t wshape[2] = {v, d}, gshape[2] = {n, d};
        zl_tensor *tw = leaf_of(dt, 2, wshape, w), *ti = zl_tensor_from_data(ZL_DTYPE_I64, 1, &n, idx);
        zl_tensor *tg = tensor_of(dt, 2, gshape, g), *ty = zl_embedding(tw, ti);
        CHECK(zl_backward(ty, tg, false) == ZL_OK);
        /* Two column ranges, as two thread blocks would take them. */
        zlm_embedding_backward_columns(n, v, d, 0, 32, idx, -1, g, ZLM_F32, gw, false);
        zlm_embedding_backward_columns(n, v, d, 32, d, idx, -1, g, ZLM_F32, gw, false);
        compare("embedding weight grad", gw, zl_tensor_grad(tw), 0);
        /* The GPU's order: each index's first position adds all of its rows. */
        memset(gw, 0, (size_t)(v * d) * 4);
        int owners = 0;
        for (int64_t p = 0; p < n; p++)
            if (zlm_embedding_first(p, idx)) {
                owners++;
                zlm_embedding_backward_owner(n, d, p, idx, g, ZLM_F32, gw);
            }
        CHECK(owners < v);
        compare("embedding weight grad by owners", gw, zl_tensor_grad(tw), 0);
        zl_tensor_release(ty), zl_tensor_release(tw), zl_tensor_release(ti), zl_tensor_release(tg);
        free(w), free(g), free(gw);
    }
}

/* ---- index_select ---- */

/* x [4, 30, 9] along dim 1 (40 indices, 0 hit many times, 29 never) and along
 * dim 2: the gathered bytes, and the gradient summed in index order. */
TEST(index_select_gather_and_backward)
{
    const int64_t shape[3] = {4, 30, 9}, n = 4 * 30 * 9;
    for (int di = 0; di < 3; di++)
        for (int d = 1; d < 3; d++) {
            int dt = dtypes[di];
            int64_t m = d == 1 ? 40 : 5, len = shape[d], inner = d == 1 ? 9 : 1, outer = d == 1 ? 4 : 120;
            int64_t idx[40], gshape[3] = {4, d == 1 ? m : 30, d == 1 ? 9 : m}, ng = outer * m * inner;
            float *x = malloc(n * 4), *y = malloc(ng * 4), *g = malloc(ng * 4), *gx = malloc(n * 4);
            for (int64_t i = 0; i < n; i++) x[i] = in_dtype(dt, normal());
            for (int64_t i = 0; i < ng; i++) g[i] = normal();
            for (int64_t r = 0; r < m; r++) idx[r] = r % 3 == 0 ? 0 : (int64_t)(next_u64() % (uint64_t)(len - 1));
            zl_tensor *tx = leaf_of(dt, 3, shape, x), *ti = zl_tensor_from_data(ZL_DTYPE_I64, 1, &m, idx);
            zl_tensor *tg = zl_tensor_from_data(ZL_DTYPE_F32, 3, gshape, g), *ty = zl_index_select(tx, d, ti);
            for (int64_t i = 0; i < ng; i++) zlm_index_select_gather(i, len, m, inner, 4, idx, x, y, NULL, d);
            char what[64];
            snprintf(what, sizeof what, "index_select dim %d", d);
            compare(what, y, ty, 0);
            CHECK(zl_backward(ty, tg, false) == ZL_OK);
            for (int64_t t = 0; t < outer * inner; t++) zlm_index_select_backward_column(t, len, m, inner, idx, g, gx);
            strcat(what, " backward");
            compare(what, gx, zl_tensor_grad(tx), 0);
            zl_tensor_release(ty), zl_tensor_release(tx), zl_tensor_release(ti), zl_tensor_release(tg);
            free(x), free(y), free(g), free(gx);
        }
}

/* ---- cross-entropy ---- */

TEST(expf_within_two_ulp)
{
    /* Against exp in double over the range where the result is a normal
     * float, and the ends: flush below FLT_MIN, inf above FLT_MAX, NaN. */
    double worst = 0;
    for (int i = 0; i < 2000000; i++) {
        float x = (float)(uniform01() * 176.05 - 87.33);
        if (i % 3 == 0) x = (float)(uniform01() * 2 - 1);
        if (i % 3 == 1) x *= 1e-4f;
        double e = exp((double)x);
        float ef = (float)e;
        if (ef < FLT_MIN || isinf(ef)) continue;
        worst = fmax(worst, fabs(zlm_expf(x) - e) / (nextafterf(ef, INFINITY) - ef));
    }
    CHECK(worst <= 2.0);
    CHECK(zlm_expf(0.0f) == 1.0f && zlm_expf(-INFINITY) == 0.0f && zlm_expf(-88.0f) == 0.0f);
    CHECK(isinf(zlm_expf(88.8f)) && isinf(zlm_expf(INFINITY)) && isnan(zlm_expf(NAN)));
    CHECK(isfinite(zlm_expf(88.72f)) && zlm_expf(88.72f) > 3.3e38f);
}

TEST(expf_nonpos_is_expf)
{
    /* Bit for bit on x <= 0: every 97th float from -0 down to -inf (the
     * flush to 0 below FLT_MIN included), and NaN. */
    int bad = 0;
    for (uint32_t u = 0x80000000u; u <= 0xff800000u; u += 97) {
        float x = zlm_bits_f32(u);
        bad += zlm_f32_bits(zlm_expf_nonpos(x)) != zlm_f32_bits(zlm_expf(x));
    }
    CHECK(bad == 0);
    CHECK(zlm_expf_nonpos(-INFINITY) == 0.0f && zlm_expf_nonpos(0.0f) == 1.0f && isnan(zlm_expf_nonpos(NAN)));
}

TEST(erf_and_normal_cdf)
{
    /* erf to 3 ulp; the normal CDF (the exact GELU's) to 40 ulp for |v| < 5,
     * and to 2e-4 relative in the lower tail, where 1 + erf(v / sqrt 2)
     * would cancel to nothing. */
    double worst_erf = 0, worst_cdf = 0, worst_tail = 0;
    for (int i = 0; i < 2000000; i++) {
        float x = (float)(uniform01() * 10 - 5);
        if (i % 3 == 1) x *= 1e-3f;
        double e = erf((double)x), c = 0.5 * erfc(-(double)x / sqrt(2.0));
        float ef = (float)e, cf = (float)c;
        if (ef != 0.0f)
            worst_erf = fmax(worst_erf, fabs(zlm_erff(x) - e) / (nextafterf(fabsf(ef), INFINITY) - fabsf(ef)));
        worst_cdf = fmax(worst_cdf, fabs(zlm_normal_cdf(x) - c) / (nextafterf(cf, INFINITY) - cf));
        float t = (float)(-5 - uniform01() * 8);
        double ct = 0.5 * erfc(-(double)t / sqrt(2.0));
        worst_tail = fmax(worst_tail, fabs(zlm_normal_cdf(t) - ct) / ct);
    }
    CHECK(worst_erf <= 3.0);
    CHECK(worst_cdf <= 40.0);
    CHECK(worst_tail <= 2e-4);
    CHECK(zlm_erff(0.0f) == 0.0f && zlm_erff(INFINITY) == 1.0f && zlm_erff(-INFINITY) == -1.0f);
    CHECK(isnan(zlm_erff(NAN)) && isnan(zlm_normal_cdf(NAN)));
    CHECK(zlm_normal_cdf(-INFINITY) == 0.0f && zlm_normal_cdf(INFINITY) == 1.0f && zlm_normal_cdf(-14.0f) == 0.0f);
}

/* A row as the CUDA kernel computes it, from the same element functions with
 * the sum in another order (the kernel's is a block reduction). */
static void kernel_ce_row(int64_t ncls, const float *x, int64_t t, int64_t ignore, float *lse, float *loss)
{
    if (t == ignore) {
        *lse = *loss = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < ncls; c++) m = zlm_softmax_max(m, x[c]);
    double s = 0;
    for (int64_t c = ncls - 1; c >= 0; c--) s += zlm_ce_exp(x[c], m);
    *lse = zlm_ce_lse(m, s);
    *loss = *lse - x[t];
}

TEST(cross_entropy_rows)
{
    const int64_t rows = 18, ncls = 500, n = rows * ncls, ignore = -100;
    for (int di = 0; di < 3; di++)
        for (int red = 0; red < 3; red++) {
            int dt = dtypes[di];
            float *x = malloc(n * 4), *gx = malloc(n * 4), lse[18], loss[18], gr[18];
            int64_t t[18], count = 0;
            logits_fill(x, rows, ncls, dt);
            for (int64_t r = 0; r < rows; r++) {
                t[r] = r % 7 == 3 ? ignore : (int64_t)(next_u64() % (uint64_t)ncls);
                if (r % 6 == 2 && t[r] != ignore) t[r] -= t[r] % 3 - 1;   /* not on a masked class */
                if (r == 5) t[r] = ignore;                                  /* the wholly masked row */
                gr[r] = in_dtype(dt, normal());
                count += t[r] != ignore;
            }
            int64_t shape[2] = {rows, ncls};
            zl_tensor *tx = leaf_of(dt, 2, shape, x), *tt = zl_tensor_from_data(ZL_DTYPE_I64, 1, &rows, t);
            zl_tensor *tl = zl_cross_entropy(tx, tt, ignore, (zl_reduction)red);
            for (int64_t r = 0; r < rows; r++) kernel_ce_row(ncls, x + r * ncls, t[r], ignore, &lse[r], &loss[r]);
            float total;
            if (red == ZL_REDUCE_NONE) {
                compare("cross_entropy none", loss, tl, 0);
            } else {
                double s = 0;
                for (int64_t r = 0; r < rows; r++) s += loss[r];
                total = (float)(red == ZL_REDUCE_SUM ? s : s / (double)count);
                compare(red == ZL_REDUCE_SUM ? "cross_entropy sum" : "cross_entropy mean", &total, tl, 0);
            }
            zl_tensor *tg = red == ZL_REDUCE_NONE ? tensor_of(dt, 1, &rows, gr) : tensor_of(dt, 0, NULL, gr);
            CHECK(zl_backward(tl, tg, false) == ZL_OK);
            float k = red == ZL_REDUCE_MEAN ? zlm_ce_mean_factor(count) : 1.0f;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < ncls; c++)
                    gx[r * ncls + c] = t[r] == ignore ? 0.0f
                                       : zlm_ce_grad(x[r * ncls + c], lse[r],
                                                     zlm_ce_scale(red == ZL_REDUCE_NONE ? gr[r] : gr[0], k), c == t[r]);
            /* The target's gradient cancels softmax against 1: measured against the scale. */
            compare("cross_entropy backward", gx, zl_tensor_grad(tx), max_abs(gx, n));
            zl_tensor_release(tl), zl_tensor_release(tx), zl_tensor_release(tt), zl_tensor_release(tg);
            free(x), free(gx);
        }
}

/* ---- mse_loss ---- */

TEST(mse_loss_elements)
{
    const int64_t n = 5000;
    float *x = malloc(n * 4), *t = malloc(n * 4), *g = malloc(n * 4), *sq = malloc(n * 4), *gx = malloc(n * 4);
    float *gt = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) {
        x[i] = 3.0f * normal();
        t[i] = i % 7 ? normal() : x[i];   /* some exact zeros */
        g[i] = normal();
    }
    for (int red = 0; red < 3; red++) {
        zl_tensor *tx = leaf_of(ZL_DTYPE_F32, 1, &n, x), *tt = leaf_of(ZL_DTYPE_F32, 1, &n, t);
        zl_tensor *tl = zl_mse_loss(tx, tt, (zl_reduction)red);
        for (int64_t i = 0; i < n; i++) sq[i] = zlm_mse_sq(x[i], t[i]);
        if (red == ZL_REDUCE_NONE) {
            compare("mse_loss none", sq, tl, 0);
        } else {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += sq[i];
            float total = (float)(red == ZL_REDUCE_SUM ? s : s / (double)n);
            compare(red == ZL_REDUCE_SUM ? "mse_loss sum" : "mse_loss mean", &total, tl, 0);
        }
        zl_tensor *tg = red == ZL_REDUCE_NONE ? tensor_of(ZL_DTYPE_F32, 1, &n, g) : tensor_of(ZL_DTYPE_F32, 0, NULL, g);
        CHECK(zl_backward(tl, tg, false) == ZL_OK);
        float k = red == ZL_REDUCE_MEAN ? (float)(2.0 / (double)n) : 2.0f;
        for (int64_t i = 0; i < n; i++) {
            gx[i] = zlm_mse_grad(x[i], t[i], red == ZL_REDUCE_NONE ? g[i] : g[0], k);
            gt[i] = -gx[i];
        }
        compare("mse_loss backward, input", gx, zl_tensor_grad(tx), 0);
        compare("mse_loss backward, target", gt, zl_tensor_grad(tt), 0);
        zl_tensor_release(tl), zl_tensor_release(tx), zl_tensor_release(tt), zl_tensor_release(tg);
    }
    free(x), free(t), free(g), free(sq), free(gx), free(gt);
}

/* ---- max_pool2d and conv2d ---- */

static zlm_window window(int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                         int64_t ph, int64_t pw)
{
    return (zlm_window){.c = c, .h = h, .w = w, .kh = kh, .kw = kw, .oh = (h + 2 * ph - kh) / sh + 1,
                        .ow = (w + 2 * pw - kw) / sw + 1, .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = 1, .dw = 1};
}

/* Overlapping windows, padding, ties and a NaN, forward and backward. */
TEST(max_pool_windows)
{
    const int64_t shape[4] = {2, 3, 11, 9}, n = 2 * 3 * 11 * 9, planes = 6;
    zlm_window g = window(3, 11, 9, 3, 4, 2, 1, 1, 2);
    int64_t nout = planes * g.oh * g.ow, oshape[4] = {2, 3, g.oh, g.ow};
    float *x = malloc(n * 4), *y = malloc(nout * 4), *gy = malloc(nout * 4), *gx = malloc(n * 4);
    int64_t *arg = malloc(nout * 8);
    for (int64_t i = 0; i < n; i++) x[i] = i % 13 == 0 ? 2.5f : normal();   /* ties at 2.5 */
    x[40] = NAN;
    for (int64_t i = 0; i < nout; i++) gy[i] = normal();
    zl_tensor *tx = leaf_of(ZL_DTYPE_F32, 4, shape, x), *tg = tensor_of(ZL_DTYPE_F32, 4, oshape, gy);
    zl_tensor *ty = zl_max_pool2d(tx, 3, 4, 2, 1, 1, 2);
    for (int64_t i = 0; i < nout; i++) zlm_pool_max(&g, x, i, y, arg);
    compare("max_pool2d", y, ty, 0);
    CHECK(zl_backward(ty, tg, false) == ZL_OK);
    for (int64_t i = 0; i < n; i++) gx[i] = zlm_pool_grad(&g, arg, gy, i);
    compare("max_pool2d backward", gx, zl_tensor_grad(tx), 0);
    zl_tensor_release(ty), zl_tensor_release(tx), zl_tensor_release(tg);
    free(x), free(y), free(gy), free(gx), free(arg);
}

/* C [m, n] = op(A) op(B), summed in double: a reference GEMM whose only
 * rounding is the last. */
static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            c[i * n + j] = (float)s;
        }
}

/* im2col, col2im and the bias's sum around a reference GEMM, against the
 * CPU's conv2d: to 1e-6 of the result's size (the GEMMs round differently). */
TEST(conv_im2col_col2im_bias)
{
    const int64_t N = 2, C = 3, O = 4, xs[4] = {2, 3, 8, 7}, ws[4] = {4, 3, 3, 2}, nx = 2 * 3 * 8 * 7;
    zlm_window g = window(C, 8, 7, 3, 2, 2, 1, 1, 1);
    int64_t K = C * 3 * 2, len = g.oh * g.ow, img = C * 8 * 7, ny = N * O * len, ys[4] = {N, O, g.oh, g.ow};
    float *x = malloc(nx * 4), *w = malloc(O * K * 4), b[4], *col = malloc(K * len * 4), *y = malloc(ny * 4);
    float *gy = malloc(ny * 4), *gx = malloc(nx * 4), *gw = malloc(O * K * 4), *part = malloc(O * K * 4), gb[4];
    for (int64_t i = 0; i < nx; i++) x[i] = normal();
    for (int64_t i = 0; i < O * K; i++) w[i] = normal();
    for (int64_t i = 0; i < ny; i++) gy[i] = normal();
    for (int o = 0; o < 4; o++) b[o] = normal();
    zl_tensor *tx = leaf_of(ZL_DTYPE_F32, 4, xs, x), *tw = leaf_of(ZL_DTYPE_F32, 4, ws, w);
    zl_tensor *tb = leaf_of(ZL_DTYPE_F32, 1, &O, b), *tg = tensor_of(ZL_DTYPE_F32, 4, ys, gy);
    zl_tensor *ty = zl_conv2d(tx, tw, tb, 2, 1, 1, 1);
    for (int64_t i = 0; i < N; i++) {
        for (int64_t e = 0; e < K * len; e++) col[e] = zlm_im2col_elem(&g, x + i * img, e);
        ref_gemm(false, false, O, len, K, w, col, y + i * O * len);
        for (int64_t e = 0; e < O * len; e++) y[i * O * len + e] += b[e / len];
    }
    compare("conv2d", y, ty, max_abs(y, ny));
    CHECK(zl_backward(ty, tg, false) == ZL_OK);
    for (int64_t i = 0; i < N; i++) {
        ref_gemm(true, false, K, len, O, w, gy + i * O * len, col);
        for (int64_t e = 0; e < img; e++) gx[i * img + e] = zlm_col2im_elem(&g, col, e);
        for (int64_t e = 0; e < K * len; e++) col[e] = zlm_im2col_elem(&g, x + i * img, e);
        ref_gemm(false, true, O, K, len, gy + i * O * len, col, i ? part : gw);
        for (int64_t e = 0; i && e < O * K; e++) gw[e] += part[e];
    }
    for (int64_t o = 0; o < O; o++) gb[o] = zlm_conv_bias_grad(gy, N, O, len, o);
    compare("conv2d backward, input", gx, zl_tensor_grad(tx), max_abs(gx, nx));
    compare("conv2d backward, weight", gw, zl_tensor_grad(tw), max_abs(gw, O * K));
    compare("conv2d backward, bias", gb, zl_tensor_grad(tb), 0);
    zl_tensor_release(ty), zl_tensor_release(tx), zl_tensor_release(tw), zl_tensor_release(tb);
    zl_tensor_release(tg);
    free(x), free(w), free(col), free(y), free(gy), free(gx), free(gw), free(part);
}

/* ---- attention's softmax ----
 * With K = V = I (Tq = Tk = D), the GEMMs around the softmax are exact: the
 * scores are Q * scale (scale 1/4, Q in multiples of 1/8), the output is P, and
 * dQ = dS * scale, so the row math is seen without GEMM rounding. */
TEST(attention_softmax)
{
    const int64_t B = 3, T = 16, n = B * T * T;
    float *q = malloc(n * 4), *eye = malloc(n * 4), *g = malloc(n * 4), *p = malloc(n * 4), *ds = malloc(n * 4);
    for (int causal = 0; causal < 2; causal++) {
        for (int64_t i = 0; i < n; i++) {
            int64_t r = i / T, c = i % T;
            float v = (float)((int64_t)(next_u64() % 65) - 32) / 8.0f;
            q[i] = r % 5 == 2 ? v + 120.0f : v;   /* large scores: the max subtraction matters */
            eye[i] = r % T == c ? 1.0f : 0.0f;
            g[i] = normal();
        }
        int64_t shape[3] = {B, T, T};
        zl_tensor *tq = leaf_of(ZL_DTYPE_F32, 3, shape, q), *tk = tensor_of(ZL_DTYPE_F32, 3, shape, eye);
        zl_tensor *tv = tensor_of(ZL_DTYPE_F32, 3, shape, eye), *tg = tensor_of(ZL_DTYPE_F32, 3, shape, g);
        zl_tensor *to = zl_attention(tq, tk, tv, causal, 0);
        float scale = (float)zlm_attention_scale(0, T);
        for (int64_t r = 0; r < B * T; r++) {
            for (int64_t j = 0; j < T; j++) p[r * T + j] = q[r * T + j] * scale;
            zlm_attention_softmax_row(p + r * T, zlm_attention_limit(r, T, T, causal), T);
        }
        compare(causal ? "attention causal" : "attention", p, to, 0);
        CHECK(zl_backward(to, tg, false) == ZL_OK);
        for (int64_t r = 0; r < B * T; r++) {
            memcpy(ds + r * T, g + r * T, T * 4);
            zlm_attention_softmax_row_backward(ds + r * T, p + r * T, T);
            for (int64_t j = 0; j < T; j++) ds[r * T + j] *= scale;
        }
        compare(causal ? "attention causal backward" : "attention backward", ds, zl_tensor_grad(tq), max_abs(ds, n));
        zl_tensor_release(to), zl_tensor_release(tq), zl_tensor_release(tk), zl_tensor_release(tv);
        zl_tensor_release(tg);
    }
    free(q), free(eye), free(g), free(p), free(ds);
}

/* mine [n] against t's elements (f32, or stored in t's half dtype), bit for
 * bit; counts disagreements, reporting the first. */
static int same_bits(const char *what, const float *mine, zl_tensor *t)
{
    if (!t) {
        zt_fail(__FILE__, __LINE__, "%s: no CPU result: %s", what, zl_last_error());
        return 1;
    }
    zl_tensor *c = zl_tensor_contiguous(t);
    int dt = zl_tensor_dtype(c), bad = 0;
    for (int64_t i = 0; i < zl_tensor_numel(c); i++) {
        uint32_t want = 0, got = 0;
        if (dt == ZL_DTYPE_F32) {
            want = zlm_f32_bits(mine[i]);
            got = zlm_f32_bits(((const float *)zl_tensor_data(c))[i]);
        } else {
            uint16_t h[1];
            zlm_store(h, dt, 0, mine[i]);
            want = h[0];
            got = ((const uint16_t *)zl_tensor_data(c))[i];
        }
        if (want != got && bad++ == 0)
            zt_fail(__FILE__, __LINE__, "%s (%s): element %lld: mine %.9g, CPU %.9g", what, zl_dtype_name(dt),
                    (long long)i, mine[i], zl_tensor_get(c, i));
    }
    zl_tensor_release(c);
    return bad;
}

/* ---- the generator ---- */

/* The draws core's host fill makes are zlm_rand_value's, bit for bit, in
 * each float dtype, at offsets whose counters cross 32 bits. */
TEST(generator_draws)
{
    const int64_t n = 3000;
    const uint64_t seed = 0x1234567890abcdefull, offsets[3] = {0, 12345, (1ull << 32) - 1000};
    float *mine = malloc(n * 4);
    for (int k = 0; k < 3; k++) {
        zl_generator *g = zl_generator_new(seed);
        zl_generator_set_offset(g, offsets[k]);
        uint64_t off = offsets[k];
        zl_tensor *u = zl_tensor_rand(ZL_DTYPE_F32, 1, &n, g), *z = zl_tensor_randn(ZL_DTYPE_F32, 1, &n, g);
        for (int64_t i = 0; i < n; i++) mine[i] = zlm_rand_u01(seed, off + (uint64_t)i);
        same_bits("rand", mine, u);
        for (int64_t i = 0; i < n; i++) mine[i] = zlm_rand_value(true, 0.0, 1.0, seed, off + (uint64_t)(n + i));
        same_bits("randn", mine, z);
        off += 2 * (uint64_t)n;
        for (int di = 0; di < 3; di++) {
            zl_tensor *t = zl_tensor_new((zl_dtype)dtypes[di], 1, &n, ZL_MEM_OTHER);
            CHECK(zl_tensor_uniform_(t, -2.0, 5.0, g) == ZL_OK);
            for (int64_t i = 0; i < n; i++) mine[i] = zlm_rand_value(false, -2.0, 5.0, seed, off + (uint64_t)i);
            same_bits("uniform_", mine, t);
            CHECK(zl_tensor_normal_(t, 1.5, 0.5, g) == ZL_OK);
            for (int64_t i = 0; i < n; i++) mine[i] = zlm_rand_value(true, 1.5, 0.5, seed, off + (uint64_t)(n + i));
            same_bits("normal_", mine, t);
            off += 2 * (uint64_t)n;
            zl_tensor_release(t);
        }
        CHECK(zl_generator_get_offset(g) == off);
        zl_tensor_release(z), zl_tensor_release(u);
        zl_generator_free(g);
    }
    free(mine);
}

/* dropout's mask is the draw against p, its output and gradient the kept
 * elements scaled, bit for bit with zl_dropout. */
TEST(dropout_mask)
{
    const int64_t n = 5000;
    const double ps[3] = {0.1, 0.5, 0.9};
    float *x = malloc(n * 4), *g = malloc(n * 4), *y = malloc(n * 4), *gx = malloc(n * 4);
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < n; i++) x[i] = normal(), g[i] = normal();
        zl_generator *gen = zl_generator_new(11 + (uint64_t)k);
        zl_generator_set_offset(gen, 777);
        zl_tensor *tx = leaf_of(ZL_DTYPE_F32, 1, &n, x), *tg = tensor_of(ZL_DTYPE_F32, 1, &n, g);
        zl_tensor *ty = zl_dropout(tx, ps[k], true, gen);
        CHECK(ty && zl_backward(ty, tg, false) == ZL_OK);
        float scale = (float)(1.0 / (1.0 - ps[k]));
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            uint8_t keep = zlm_dropout_keep(11 + (uint64_t)k, 777 + (uint64_t)i, (float)ps[k]);
            kept += keep;
            y[i] = zlm_dropout_apply(keep, x[i], scale);
            gx[i] = zlm_dropout_apply(keep, g[i], scale);
        }
        same_bits("dropout", y, ty);
        same_bits("dropout backward", gx, zl_tensor_grad(tx));
        CHECK(fabs((double)kept / (double)n - (1 - ps[k])) < 0.03);   /* the draws are uniform */
        CHECK(zl_generator_get_offset(gen) == 777 + (uint64_t)n);
        zl_tensor_release(ty), zl_tensor_release(tx), zl_tensor_release(tg);
        zl_generator_free(gen);
    }
    free(x), free(g), free(y), free(gx);
}

/* ---- reductions ---- */

/* x [4, 300, 5] with ties and a NaN, each dim: sum, mean, max, argmax, min
 * and argmin forward and backward bit for bit with the CPU, whose order
 * they keep. */
TEST(reductions_in_the_cpu_order)
{
    const int64_t shape[3] = {4, 300, 5}, n = 6000;
    float *x = malloc(n * 4), *out = malloc(n * 4), *g = malloc(n * 4), *gx = malloc(n * 4);
    int64_t *idx = malloc(n * 8);
    for (int64_t i = 0; i < n; i++) x[i] = floorf(normal() * 4.0f) * 0.37f;
    x[1234] = NAN;
    for (int d = 0; d < 3; d++)
        for (int kind = ZLM_R_SUM; kind <= ZLM_R_ARGMIN; kind++) {
            int64_t outer = 1, len = shape[d], inner = 1;
            for (int i = 0; i < d; i++) outer *= shape[i];
            for (int i = d + 1; i < 3; i++) inner *= shape[i];
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t j = o * inner + i;
                    if (kind == ZLM_R_SUM || kind == ZLM_R_MEAN) out[j] = zlm_reduce_sum(x, len, inner, o, i, kind);
                    else out[j] = zlm_reduce_pick(x, len, inner, o, i, zlm_reduce_lowest(kind), &idx[j]);
                }
            zl_tensor *tx = leaf_of(ZL_DTYPE_F32, 3, shape, x);
            zl_tensor *ty = kind == ZLM_R_SUM ? zl_sum(tx, d, false) : kind == ZLM_R_MEAN ? zl_mean(tx, d, false)
                            : kind == ZLM_R_MAX ? zl_max(tx, d, false) : kind == ZLM_R_ARGMAX ? zl_argmax(tx, d, false)
                            : kind == ZLM_R_MIN ? zl_min(tx, d, false) : zl_argmin(tx, d, false);
            char what[48];
            snprintf(what, sizeof what, "reduction %d over dim %d", kind, d);
            if (kind == ZLM_R_ARGMAX || kind == ZLM_R_ARGMIN) {
                CHECK(ty && memcmp(zl_tensor_data(ty), idx, (size_t)(outer * inner) * 8) == 0);
            } else {
                same_bits(what, out, ty);
                for (int64_t j = 0; j < outer * inner; j++) g[j] = normal();
                zl_tensor *tg = tensor_of(ZL_DTYPE_F32, 2, (int64_t[]){outer, inner}, g);
                zl_tensor *tg3 = zl_tensor_reshape(tg, ty ? zl_tensor_ndim(ty) : 0, ty ? zl_tensor_shape(ty) : NULL);
                CHECK(tg3 && zl_backward(ty, tg3, false) == ZL_OK);
                for (int64_t j = 0; j < n; j++) gx[j] = zlm_reduce_backward(kind, g, idx, len, inner, j);
                same_bits(what, gx, zl_tensor_grad(tx));
                zl_tensor_release(tg3), zl_tensor_release(tg);
            }
            zl_tensor_release(ty), zl_tensor_release(tx);
        }
    /* Over everything: chunk sums in double, added in order. */
    const int64_t big = 3 * ZLM_SUM_CHUNK + 77;
    float *b = malloc(big * 4);
    double part[4];
    for (int64_t i = 0; i < big; i++) b[i] = normal() * (i % 1000 == 0 ? 1e6f : 1.0f);
    CHECK(zlm_sum_chunks(big) == 4);
    for (int64_t c = 0; c < 4; c++) part[c] = zlm_chunk_sum(b, big, c);
    zl_tensor *tb = tensor_of(ZL_DTYPE_F32, 1, &big, b);
    for (int mean = 0; mean < 2; mean++) {
        float mine = zlm_sum_finish(part, 4, mean ? (double)big : 1.0);
        zl_tensor *t = mean ? zl_mean(tb, ZL_ALL_DIMS, false) : zl_sum(tb, ZL_ALL_DIMS, false);
        same_bits(mean ? "mean of all" : "sum of all", &mine, t);
        zl_tensor_release(t);
    }
    zl_tensor_release(tb);
    free(b), free(x), free(out), free(g), free(gx), free(idx);
}

/* A row split over any number of threads, each scanning its stride, then
 * the winners combined pairwise in a random order, picks the scan's element
 * for max and for min: ties go to the first, a NaN beats every number, the
 * first NaN wins. */
TEST(max_and_min_split_is_the_scan)
{
    const int64_t d = 777;
    float x[777];
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        for (int64_t k = 0; k < d; k++) x[k] = (float)(int64_t)(next_u64() % 9) - 4.0f;
        if (trial % 3 == 1) x[next_u64() % d] = NAN, x[next_u64() % d] = NAN;
        if (trial % 5 == 2) x[0] = -0.0f, x[1] = 0.0f;
        bool lowest = trial % 2;
        int64_t want;
        float best = zlm_reduce_pick(x, d, 1, 0, 0, lowest, &want);
        int nt = 1 + (int)(next_u64() % 300);
        float v[300];
        int64_t at[300];
        for (int t = 0; t < nt; t++) {
            v[t] = x[0], at[t] = 0;
            for (int64_t k = t; k < d; k += nt)
                if (zlm_pick_prefer(x[k], k, v[t], at[t], lowest)) v[t] = x[k], at[t] = k;
        }
        for (int left = nt; left > 1; left--) {   /* merge two random winners */
            int a = (int)(next_u64() % (uint64_t)left), b = (int)(next_u64() % (uint64_t)(left - 1));
            if (b >= a) b++;
            if (zlm_pick_prefer(v[b], at[b], v[a], at[a], lowest)) v[a] = v[b], at[a] = at[b];
            v[b] = v[left - 1], at[b] = at[left - 1];
        }
        bad += at[0] != want || zlm_f32_bits(v[0]) != zlm_f32_bits(best);
    }
    CHECK(bad == 0);
}

/* ---- where and masked_fill ---- */

/* Strides reading a contiguous tensor of shape s (n dims) as broadcast to
 * out [nd] (0 on stretched and missing dims). */
static void bcast(int n, const int64_t *s, int nd, const int64_t *out, int64_t *st)
{
    int64_t step = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int k = d - (nd - n);
        int64_t size = k >= 0 ? s[k] : 1;
        st[d] = size == 1 && out[d] != 1 ? 0 : step;
        step *= size;
    }
}

/* where over bf16, i64 and bool values with a broadcast condition and
 * operands, masked_fill of f32 with a u8 mask: the bytes zl_where and
 * zl_masked_fill write. */
TEST(select_bytes)
{
    const int64_t cs[3] = {4, 1, 6}, as[2] = {5, 6}, bs[3] = {4, 5, 1}, os[3] = {4, 5, 6};
    uint8_t cond[24], mask[6];
    float af[30], bf[20];
    for (int i = 0; i < 24; i++) cond[i] = (uint8_t)(next_u64() % 2);
    for (int i = 0; i < 6; i++) mask[i] = (uint8_t)(next_u64() % 3);   /* any nonzero is true */
    for (int i = 0; i < 30; i++) af[i] = normal();
    for (int i = 0; i < 20; i++) bf[i] = normal();
    zl_tensor *tc = zl_tensor_from_data(ZL_DTYPE_BOOL, 3, cs, cond);
    zl_tensor *ta = zl_tensor_from_data(ZL_DTYPE_F32, 2, as, af), *tb = zl_tensor_from_data(ZL_DTYPE_F32, 3, bs, bf);
    zlm_select s = {.ndim = 3};
    memcpy(s.shape, os, sizeof os);
    bcast(3, cs, 3, os, s.sc);
    bcast(2, as, 3, os, s.sa);
    bcast(3, bs, 3, os, s.sb);
    const zl_dtype dts[3] = {ZL_DTYPE_BF16, ZL_DTYPE_I64, ZL_DTYPE_BOOL};
    for (int k = 0; k < 3; k++) {
        zl_tensor *a = zl_tensor_to(ta, dts[k]), *b = zl_tensor_to(tb, dts[k]);
        zl_tensor *w = zl_where(tc, a, b);
        int es = (int)zl_dtype_size(dts[k]);
        char mine[120 * 8];
        for (int64_t i = 0; i < 120; i++) zlm_select_elem(&s, cond, zl_tensor_data(a), zl_tensor_data(b), es, mine, i);
        CHECK(w && memcmp(zl_tensor_data(w), mine, (size_t)(120 * es)) == 0);
        zl_tensor_release(w), zl_tensor_release(b), zl_tensor_release(a);
    }
    zl_tensor *tm = zl_tensor_from_data(ZL_DTYPE_U8, 2, (int64_t[]){1, 6}, mask);
    zl_tensor *fm = zl_masked_fill(ta, tm, -1e30);
    zlm_select m = {.ndim = 2, .shape = {5, 6}, .sc = {0, 1}, .sa = {0, 0}, .sb = {6, 1}};
    float fill = -1e30f, mine[30];
    for (int64_t i = 0; i < 30; i++) zlm_select_elem(&m, mask, &fill, af, 4, mine, i);
    same_bits("masked_fill", mine, fm);
    zl_tensor_release(fm), zl_tensor_release(tm), zl_tensor_release(tb), zl_tensor_release(ta), zl_tensor_release(tc);
}

/* ---- optimizers ----
 * Against the AVX2 kernel (explicit multiply-adds, as here): bit for bit, over
 * a whole number of its 8-lane vectors (its scalar tail is the compiler's to
 * contract). Where this CPU has no AVX2, against the scalar one: to float rounding. */

enum { OPT_N = 1040, OPT_STEPS = 3 };

typedef struct opt_bufs {
    float p[OPT_N], m[OPT_N], v[OPT_N], gf[OPT_N];
    uint16_t gh[OPT_N], half[OPT_N];
} opt_bufs;

static bool exact_kernel(void) { return zl_optim_set_kernel("avx2") == ZL_OK; }

static void opt_init(opt_bufs *a, opt_bufs *b)
{
    for (int i = 0; i < OPT_N; i++) {
        a->p[i] = b->p[i] = i < NEDGE - 2 ? edges[i] * 1e-30f : normal();   /* finite */
        a->m[i] = b->m[i] = a->v[i] = b->v[i] = 0;
    }
}

static void opt_grad(opt_bufs *a, opt_bufs *b, int gdt)
{
    for (int i = 0; i < OPT_N; i++) {
        float v = i % 97 == 5 ? 1e-20f : i % 89 == 7 ? 3e3f : normal();
        a->gf[i] = b->gf[i] = in_dtype(gdt, v);
        if (gdt != ZL_DTYPE_F32) zlm_store(a->gh, gdt, i, v), zlm_store(b->gh, gdt, i, v);
    }
}

static zl_optim_buf opt_buf(opt_bufs *a, int gdt, int hdt)
{
    zl_optim_buf b = {0};
    b.p = a->p, b.m = a->m, b.v = a->v, b.n = OPT_N;
    b.g = gdt == ZL_DTYPE_F32 ? (const void *)a->gf : a->gh, b.g_dtype = (zl_dtype)gdt;
    b.p_half = a->half, b.half_dtype = (zl_dtype)hdt;
    return b;
}

static int opt_compare(const char *what, const opt_bufs *mine, const opt_bufs *cpu, int hdt, bool exact)
{
    int bad = 0;
    for (int i = 0; i < OPT_N; i++) {
        const float a[3] = {mine->p[i], mine->m[i], mine->v[i]}, b[3] = {cpu->p[i], cpu->m[i], cpu->v[i]};
        for (int k = 0; k < 3; k++) {
            bool ok = exact ? zlm_f32_bits(a[k]) == zlm_f32_bits(b[k]) : agrees(ZL_DTYPE_F32, a[k], b[k], 1e-3);
            if (!ok && bad++ == 0)
                zt_fail(__FILE__, __LINE__, "%s: %c[%d]: mine %.9g, CPU %.9g", what, "pmv"[k], i, a[k], b[k]);
        }
        uint16_t want = hdt == ZL_DTYPE_F16 ? zlm_f32_to_f16(mine->p[i]) : zlm_f32_to_bf16(mine->p[i]);
        if (exact && want != cpu->half[i] && bad++ == 0)
            zt_fail(__FILE__, __LINE__, "%s: half[%d]: mine %04x, CPU %04x", what, i, want, cpu->half[i]);
    }
    return bad;
}

static opt_bufs mine_b, cpu_b;

TEST(adam_adamw)
{
    bool exact = exact_kernel();
    for (int adamw = 0; adamw < 2; adamw++)
        for (int di = 0; di < 3; di++) {
            int gdt = dtypes[di], hdt = di == 2 ? ZL_DTYPE_F16 : ZL_DTYPE_BF16;
            opt_init(&mine_b, &cpu_b);
            zl_optim_adam hp = zl_optim_adam_defaults();
            hp.adamw_mode = adamw, hp.weight_decay = 0.01, hp.grad_scale = 0.5, hp.lr = 3e-3;
            for (int s = 1; s <= OPT_STEPS; s++) {
                opt_grad(&mine_b, &cpu_b, gdt);
                hp.step = s;
                zl_optim_buf b = opt_buf(&cpu_b, gdt, hdt);
                CHECK(zl_optim_adam_step(&hp, &b) == ZL_OK);
                zlm_adam_consts c = zlm_adam_make(hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.adamw_mode,
                                                  hp.bias_correction, hp.step, hp.grad_scale);
                for (int i = 0; i < OPT_N; i++) {
                    zlm_adam_update(&c, &mine_b.p[i], &mine_b.m[i], &mine_b.v[i], mine_b.gf[i]);
                    mine_b.half[i] = 0;
                }
            }
            opt_compare(adamw ? "adamw" : "adam", &mine_b, &cpu_b, hdt, exact);
        }
    zl_optim_set_kernel(NULL);
}

TEST(sgd_momentum_nesterov)
{
    bool exact = exact_kernel();
    const struct { double momentum, dampening, wd; bool nesterov; } cases[] = {
        {0, 0, 0, false}, {0, 0, 1e-2, false}, {0.9, 0.1, 1e-2, false}, {0.9, 0, 1e-2, true}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int di = 0; di < 3; di++) {
            int gdt = dtypes[di], hdt = ZL_DTYPE_BF16;
            opt_init(&mine_b, &cpu_b);
            zl_optim_sgd hp = zl_optim_sgd_defaults();
            hp.lr = 0.05, hp.momentum = cases[k].momentum, hp.dampening = cases[k].dampening;
            hp.weight_decay = cases[k].wd, hp.nesterov = cases[k].nesterov, hp.grad_scale = 0.25;
            for (int s = 1; s <= OPT_STEPS; s++) {
                opt_grad(&mine_b, &cpu_b, gdt);
                hp.step = s;
                zl_optim_buf b = opt_buf(&cpu_b, gdt, hdt);
                CHECK(zl_optim_sgd_step(&hp, &b) == ZL_OK);
                zlm_sgd_consts c = zlm_sgd_make(hp.lr, hp.momentum, hp.dampening, hp.weight_decay, hp.nesterov,
                                                hp.step, hp.grad_scale);
                for (int i = 0; i < OPT_N; i++) zlm_sgd_update(&c, &mine_b.p[i], &mine_b.m[i], mine_b.gf[i]);
            }
            opt_compare("sgd", &mine_b, &cpu_b, hdt, exact);
        }
    zl_optim_set_kernel(NULL);
}

TEST(lamb_two_passes)
{
    bool exact = exact_kernel();
    for (int di = 0; di < 3; di++) {
        int gdt = dtypes[di], hdt = ZL_DTYPE_F16;
        opt_init(&mine_b, &cpu_b);
        zl_optim_lamb hp = zl_optim_lamb_defaults();
        hp.weight_decay = 0.01, hp.grad_scale = 0.5, hp.lr = 1e-2;
        for (int s = 1; s <= OPT_STEPS; s++) {
            opt_grad(&mine_b, &cpu_b, gdt);
            hp.step = s;
            zl_optim_buf b = opt_buf(&cpu_b, gdt, hdt);
            double cpu_ratio = 0;
            CHECK(zl_optim_lamb_step(&hp, &b, &cpu_ratio) == ZL_OK);
            zlm_lamb_consts c = zlm_lamb_make(hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.grad_scale);
            double sq[2] = {0, 0};
            for (int i = 0; i < OPT_N; i++) zlm_lamb_moments(&c, mine_b.p[i], &mine_b.m[i], &mine_b.v[i], mine_b.gf[i], sq);
            double ratio = zlm_lamb_trust_ratio(sq[0], sq[1], hp.min_coeff, hp.max_coeff);
            /* The sums differ from the CPU's only in the order of double additions. */
            CHECK_CLOSE(ratio, cpu_ratio, 1e-12);
            float neg_rate = zlm_lamb_neg_rate(hp.lr, hp.beta1, hp.beta2, hp.bias_correction, hp.step, ratio);
            for (int i = 0; i < OPT_N; i++) zlm_lamb_apply(&c, neg_rate, &mine_b.p[i], mine_b.m[i], mine_b.v[i]);
        }
        opt_compare("lamb", &mine_b, &cpu_b, hdt, exact);
    }
    /* The clamp and the zero-norm case. */
    CHECK(zlm_lamb_trust_ratio(0, 4, 0.01, 10) == 1);
    CHECK(zlm_lamb_trust_ratio(1e6, 1, 0.01, 10) == 10);
    CHECK(zlm_lamb_trust_ratio(1e-9, 1, 0.01, 10) == 0.01);
    zl_optim_set_kernel(NULL);
}

/* ---- the loss scaler's overflow check, the gradient norm, scaling ---- */

/* The norm's sums as a device takes them: per chunk, the lanes then the chunk, added in order. */
static double device_sumsq(const void *x, int dt, int64_t n)
{
    double s = 0;
    for (int64_t lo = 0; lo < n; lo += ZLM_SUMSQ_CHUNK) {
        int64_t len = n - lo < ZLM_SUMSQ_CHUNK ? n - lo : ZLM_SUMSQ_CHUNK;
        double lanes[ZLM_SUMSQ_LANES];
        for (int k = 0; k < ZLM_SUMSQ_LANES; k++) lanes[k] = zlm_sumsq_lane(x, dt, lo, len, k);
        s += zlm_sumsq_chunk(x, dt, lo, len, lanes);
    }
    return s;
}

TEST(overflow_norm_and_scale)
{
    CHECK(ZLM_SUMSQ_CHUNK == ZLI_GRAD_CHUNK);
    const int64_t n = 2 * ZLM_SUMSQ_CHUNK + 1237;   /* two whole chunks and one with a tail */
    float *x = malloc(n * 4);
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int di = 0; di < 3; di++)
        for (int k = -1; k < 3; k++) {
            int dt = dtypes[di];
            for (int64_t i = 0; i < n; i++) x[i] = in_dtype(dt, i % 101 == 0 ? 6e4f : normal());
            if (k >= 0) x[(k + 1) * 12345] = bad[k];
            zl_tensor *t = tensor_of(dt, 1, &n, x);
            bool cpu_found = false, found = false;
            double cpu_sq = 0;
            CHECK(zl_grad_nonfinite(&t, 1, &cpu_found) == ZL_OK);
            CHECK(zl_grad_norm_sq(&t, 1, &cpu_sq) == ZL_OK);
            const void *data = zl_tensor_data(t);
            for (int64_t i = 0; i < n; i++) found |= zlm_nonfinite(data, dt, i);
            CHECK(found == cpu_found);
            CHECK(found == (k >= 0));
            double sq = device_sumsq(data, dt, n);
            if (k < 0) CHECK(sq == cpu_sq);   /* the host's chunks, lanes and order: the same bits */
            else CHECK(!isnan(sq) == !isnan(cpu_sq) && !isinf(sq) == !isinf(cpu_sq));
            zl_tensor_release(t);
        }
    /* Scaling, finite values (F16C's NaN payloads may differ). */
    for (int di = 0; di < 3; di++) {
        int dt = dtypes[di];
        for (int64_t i = 0; i < n; i++) x[i] = in_dtype(dt, i % 97 == 0 ? 6e4f : normal());
        zl_tensor *t = tensor_of(dt, 1, &n, x), *u = tensor_of(dt, 1, &n, x);
        CHECK(zl_grad_scale(&t, 1, 0.3) == ZL_OK);
        void *mine = zl_tensor_data(u);
        for (int64_t i = 0; i < n; i++) zlm_scale(mine, dt, i, 0.3f);
        CHECK(memcmp(mine, zl_tensor_data(t), (size_t)n * zl_dtype_size((zl_dtype)dt)) == 0);
        zl_tensor_release(u);
        zl_tensor_release(t);
    }
    free(x);
}
