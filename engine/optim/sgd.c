/* SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD's
 * update): the scalar kernel, the vector one (sgd_vec.h, built for AVX2 and
 * AVX-512) and zl_optim_sgd_step. */
#include "optim_impl.h"

typedef struct sgd_ctx {
    float *p, *buf;
    const void *g;
    void *half;
    zl_dtype g_dtype, half_dtype;
    float scale, wd, momentum, damp1, neg_lr;   /* damp1 = 1 - dampening */
    bool use_momentum, first, nesterov;
} sgd_ctx;

static void sgd_scalar(const sgd_ctx *c, int64_t lo, int64_t hi)
{
    float *restrict p = c->p, *restrict buf = c->buf;
    const float scale = c->scale, wd = c->wd, momentum = c->momentum, damp1 = c->damp1, neg_lr = c->neg_lr;
    const bool use_momentum = c->use_momentum, first = c->first, nesterov = c->nesterov;
    float gb[ZLI_OPTIM_BLOCK];
    for (int64_t i0 = lo; i0 < hi; i0 += ZLI_OPTIM_BLOCK) {
        int64_t len = hi - i0 < ZLI_OPTIM_BLOCK ? hi - i0 : ZLI_OPTIM_BLOCK;
        zli_optim_read_g(gb, c->g, c->g_dtype, i0, len);
        for (int64_t k = 0, i = i0; k < len; k++, i++) {
            float pi = p[i];
            float g = wd * pi + gb[k] * scale;
            if (use_momentum) {
                float b = first ? g : momentum * buf[i] + damp1 * g;
                buf[i] = b;
                g = nesterov ? momentum * b + g : b;
            }
            p[i] = neg_lr * g + pi;
        }
        if (c->half) zli_optim_write_half(c->half, c->half_dtype, i0, p + i0, len);
    }
}

#define ZLI_VEC_KERNELS "sgd_vec.h"
#include "vec_each.h"

typedef void (*sgd_kernel)(const sgd_ctx *, int64_t, int64_t);

static const sgd_kernel kernels[] = {
    [ZLI_ISA_SCALAR] = sgd_scalar,
#ifdef ZLI_OPTIM_X86
    [ZLI_ISA_AVX2] = sgd_avx2,
    [ZLI_ISA_AVX512] = sgd_avx512,
#endif
};

zl_optim_sgd zl_optim_sgd_defaults(void)
{
    return (zl_optim_sgd){.lr = 1e-3, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false,
                          .step = 1, .grad_scale = 1};
}

zl_status zli_optim_sgd_check(const char *op, const zl_optim_sgd *hp)
{
    if (zli_optim_check_range(op, "lr", hp->lr, 0, INFINITY, false) ||
        zli_optim_check_range(op, "momentum", hp->momentum, 0, INFINITY, false) ||
        zli_optim_check_range(op, "weight_decay", hp->weight_decay, 0, INFINITY, false) ||
        zli_optim_check_range(op, "step", (double)hp->step, 1, INFINITY, false) ||
        zli_optim_check_range(op, "grad_scale", hp->grad_scale, 0, INFINITY, false))
        return zli_last_code();
    if (!isfinite(hp->dampening)) return zl_error(ZL_EINVAL, "%s: dampening must be finite, got %g", op, hp->dampening);
    if (hp->nesterov && (hp->momentum <= 0 || hp->dampening != 0))
        return zl_error(ZL_EINVAL, "%s: nesterov needs momentum > 0 and dampening 0, got momentum %g, dampening %g",
                        op, hp->momentum, hp->dampening);
    return ZL_OK;
}

zl_status zl_optim_sgd_step(const zl_optim_sgd *hp, const zl_optim_buf *b)
{
    const char *op = "optim.sgd";
    bool use_momentum = hp && hp->momentum != 0;
    if (zli_optim_check_buf(op, hp, b, true, use_momentum, false) || zli_optim_sgd_check(op, hp))
        return zli_last_code();
    const sgd_ctx c = {
        .p = b->p, .buf = b->m, .g = b->g, .half = b->p_half,
        .g_dtype = b->g_dtype, .half_dtype = b->half_dtype,
        .scale = (float)hp->grad_scale, .wd = (float)hp->weight_decay,
        .momentum = (float)hp->momentum, .damp1 = (float)(1 - hp->dampening), .neg_lr = (float)-hp->lr,
        .use_momentum = use_momentum, .first = hp->step == 1, .nesterov = hp->nesterov,
    };
    sgd_kernel kernel = kernels[zli_optim_isa()];
    int64_t n = b->n, nchunks = zli_optim_nchunks(n);
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t lo = k * ZLI_OPTIM_CHUNK;
        kernel(&c, lo, lo + ZLI_OPTIM_CHUNK < n ? lo + ZLI_OPTIM_CHUNK : n);
    }
    return ZL_OK;
}
