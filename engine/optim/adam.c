/* Adam and AdamW (DeepSpeedCPUAdam's math): the scalar reference kernel, the
 * vector one (adam_vec.h, built for AVX2 and AVX-512), and zl_optim_adam_step,
 * which picks one and runs it over fixed chunks on the OpenMP threads. */
#include "optim_impl.h"

/* The step's constants, rounded to f32 once from their double values.
 * The moments are updated as m += (1 - beta1) * (g - m), which is beta1 * m +
 * (1 - beta1) * g in exact arithmetic; in f32, beta2 = 0.999 is off by 1.3e-8
 * and v would carry t times that after t steps, while 1 - beta2 rounds a
 * thousand times closer. Weight decay enters both ways, the unused factor
 * being 0, so each kernel is one straight-line body. Decay and step are added
 * together before they reach p, so p is rounded once a step, not twice. */
typedef struct adam_ctx {
    float *p, *m, *v;
    const void *g;
    void *half;
    zl_dtype g_dtype, half_dtype;
    float scale, l2, omb1, omb2, bc2_rsqrt, eps, decay, neg_step;
} adam_ctx;

static void adam_scalar(const adam_ctx *c, int64_t lo, int64_t hi)
{
    float *restrict p = c->p, *restrict m = c->m, *restrict v = c->v;
    const float scale = c->scale, l2 = c->l2, omb1 = c->omb1, omb2 = c->omb2;
    const float bc2_rsqrt = c->bc2_rsqrt, eps = c->eps, decay = c->decay, neg_step = c->neg_step;
    float gb[ZLI_OPTIM_BLOCK];
    for (int64_t i0 = lo; i0 < hi; i0 += ZLI_OPTIM_BLOCK) {
        int64_t len = hi - i0 < ZLI_OPTIM_BLOCK ? hi - i0 : ZLI_OPTIM_BLOCK;
        zli_optim_read_g(gb, c->g, c->g_dtype, i0, len);
        for (int64_t k = 0, i = i0; k < len; k++, i++) {
            float pi = p[i];
            float g = l2 * pi + gb[k] * scale;
            float mi = m[i] + omb1 * (g - m[i]);
            float vi = v[i] + omb2 * (g * g - v[i]);
            float denom = sqrtf(vi) * bc2_rsqrt + eps;
            p[i] = pi + (neg_step * (mi / denom) + decay * pi);
            m[i] = mi;
            v[i] = vi;
        }
        if (c->half) zli_optim_write_half(c->half, c->half_dtype, i0, p + i0, len);
    }
}

#define ZLI_VEC_KERNELS "adam_vec.h"
#include "vec_each.h"

typedef void (*adam_kernel)(const adam_ctx *, int64_t, int64_t);

static const adam_kernel kernels[] = {
    [ZLI_ISA_SCALAR] = adam_scalar,
#ifdef ZLI_OPTIM_X86
    [ZLI_ISA_AVX2] = adam_avx2,
    [ZLI_ISA_AVX512] = adam_avx512,
#endif
};

zl_optim_adam zl_optim_adam_defaults(void)
{
    return (zl_optim_adam){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0,
                           .adamw_mode = true, .bias_correction = true, .step = 1, .grad_scale = 1};
}

zl_status zli_optim_adam_check(const char *op, const zl_optim_adam *hp)
{
    if (zli_optim_check_range(op, "lr", hp->lr, 0, INFINITY, false) ||
        zli_optim_check_range(op, "beta1", hp->beta1, 0, 1, true) ||
        zli_optim_check_range(op, "beta2", hp->beta2, 0, 1, true) ||
        zli_optim_check_range(op, "eps", hp->eps, 0, INFINITY, false) ||
        zli_optim_check_range(op, "weight_decay", hp->weight_decay, 0, INFINITY, false) ||
        zli_optim_check_range(op, "step", (double)hp->step, 1, INFINITY, false) ||
        zli_optim_check_range(op, "grad_scale", hp->grad_scale, 0, INFINITY, false))
        return zli_last_code();
    return ZL_OK;
}

zl_status zl_optim_adam_step(const zl_optim_adam *hp, const zl_optim_buf *b)
{
    const char *op = "optim.adam";
    if (zli_optim_check_buf(op, hp, b, true, true, true) || zli_optim_adam_check(op, hp)) return zli_last_code();
    double bc1 = 1, bc2 = 1;
    if (hp->bias_correction) {
        bc1 = 1 - pow(hp->beta1, (double)hp->step);
        bc2 = 1 - pow(hp->beta2, (double)hp->step);
    }
    double wd = hp->weight_decay;
    const adam_ctx c = {
        .p = b->p, .m = b->m, .v = b->v, .g = b->g, .half = b->p_half,
        .g_dtype = b->g_dtype, .half_dtype = b->half_dtype,
        .scale = (float)hp->grad_scale,
        .l2 = (float)(hp->adamw_mode ? 0 : wd),
        .omb1 = (float)(1 - hp->beta1), .omb2 = (float)(1 - hp->beta2),
        .bc2_rsqrt = (float)(1 / sqrt(bc2)),
        .eps = (float)hp->eps,
        .decay = (float)(hp->adamw_mode ? -hp->lr * wd : 0),
        .neg_step = (float)(-hp->lr / bc1),
    };
    adam_kernel kernel = kernels[zli_optim_isa()];
    int64_t n = b->n, nchunks = zli_optim_nchunks(n);
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t lo = k * ZLI_OPTIM_CHUNK;
        kernel(&c, lo, lo + ZLI_OPTIM_CHUNK < n ? lo + ZLI_OPTIM_CHUNK : n);
    }
    return ZL_OK;
}
