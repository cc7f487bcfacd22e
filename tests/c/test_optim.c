/* The fused optimizer kernels: Adam/AdamW, Lamb and SGD over 100 steps against
 * double-precision references written here, every SIMD kernel against the
 * scalar one (vector tails included), half-precision gradients and copies, the
 * gradient scale, kernel selection, thread-count independence, bad input. */
#include <stdlib.h>
#include "harness.h"

/* ---- test data ---- */

static uint64_t rng_state;

static double uniform01(void)
{
    rng_state += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * 0x1p-53;
}

static double normal(void) { return sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }

static uint16_t to_half(zl_dtype dt, float x) { return dt == ZL_DTYPE_F16 ? zl_f32_to_f16(x) : zl_f32_to_bf16(x); }
static float from_half(zl_dtype dt, uint16_t h) { return dt == ZL_DTYPE_F16 ? zl_f16_to_f32(h) : zl_bf16_to_f32(h); }

/* One tensor's buffers for the kernels and, beside them, the reference state in
 * double. gf holds the gradient exactly as the kernel sees it after reading. */
typedef struct state {
    int64_t n;
    float *p, *m, *v, *gf;
    uint16_t *gh, *half;
    double *P, *M, *V;
    zl_optim_buf buf;
} state;

static void state_init(state *s, int64_t n, zl_dtype g_dtype, zl_dtype half_dtype, bool half, uint64_t seed)
{
    rng_state = seed;
    s->n = n;
    size_t f = (size_t)(n ? n : 1) * sizeof(float), d = (size_t)(n ? n : 1) * sizeof(double);
    s->p = malloc(f), s->m = malloc(f), s->v = malloc(f), s->gf = malloc(f);
    s->gh = malloc(f), s->half = half ? malloc(f) : NULL;
    s->P = malloc(d), s->M = malloc(d), s->V = malloc(d);
    for (int64_t i = 0; i < n; i++) {
        s->p[i] = (float)normal();
        s->P[i] = s->p[i];
        s->m[i] = s->v[i] = 0;
        s->M[i] = s->V[i] = 0;
    }
    s->buf = (zl_optim_buf){.p = s->p, .m = s->m, .v = s->v, .g_dtype = g_dtype,
                            .g = g_dtype == ZL_DTYPE_F32 ? (const void *)s->gf : s->gh,
                            .p_half = s->half, .half_dtype = half_dtype, .n = n};
}

static void state_free(state *s)
{
    void *all[] = {s->p, s->m, s->v, s->gf, s->gh, s->half, s->P, s->M, s->V};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* New gradients N(0, mag^2), rounded through the gradient dtype. */
static void state_grads(state *s, double mag)
{
    for (int64_t i = 0; i < s->n; i++) {
        float g = (float)(normal() * mag);
        if (s->buf.g_dtype != ZL_DTYPE_F32) {
            s->gh[i] = to_half(s->buf.g_dtype, g);
            g = from_half(s->buf.g_dtype, s->gh[i]);
        }
        s->gf[i] = g;
    }
}

static double rms(const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += b[i] * b[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* Largest |a - b| / (|b| + floor): relative, with floor standing in for the
 * array's scale where an element is near zero by cancellation. */
static double max_err(const float *a, const double *b, int64_t n, double floor)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs(a[i] - b[i]), d = diff == 0 ? 0 : diff / (fabs(b[i]) + floor);
        if (!(d <= e)) e = d;
    }
    return e;
}

#define CHECK_ARRAY(what, a, b, n, floor, tol)                                                        \
    do { double e_ = max_err(a, b, n, floor);                                                         \
         if (!(e_ <= (tol))) zt_fail(__FILE__, __LINE__, "%s: %s relative error %.3g > %g", label, what, e_, (double)(tol)); \
    } while (0)

/* The half copy must be the round-to-nearest-even of p, bit for bit. */
static void check_half(const char *label, const state *s)
{
    if (!s->half) return;
    for (int64_t i = 0; i < s->n; i++)
        if (s->half[i] != to_half(s->buf.half_dtype, s->p[i])) {
            zt_fail(__FILE__, __LINE__, "%s: half copy [%lld] = 0x%04x, p rounds to 0x%04x", label, (long long)i,
                    s->half[i], to_half(s->buf.half_dtype, s->p[i]));
            return;
        }
}

static void check_state(const char *label, const state *s, bool with_v)
{
    double tol = 1e-6;
    CHECK_ARRAY("p", s->p, s->P, s->n, rms(s->P, s->n), tol);
    CHECK_ARRAY("m", s->m, s->M, s->n, rms(s->M, s->n), tol);
    if (with_v) CHECK_ARRAY("v", s->v, s->V, s->n, rms(s->V, s->n), tol);
    check_half(label, s);
}

static const char *const kernel_names[] = {"scalar", "avx2", "avx512"};

/* ---- references, in double ---- */

static void adam_ref(state *s, const zl_optim_adam *hp)
{
    double t = (double)hp->step, wd = hp->weight_decay;
    double bc1 = hp->bias_correction ? 1 - pow(hp->beta1, t) : 1;
    double bc2 = hp->bias_correction ? 1 - pow(hp->beta2, t) : 1;
    for (int64_t i = 0; i < s->n; i++) {
        double g = s->gf[i] * hp->grad_scale;
        if (!hp->adamw_mode) g += wd * s->P[i];
        s->M[i] = hp->beta1 * s->M[i] + (1 - hp->beta1) * g;
        s->V[i] = hp->beta2 * s->V[i] + (1 - hp->beta2) * g * g;
        double denom = sqrt(s->V[i]) / sqrt(bc2) + hp->eps;
        if (hp->adamw_mode) s->P[i] -= hp->lr * wd * s->P[i];
        s->P[i] -= hp->lr / bc1 * s->M[i] / denom;
    }
}

/* Returns the trust ratio it used. */
static double lamb_ref(state *s, const zl_optim_lamb *hp)
{
    double t = (double)hp->step, sp = 0, su = 0;
    double *u = malloc((size_t)(s->n ? s->n : 1) * sizeof *u);
    for (int64_t i = 0; i < s->n; i++) {
        double g = s->gf[i] * hp->grad_scale;
        s->M[i] = hp->beta1 * s->M[i] + (1 - hp->beta1) * g;
        s->V[i] = hp->beta2 * s->V[i] + (1 - hp->beta2) * g * g;
        u[i] = s->M[i] / (sqrt(s->V[i]) + hp->eps) + hp->weight_decay * s->P[i];
        sp += s->P[i] * s->P[i];
        su += u[i] * u[i];
    }
    double ratio = 1;
    if (sp > 0 && su > 0) ratio = fmin(fmax(sqrt(sp) / sqrt(su), hp->min_coeff), hp->max_coeff);
    double rate = hp->lr;
    if (hp->bias_correction) rate *= sqrt(1 - pow(hp->beta2, t)) / (1 - pow(hp->beta1, t));
    for (int64_t i = 0; i < s->n; i++) s->P[i] -= rate * ratio * u[i];
    free(u);
    return ratio;
}

static void sgd_ref(state *s, const zl_optim_sgd *hp)
{
    for (int64_t i = 0; i < s->n; i++) {
        double g = s->gf[i] * hp->grad_scale + hp->weight_decay * s->P[i];
        if (hp->momentum != 0) {
            s->M[i] = hp->step == 1 ? g : hp->momentum * s->M[i] + (1 - hp->dampening) * g;
            g = hp->nesterov ? g + hp->momentum * s->M[i] : s->M[i];
        }
        s->P[i] -= hp->lr * g;
    }
}

/* ---- 100 steps against the references, under every kernel this CPU runs ---- */

typedef struct adam_case {
    bool adamw, bias;
    double wd, eps;
    zl_dtype g_dtype, half_dtype;
    bool half;
    double grad_scale;
} adam_case;

TEST(adam_matches_reference)
{
    const adam_case cases[] = {
        {true, true, 0.1, 1e-8, ZL_DTYPE_F32, ZL_DTYPE_BF16, true, 1},
        {false, true, 0.1, 1e-8, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 1},
        {true, false, 0.01, 1e-8, ZL_DTYPE_BF16, ZL_DTYPE_F16, true, 1.0 / 1024},
        {false, false, 0.01, 1e-8, ZL_DTYPE_F16, ZL_DTYPE_BF16, false, 1},
        {true, true, 0, 1e-8, ZL_DTYPE_BF16, ZL_DTYPE_BF16, true, 0.5},
        /* an eps large enough that where it is added (after the bias correction) shows */
        {true, true, 0.01, 0.1, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 1},
    };
    for (int k = 0; k < 3; k++) {
        if (zl_optim_set_kernel(kernel_names[k]) != ZL_OK) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const adam_case *ac = &cases[c];
            char label[96];
            snprintf(label, sizeof label, "adam %s case %zu", kernel_names[k], c);
            state s;
            state_init(&s, 1003, ac->g_dtype, ac->half_dtype, ac->half, 42 + c);
            zl_optim_adam hp = zl_optim_adam_defaults();
            hp.lr = 1e-3, hp.eps = ac->eps, hp.weight_decay = ac->wd, hp.adamw_mode = ac->adamw, hp.bias_correction = ac->bias;
            hp.grad_scale = ac->grad_scale;
            for (hp.step = 1; hp.step <= 100; hp.step++) {
                state_grads(&s, 1 / ac->grad_scale);
                CHECK(zl_optim_adam_step(&hp, &s.buf) == ZL_OK);
                adam_ref(&s, &hp);
            }
            check_state(label, &s, true);
            state_free(&s);
        }
    }
    zl_optim_set_kernel(NULL);
}

typedef struct lamb_case {
    bool bias;
    double wd, eps, max_coeff, min_coeff;
    zl_dtype g_dtype;
    bool half;
} lamb_case;

TEST(lamb_matches_reference)
{
    const lamb_case cases[] = {
        {true, 0.01, 1e-8, 10, 0.01, ZL_DTYPE_F32, true},
        {false, 0, 1e-8, 10, 0.01, ZL_DTYPE_BF16, false},
        {true, 0.1, 1e-8, 0.2, 0.1, ZL_DTYPE_F16, true},     /* the upper clamp is active */
        {false, 0.01, 1e-8, 10, 5, ZL_DTYPE_F32, false},     /* the lower clamp is active */
        {true, 0.01, 0.1, 10, 0.01, ZL_DTYPE_F32, false},    /* eps outside the sqrt shows */
    };
    for (int k = 0; k < 3; k++) {
        if (zl_optim_set_kernel(kernel_names[k]) != ZL_OK) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const lamb_case *lc = &cases[c];
            char label[96];
            snprintf(label, sizeof label, "lamb %s case %zu", kernel_names[k], c);
            state s;
            state_init(&s, 1003, lc->g_dtype, ZL_DTYPE_BF16, lc->half, 7 + c);
            zl_optim_lamb hp = zl_optim_lamb_defaults();
            hp.lr = 1e-3, hp.eps = lc->eps, hp.weight_decay = lc->wd, hp.bias_correction = lc->bias;
            hp.max_coeff = lc->max_coeff, hp.min_coeff = lc->min_coeff;
            double worst = 0;
            for (hp.step = 1; hp.step <= 100; hp.step++) {
                state_grads(&s, 1);
                double ratio = -1;
                CHECK(zl_optim_lamb_step(&hp, &s.buf, &ratio) == ZL_OK);
                double want = lamb_ref(&s, &hp);
                worst = fmax(worst, fabs(ratio - want) / want);
                CHECK(ratio >= lc->min_coeff && ratio <= lc->max_coeff);
            }
            if (!(worst <= 1e-6)) zt_fail(__FILE__, __LINE__, "%s: trust ratio relative error %.3g", label, worst);
            check_state(label, &s, true);
            state_free(&s);
        }
    }
    zl_optim_set_kernel(NULL);
}

TEST(sgd_matches_reference)
{
    const struct { double momentum, dampening, wd; bool nesterov; zl_dtype g_dtype; double grad_scale; } cases[] = {
        {0, 0, 0.01, false, ZL_DTYPE_F32, 1},
        {0.9, 0.1, 0, false, ZL_DTYPE_F32, 0.25},
        {0.9, 0, 0.001, true, ZL_DTYPE_BF16, 1},
        {0.5, 0, 0.01, false, ZL_DTYPE_F16, 1},
    };
    for (int k = 0; k < 3; k++) {
        if (zl_optim_set_kernel(kernel_names[k]) != ZL_OK) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char label[96];
            snprintf(label, sizeof label, "sgd %s case %zu", kernel_names[k], c);
            state s;
            state_init(&s, 1003, cases[c].g_dtype, ZL_DTYPE_F16, true, 99 + c);
            zl_optim_sgd hp = zl_optim_sgd_defaults();
            hp.lr = 1e-2, hp.momentum = cases[c].momentum, hp.dampening = cases[c].dampening;
            hp.weight_decay = cases[c].wd, hp.nesterov = cases[c].nesterov, hp.grad_scale = cases[c].grad_scale;
            if (hp.momentum == 0) s.buf.m = NULL;    /* not needed, so not required */
            for (hp.step = 1; hp.step <= 100; hp.step++) {
                state_grads(&s, 1 / hp.grad_scale);
                CHECK(zl_optim_sgd_step(&hp, &s.buf) == ZL_OK);
                sgd_ref(&s, &hp);
            }
            check_state(label, &s, false);
            state_free(&s);
        }
    }
    zl_optim_set_kernel(NULL);
}

/* ---- SIMD kernels against the scalar one ---- */

/* Three steps of each optimizer on a fresh state under `kernel`. */
static void run_three(const char *kernel, int which, state *s, int64_t n, double *ratio)
{
    zl_dtype gdt[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16, ZL_DTYPE_F32}, hdt[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16, ZL_DTYPE_BF16};
    state_init(s, n, gdt[which], hdt[which], true, 1000 + (uint64_t)n);
    CHECK(zl_optim_set_kernel(kernel) == ZL_OK);
    zl_optim_adam adam = zl_optim_adam_defaults();
    zl_optim_lamb lamb = zl_optim_lamb_defaults();
    zl_optim_sgd sgd = zl_optim_sgd_defaults();
    adam.weight_decay = 0.01, adam.grad_scale = 0.5;
    lamb.weight_decay = 0.01, lamb.grad_scale = 2;
    sgd.momentum = 0.9, sgd.nesterov = true, sgd.weight_decay = 0.01;
    for (int64_t t = 1; t <= 3; t++) {
        state_grads(s, 1);
        adam.step = lamb.step = sgd.step = t;
        if (which == 0) CHECK(zl_optim_adam_step(&adam, &s->buf) == ZL_OK);
        if (which == 1) CHECK(zl_optim_lamb_step(&lamb, &s->buf, ratio) == ZL_OK);
        if (which == 2) CHECK(zl_optim_sgd_step(&sgd, &s->buf) == ZL_OK);
    }
}

TEST(simd_matches_scalar)
{
    const int64_t lengths[] = {1, 15, 17, 1000003};
    const char *const opt[] = {"adam", "lamb", "sgd"};
    int tried = 0;
    for (int k = 1; k < 3; k++) {
        if (zl_optim_set_kernel(kernel_names[k]) != ZL_OK) continue;
        tried++;
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (int which = 0; which < 3; which++) {
                int64_t n = lengths[l];
                char label[96];
                snprintf(label, sizeof label, "%s %s n=%lld", opt[which], kernel_names[k], (long long)n);
                state ref, s;
                double ref_ratio = 0, ratio = 0;
                run_three("scalar", which, &ref, n, &ref_ratio);
                run_three(kernel_names[k], which, &s, n, &ratio);
                /* The scalar run's results become the reference arrays. */
                for (int64_t i = 0; i < n; i++) s.P[i] = ref.p[i], s.M[i] = ref.m[i], s.V[i] = ref.v[i];
                check_state(label, &s, which != 2);
                check_half(label, &ref);
                CHECK_CLOSE(ratio, ref_ratio, 1e-6);
                state_free(&ref);
                state_free(&s);
            }
    }
    zl_optim_set_kernel(NULL);
    if (!tried) printf("  (no SIMD kernel on this CPU: only the scalar one was tested)\n");
}

/* ---- selection, threads, the Lamb passes, tensors ---- */

TEST(kernel_selection)
{
    const char *saved = getenv("ZLUA_SIMD");
    char *copy = saved ? strdup(saved) : NULL;
    CHECK(zl_optim_set_kernel("auto") == ZL_OK);
    const char *best = zl_optim_kernel_name();
    CHECK(!strcmp(best, "avx512") || !strcmp(best, "avx2") || !strcmp(best, "scalar"));
    bool has_avx2 = strcmp(best, "scalar") != 0;
    setenv("ZLUA_SIMD", "scalar", 1);
    CHECK(zl_optim_set_kernel(NULL) == ZL_OK && !strcmp(zl_optim_kernel_name(), "scalar"));
    setenv("ZLUA_SIMD", "off", 1);
    CHECK(zl_optim_set_kernel(NULL) == ZL_OK && !strcmp(zl_optim_kernel_name(), "scalar"));
    setenv("ZLUA_SIMD", "avx2", 1);
    CHECK(zl_optim_set_kernel(NULL) == ZL_OK && !strcmp(zl_optim_kernel_name(), has_avx2 ? "avx2" : "scalar"));
    setenv("ZLUA_SIMD", "avx512", 1);
    CHECK(zl_optim_set_kernel(NULL) == ZL_OK && !strcmp(zl_optim_kernel_name(), best));
    setenv("ZLUA_SIMD", "bogus", 1);
    CHECK(zl_optim_set_kernel(NULL) == ZL_OK && !strcmp(zl_optim_kernel_name(), best));
    CHECK(zl_optim_set_kernel("off") == ZL_OK && !strcmp(zl_optim_kernel_name(), "scalar"));
    CHECK_ERR(zl_optim_set_kernel("sse"), "unknown kernel 'sse' (expected auto, avx512, avx2, scalar or off)");
    if (strcmp(best, "avx512") != 0) CHECK_ERR(zl_optim_set_kernel("avx512"), "needs CPU features this machine lacks");
    if (copy) setenv("ZLUA_SIMD", copy, 1);
    else unsetenv("ZLUA_SIMD");
    free(copy);
    CHECK(zl_optim_set_kernel(NULL) == ZL_OK);
}

/* Lamb's sums are per fixed chunk: one thread and two give the same bits. */
TEST(lamb_same_bits_any_thread_count)
{
    int saved = zl_get_num_threads();
    state s[2];
    double ratio[2];
    for (int r = 0; r < 2; r++) {
        zl_set_num_threads(r + 1);
        state_init(&s[r], 300001, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 5);
        zl_optim_lamb hp = zl_optim_lamb_defaults();
        for (hp.step = 1; hp.step <= 3; hp.step++) {
            state_grads(&s[r], 1);
            CHECK(zl_optim_lamb_step(&hp, &s[r].buf, &ratio[r]) == ZL_OK);
        }
    }
    zl_set_num_threads(saved);
    CHECK(ratio[0] == ratio[1]);
    CHECK(memcmp(s[0].p, s[1].p, 300001 * sizeof(float)) == 0);
    CHECK(memcmp(s[0].v, s[1].v, 300001 * sizeof(float)) == 0);
    state_free(&s[0]);
    state_free(&s[1]);
}

/* A tensor split in two (as across ZeRO ranks): the passes called per part
 * with the sums added in between give the whole-tensor step. */
TEST(lamb_split_passes)
{
    state whole, part;
    const int64_t n = 100000, cut = 40000;
    state_init(&whole, n, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 11);
    state_init(&part, n, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 11);
    zl_optim_lamb hp = zl_optim_lamb_defaults();
    hp.weight_decay = 0.01;
    for (hp.step = 1; hp.step <= 5; hp.step++) {
        rng_state = 500 + (uint64_t)hp.step;
        state_grads(&whole, 1);
        rng_state = 500 + (uint64_t)hp.step;
        state_grads(&part, 1);
        double ratio, a[2], b[2];
        CHECK(zl_optim_lamb_step(&hp, &whole.buf, &ratio) == ZL_OK);
        zl_optim_buf lo = part.buf, hi = part.buf;
        lo.n = cut;
        hi.p += cut, hi.m += cut, hi.v += cut, hi.g = part.gf + cut, hi.n = n - cut;
        CHECK(zl_optim_lamb_moments(&hp, &lo, a) == ZL_OK && zl_optim_lamb_moments(&hp, &hi, b) == ZL_OK);
        double r = zl_optim_lamb_trust_ratio(&hp, a[0] + b[0], a[1] + b[1]);
        CHECK_CLOSE(r, ratio, 1e-12);
        CHECK(zl_optim_lamb_apply(&hp, &lo, r) == ZL_OK && zl_optim_lamb_apply(&hp, &hi, r) == ZL_OK);
    }
    for (int64_t i = 0; i < n; i++) whole.P[i] = part.p[i], whole.M[i] = part.m[i], whole.V[i] = part.v[i];
    const char *label = "lamb split";
    check_state(label, &whole, true);
    state_free(&whole);
    state_free(&part);
}

TEST(lamb_trust_ratio_edges)
{
    zl_optim_lamb hp = zl_optim_lamb_defaults();
    CHECK(zl_optim_lamb_trust_ratio(&hp, 16, 4) == 2);
    CHECK(zl_optim_lamb_trust_ratio(&hp, 1e6, 1) == 10);      /* max_coeff */
    CHECK(zl_optim_lamb_trust_ratio(&hp, 1e-8, 1) == 0.01);   /* min_coeff */
    hp.max_coeff = 0.5;
    /* A zero norm gives 1, unclamped even when max_coeff is below 1 (as DeepSpeed). */
    CHECK(zl_optim_lamb_trust_ratio(&hp, 0, 1) == 1);
    CHECK(zl_optim_lamb_trust_ratio(&hp, 1, 0) == 1);

    /* ||p|| = 0: p moves by the plain step rate * u. */
    state s;
    state_init(&s, 100, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 3);
    for (int64_t i = 0; i < s.n; i++) s.p[i] = 0, s.P[i] = 0;
    state_grads(&s, 1);
    double ratio = 0;
    CHECK(zl_optim_lamb_step(&hp, &s.buf, &ratio) == ZL_OK && ratio == 1);
    CHECK(lamb_ref(&s, &hp) == 1);
    const char *label = "lamb zero |p|";
    check_state(label, &s, true);
    /* ||u|| = 0: zero gradient, zero moments, no decay: nothing moves. */
    for (int64_t i = 0; i < s.n; i++) s.p[i] = 1, s.m[i] = s.v[i] = s.gf[i] = 0;
    CHECK(zl_optim_lamb_step(&hp, &s.buf, &ratio) == ZL_OK && ratio == 1);
    CHECK(s.p[0] == 1 && s.p[s.n - 1] == 1);
    state_free(&s);
}

TEST(buffers_from_tensors)
{
    zl_tensor *p = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(3, 4), NULL);
    zl_tensor *g = zl_tensor_randn(ZL_DTYPE_BF16, SHAPE(12), NULL);
    zl_tensor *m = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(3, 4));
    zl_tensor *v = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(3, 4));
    zl_tensor *h = zl_tensor_zeros(ZL_DTYPE_F16, SHAPE(3, 4));
    zl_optim_buf b;
    CHECK(zl_optim_buf_from_tensors(&b, p, g, m, v, h) == ZL_OK);
    CHECK(b.n == 12 && b.g_dtype == ZL_DTYPE_BF16 && b.half_dtype == ZL_DTYPE_F16 && b.p == zl_tensor_data(p));
    double p0 = zl_tensor_get(p, 5), g0 = zl_tensor_get(g, 5);
    zl_optim_sgd hp = zl_optim_sgd_defaults();
    hp.lr = 0.5;
    CHECK(zl_optim_sgd_step(&hp, &b) == ZL_OK);
    CHECK(zl_tensor_get(p, 5) == (float)(p0 - 0.5 * g0));
    CHECK(zl_tensor_get(h, 5) == zl_f16_to_f32(zl_f32_to_f16((float)zl_tensor_get(p, 5))));

    zl_tensor *m10 = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(10));
    zl_tensor *gi = zl_tensor_zeros(ZL_DTYPE_I32, SHAPE(12));
    zl_tensor *h32 = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(12));
    zl_tensor *pt = zl_tensor_transpose(p, 0, 1);
    CHECK_ERR(zl_optim_buf_from_tensors(&b, p, g, m10, v, NULL), "optim: m has 10 elements, p has 12 (shapes [10] and [3, 4])");
    CHECK_ERR(zl_optim_buf_from_tensors(&b, p, gi, m, v, NULL), "optim: g must be f32, bf16 or f16, got i32");
    CHECK_ERR(zl_optim_buf_from_tensors(&b, p, g, m, v, h32), "optim: p_half must be bf16 or f16, got f32");
    CHECK_ERR(zl_optim_buf_from_tensors(&b, g, g, m, v, NULL), "optim: p must be f32, got bf16");
    CHECK_ERR(zl_optim_buf_from_tensors(&b, pt, g, m, v, NULL), "optim: p must be contiguous");
    CHECK_ERR(zl_optim_buf_from_tensors(&b, p, NULL, m, v, NULL), "optim: gradient tensor g is NULL");
    CHECK_ERR(zl_optim_buf_from_tensors(NULL, p, g, m, v, NULL), "optim: output zl_optim_buf is NULL");
    zl_tensor *all[] = {p, g, m, v, h, m10, gi, h32, pt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zl_tensor_release(all[i]);
}

/* ---- bad input ---- */

TEST(bad_input)
{
    state s;
    state_init(&s, 64, ZL_DTYPE_F32, ZL_DTYPE_BF16, false, 1);
    state_grads(&s, 1);
    float p0 = s.p[0];
    zl_optim_adam adam = zl_optim_adam_defaults();
    zl_optim_lamb lamb = zl_optim_lamb_defaults();
    zl_optim_sgd sgd = zl_optim_sgd_defaults();
    zl_optim_buf b = s.buf;

    CHECK_ERR(zl_optim_adam_step(NULL, &b), "optim.adam: hyperparameters are NULL");
    CHECK_ERR(zl_optim_adam_step(&adam, NULL), "optim.adam: buffers are NULL");
    b.p = NULL;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: parameter buffer p is NULL");
    b = s.buf, b.g = NULL;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: gradient buffer g is NULL");
    b = s.buf, b.v = NULL;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: moment buffer v is NULL");
    b = s.buf, b.n = -1;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: n must be >= 0, got -1");
    b = s.buf, b.g_dtype = ZL_DTYPE_I32;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: gradient dtype must be f32, bf16 or f16, got i32");
    b = s.buf, b.p_half = s.gh, b.half_dtype = ZL_DTYPE_F32;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: half copy dtype must be bf16 or f16, got f32");
    b = s.buf, b.m = s.p + 1;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: buffers p and m overlap");
    b = s.buf, b.p_half = (uint16_t *)s.v + 2;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: buffers v and p_half overlap");
    b = s.buf;

    adam.lr = NAN;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: lr must be a finite number >= 0, got nan");
    CHECK(zl_optim_adam_step(&adam, &b) == ZL_EINVAL);
    adam.lr = INFINITY;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: lr must be a finite number >= 0, got inf");
    adam.lr = -1e-3;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: lr must be a finite number >= 0, got -0.001");
    adam = zl_optim_adam_defaults(), adam.beta1 = 1;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: beta1 must be in [0, 1), got 1");
    adam = zl_optim_adam_defaults(), adam.beta2 = -0.5;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: beta2 must be in [0, 1), got -0.5");
    adam = zl_optim_adam_defaults(), adam.eps = NAN;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: eps must be a finite number >= 0, got nan");
    adam = zl_optim_adam_defaults(), adam.weight_decay = -1;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: weight_decay must be a finite number >= 0, got -1");
    adam = zl_optim_adam_defaults(), adam.step = 0;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: step must be a finite number >= 1, got 0");
    adam = zl_optim_adam_defaults(), adam.grad_scale = INFINITY;
    CHECK_ERR(zl_optim_adam_step(&adam, &b), "optim.adam: grad_scale must be a finite number >= 0, got inf");
    CHECK(s.p[0] == p0 && s.m[0] == 0 && s.v[0] == 0);   /* nothing was written */

    lamb.max_coeff = 0.001;
    CHECK_ERR(zl_optim_lamb_step(&lamb, &b, NULL), "optim.lamb: max_coeff must be finite and >= min_coeff (0.01), got 0.001");
    lamb = zl_optim_lamb_defaults(), lamb.lr = NAN;
    CHECK_ERR(zl_optim_lamb_step(&lamb, &b, NULL), "optim.lamb: lr must be a finite number >= 0, got nan");
    lamb = zl_optim_lamb_defaults();
    CHECK_ERR(zl_optim_lamb_moments(&lamb, &b, NULL), "optim.lamb: output sq is NULL");
    CHECK_ERR(zl_optim_lamb_apply(&lamb, &b, NAN), "optim.lamb: trust ratio must be a finite number >= 0, got nan");
    CHECK(isnan(zl_optim_lamb_trust_ratio(NULL, 1, 1)) && strstr(zl_last_error(), "optim.lamb: hyperparameters are NULL"));
    CHECK(s.p[0] == p0 && s.m[0] == 0 && s.v[0] == 0);

    sgd.momentum = 0.9, sgd.dampening = 0.1, sgd.nesterov = true;
    CHECK_ERR(zl_optim_sgd_step(&sgd, &b),
              "optim.sgd: nesterov needs momentum > 0 and dampening 0, got momentum 0.9, dampening 0.1");
    sgd = zl_optim_sgd_defaults(), sgd.nesterov = true;
    CHECK_ERR(zl_optim_sgd_step(&sgd, &b), "optim.sgd: nesterov needs momentum > 0");
    sgd = zl_optim_sgd_defaults(), sgd.momentum = 0.9, b.m = NULL;
    CHECK_ERR(zl_optim_sgd_step(&sgd, &b), "optim.sgd: moment buffer m is NULL");
    b = s.buf, sgd.lr = -INFINITY;
    CHECK_ERR(zl_optim_sgd_step(&sgd, &b), "optim.sgd: lr must be a finite number >= 0, got -inf");
    sgd = zl_optim_sgd_defaults(), sgd.dampening = NAN;
    CHECK_ERR(zl_optim_sgd_step(&sgd, &b), "optim.sgd: dampening must be finite, got nan");
    CHECK(s.p[0] == p0);

    /* n = 0 is a valid no-op. */
    adam = zl_optim_adam_defaults(), b = s.buf, b.n = 0;
    CHECK(zl_optim_adam_step(&adam, &b) == ZL_OK && s.p[0] == p0);
    state_free(&s);
}
