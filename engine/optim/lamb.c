/* Lamb (DeepSpeed's FusedLamb): pass one updates the moments and sums p^2 and
 * u^2 per fixed chunk in double, pass two applies the update scaled by the
 * trust ratio; a scalar kernel for both passes, and a vector one (lamb_vec.h,
 * built for AVX2 and AVX-512). */
#include <stdlib.h>
#include "optim_impl.h"

typedef struct lamb_ctx {
    float *p, *m, *v;
    const void *g;
    void *half;
    zl_dtype g_dtype, half_dtype;
    float scale, omb1, omb2, eps, wd;
    float neg_rate;        /* pass two only: -(rate * trust ratio) */
} lamb_ctx;

/* The moments move as in adam.c (m += (1 - beta1) * (g - m)). Both passes
 * compute u with the same expression, so pass two applies the u whose norm
 * pass one measured. sq[0] += sum p^2, sq[1] += sum u^2. */
static void moments_scalar(const lamb_ctx *c, int64_t lo, int64_t hi, double sq[2])
{
    float *restrict p = c->p, *restrict m = c->m, *restrict v = c->v;
    const float scale = c->scale, omb1 = c->omb1, omb2 = c->omb2, eps = c->eps, wd = c->wd;
    float gb[ZLI_OPTIM_BLOCK];
    double sp = 0, su = 0;
    for (int64_t i0 = lo; i0 < hi; i0 += ZLI_OPTIM_BLOCK) {
        int64_t len = hi - i0 < ZLI_OPTIM_BLOCK ? hi - i0 : ZLI_OPTIM_BLOCK;
        zli_optim_read_g(gb, c->g, c->g_dtype, i0, len);
        for (int64_t k = 0, i = i0; k < len; k++, i++) {
            float pi = p[i], g = gb[k] * scale;
            float mi = m[i] + omb1 * (g - m[i]);
            float vi = v[i] + omb2 * (g * g - v[i]);
            float u = mi / (sqrtf(vi) + eps) + wd * pi;
            m[i] = mi;
            v[i] = vi;
            sp += (double)pi * pi;
            su += (double)u * u;
        }
    }
    sq[0] += sp;
    sq[1] += su;
}

static void apply_scalar(const lamb_ctx *c, int64_t lo, int64_t hi)
{
    float *restrict p = c->p;
    const float *restrict m = c->m, *restrict v = c->v;
    const float eps = c->eps, wd = c->wd, neg_rate = c->neg_rate;
    for (int64_t i = lo; i < hi; i++) {
        float pi = p[i];
        float u = m[i] / (sqrtf(v[i]) + eps) + wd * pi;
        p[i] = neg_rate * u + pi;
    }
    if (c->half) zli_optim_write_half(c->half, c->half_dtype, lo, p + lo, hi - lo);
}

#define ZLI_VEC_KERNELS "lamb_vec.h"
#include "vec_each.h"

typedef void (*moments_kernel)(const lamb_ctx *, int64_t, int64_t, double[2]);
typedef void (*apply_kernel)(const lamb_ctx *, int64_t, int64_t);

static const moments_kernel moments_kernels[] = {
    [ZLI_ISA_SCALAR] = moments_scalar,
#ifdef ZLI_OPTIM_X86
    [ZLI_ISA_AVX2] = moments_avx2,
    [ZLI_ISA_AVX512] = moments_avx512,
#endif
};

static const apply_kernel apply_kernels[] = {
    [ZLI_ISA_SCALAR] = apply_scalar,
#ifdef ZLI_OPTIM_X86
    [ZLI_ISA_AVX2] = apply_avx2,
    [ZLI_ISA_AVX512] = apply_avx512,
#endif
};

zl_optim_lamb zl_optim_lamb_defaults(void)
{
    return (zl_optim_lamb){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0,
                           .max_coeff = 10, .min_coeff = 0.01, .bias_correction = true, .step = 1,
                           .grad_scale = 1};
}

static const char *const op = "optim.lamb";

zl_status zli_optim_lamb_check(const char *op, const zl_optim_lamb *hp)
{
    if (zli_optim_check_range(op, "lr", hp->lr, 0, INFINITY, false) ||
        zli_optim_check_range(op, "beta1", hp->beta1, 0, 1, true) ||
        zli_optim_check_range(op, "beta2", hp->beta2, 0, 1, true) ||
        zli_optim_check_range(op, "eps", hp->eps, 0, INFINITY, false) ||
        zli_optim_check_range(op, "weight_decay", hp->weight_decay, 0, INFINITY, false) ||
        zli_optim_check_range(op, "min_coeff", hp->min_coeff, 0, INFINITY, false) ||
        zli_optim_check_range(op, "step", (double)hp->step, 1, INFINITY, false) ||
        zli_optim_check_range(op, "grad_scale", hp->grad_scale, 0, INFINITY, false))
        return zli_last_code();
    if (!(isfinite(hp->max_coeff) && hp->max_coeff >= hp->min_coeff))
        return zl_error(ZL_EINVAL, "%s: max_coeff must be finite and >= min_coeff (%g), got %g", op, hp->min_coeff,
                        hp->max_coeff);
    return ZL_OK;
}

static lamb_ctx make_ctx(const zl_optim_lamb *hp, const zl_optim_buf *b)
{
    return (lamb_ctx){
        .p = b->p, .m = b->m, .v = b->v, .g = b->g, .half = b->p_half,
        .g_dtype = b->g_dtype, .half_dtype = b->half_dtype,
        .scale = (float)hp->grad_scale,
        .omb1 = (float)(1 - hp->beta1), .omb2 = (float)(1 - hp->beta2),
        .eps = (float)hp->eps, .wd = (float)hp->weight_decay,
    };
}

zl_status zl_optim_lamb_moments(const zl_optim_lamb *hp, const zl_optim_buf *b, double sq[2])
{
    if (zli_optim_check_buf(op, hp, b, true, true, true) || zli_optim_lamb_check(op, hp)) return zli_last_code();
    if (!sq) return zl_error(ZL_EINVAL, "%s: output sq is NULL", op);
    int64_t n = b->n, nchunks = zli_optim_nchunks(n);
    sq[0] = sq[1] = 0;
    if (n == 0) return ZL_OK;
    double *part = calloc((size_t)nchunks * 2, sizeof *part);
    if (!part) return zl_error(ZL_ENOMEM, "%s: out of memory for %lld partial sums", op, (long long)nchunks);
    const lamb_ctx c = make_ctx(hp, b);
    moments_kernel kernel = moments_kernels[zli_optim_isa()];
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t lo = k * ZLI_OPTIM_CHUNK;
        kernel(&c, lo, lo + ZLI_OPTIM_CHUNK < n ? lo + ZLI_OPTIM_CHUNK : n, part + 2 * k);
    }
    for (int64_t k = 0; k < nchunks; k++) {
        sq[0] += part[2 * k];
        sq[1] += part[2 * k + 1];
    }
    free(part);
    return ZL_OK;
}

double zl_optim_lamb_trust_ratio(const zl_optim_lamb *hp, double p_sq, double u_sq)
{
    if (!hp) {
        zl_error(ZL_EINVAL, "%s: hyperparameters are NULL", op);
        return NAN;
    }
    double pn = sqrt(p_sq), un = sqrt(u_sq);
    if (pn == 0 || un == 0) return 1;
    double r = pn / un;
    if (r > hp->max_coeff) r = hp->max_coeff;
    if (r < hp->min_coeff) r = hp->min_coeff;
    return r;
}

zl_status zl_optim_lamb_apply(const zl_optim_lamb *hp, const zl_optim_buf *b, double ratio)
{
    if (zli_optim_check_buf(op, hp, b, false, true, true) || zli_optim_lamb_check(op, hp) ||
        zli_optim_check_range(op, "trust ratio", ratio, 0, INFINITY, false))
        return zli_last_code();
    double rate = hp->lr;
    if (hp->bias_correction)
        rate *= sqrt(1 - pow(hp->beta2, (double)hp->step)) / (1 - pow(hp->beta1, (double)hp->step));
    lamb_ctx c = make_ctx(hp, b);
    c.neg_rate = (float)(-rate * ratio);
    apply_kernel kernel = apply_kernels[zli_optim_isa()];
    int64_t n = b->n, nchunks = zli_optim_nchunks(n);
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t lo = k * ZLI_OPTIM_CHUNK;
        kernel(&c, lo, lo + ZLI_OPTIM_CHUNK < n ? lo + ZLI_OPTIM_CHUNK : n);
    }
    return ZL_OK;
}

zl_status zl_optim_lamb_step(const zl_optim_lamb *hp, const zl_optim_buf *b, double *ratio)
{
    double sq[2];
    if (zl_optim_lamb_moments(hp, b, sq)) return zli_last_code();
    double r = zl_optim_lamb_trust_ratio(hp, sq[0], sq[1]);
    if (zl_optim_lamb_apply(hp, b, r)) return zli_last_code();
    if (ratio) *ratio = r;
    return ZL_OK;
}
