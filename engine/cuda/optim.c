/* The optim layer's table for CUDA devices (optim/device_optim.h): the fused
 * multi-tensor optimizers of kernels/optim.cu and the gradient passes of
 * kernels/grad.cu, their constants made once on the host by math/optim.h,
 * scratch from the caching allocator. Launches go to the default stream;
 * what comes back to the host is copied after them, which waits. */
#include <stdlib.h>
#include "cuda_impl.h"
#include "kernels/kernels.h"
#include "../optim/device_optim.h"

/* A launch takes one gradient dtype and one half dtype: buffers in a run share them. */
static int half_key(const zl_optim_buf *b) { return b->p_half ? (int)b->half_dtype : -1; }

static int run_end(const zl_optim_buf *b, int n, int a)
{
    int e = a + 1;
    while (e < n && b[e].g_dtype == b[a].g_dtype && half_key(&b[e]) == half_key(&b[a])) e++;
    return e;
}

static zlk_optim_tensor *tensors_of(const char *what, const zl_optim_buf *b, int n)
{
    zlk_optim_tensor *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    if (!t) {
        zl_error(ZL_ENOMEM, "%s: out of memory for a list of %d tensors", what, n);
        return NULL;
    }
    for (int k = 0; k < n; k++)
        t[k] = (zlk_optim_tensor){.p = b[k].p, .g = b[k].g, .m = b[k].m, .v = b[k].v, .p_half = b[k].p_half,
                                  .n = b[k].n};
    return t;
}

/* One launch over the tensors of a run; consts is the optimizer's. */
typedef int (*run_fn)(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const void *consts);

static zl_status each_run(int index, const char *what, const zl_optim_buf *b, int n, run_fn fn, const void *consts)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlk_optim_tensor *t = tensors_of(what, b, n);
    if (!t) return ZL_ENOMEM;
    zl_status st = ZL_OK;
    for (int a = 0; a < n && !st;) {
        int e = run_end(b, n, a);
        int hdt = b[a].p_half ? (int)b[a].half_dtype : ZLM_BF16;
        st = zli_cuda_done(index, what, fn(t + a, e - a, (int)b[a].g_dtype, hdt, consts));
        a = e;
    }
    free(t);
    return st;
}

static int adam_run(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const void *consts)
{
    return zlk_cuda_adam(t, nt, gdt, hdt, consts, NULL);
}

static zl_status adam(int index, const zl_optim_adam *hp, const zl_optim_buf *b, int n)
{
    zlm_adam_consts c = zlm_adam_make(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->adamw_mode,
                                      hp->bias_correction, hp->step, hp->grad_scale);
    return each_run(index, "optim.adam", b, n, adam_run, &c);
}

static int sgd_run(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const void *consts)
{
    return zlk_cuda_sgd(t, nt, gdt, hdt, consts, NULL);
}

static zl_status sgd(int index, const zl_optim_sgd *hp, const zl_optim_buf *b, int n)
{
    zlm_sgd_consts c = zlm_sgd_make(hp->lr, hp->momentum, hp->dampening, hp->weight_decay, hp->nesterov, hp->step,
                                    hp->grad_scale);
    return each_run(index, "optim.sgd", b, n, sgd_run, &c);
}

/* Device scratch of n bytes, charged to cat; NULL with the allocator's error. */
static zl_tensor *scratch(int64_t n, zl_mem_category cat, int index)
{
    return zli_cuda_new(ZL_DTYPE_U8, 1, &n, cat, index);
}

static zl_status lamb_moments(int index, const zl_optim_lamb *hp, const zl_optim_buf *b, int n, double *sq)
{
    const char *what = "optim.lamb";
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_lamb_consts c = zlm_lamb_make(hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->grad_scale);
    zlk_optim_tensor *t = tensors_of(what, b, n);
    zl_tensor *work = t ? scratch((ZLK_LAMB_WORK(n) + 2 * (int64_t)n) * 8, ZL_MEM_OPTIMIZER, index) : NULL;
    zl_status st = work ? ZL_OK : zli_last_code();
    double *w = work ? zl_tensor_data(work) : NULL, *dsq = w ? w + ZLK_LAMB_WORK(n) : NULL;
    for (int a = 0; a < n && !st;) {
        int e = run_end(b, n, a);
        st = zli_cuda_done(index, what, zlk_cuda_lamb_moments(t + a, e - a, (int)b[a].g_dtype, &c, w, dsq + 2 * a,
                                                              NULL));
        a = e;
    }
    if (!st && n > 0) st = zli_cuda_copy(sq, dsq, (size_t)n * 2 * sizeof *sq, ZLI_D2H, index);
    zl_tensor_release(work);
    free(t);
    return st;
}

static zl_status lamb_apply(int index, const zl_optim_lamb *hp, const zl_optim_buf *b, int n, const double *ratio)
{
    const char *what = "optim.lamb";
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_lamb_consts c = zlm_lamb_make(hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->grad_scale);
    zlk_optim_tensor *t = tensors_of(what, b, n);
    float *rate = t ? malloc((size_t)(n > 0 ? n : 1) * sizeof *rate) : NULL;
    zl_tensor *drate = rate ? scratch((int64_t)n * 4, ZL_MEM_OPTIMIZER, index) : NULL;
    zl_status st = drate ? ZL_OK : t && !rate ? zl_error(ZL_ENOMEM, "%s: out of memory", what) : zli_last_code();
    if (!st) {
        for (int k = 0; k < n; k++)
            rate[k] = zlm_lamb_neg_rate(hp->lr, hp->beta1, hp->beta2, hp->bias_correction, hp->step, ratio[k]);
        st = zli_cuda_copy(zl_tensor_data(drate), rate, (size_t)n * sizeof *rate, ZLI_H2D, index);
    }
    const float *dr = drate ? zl_tensor_data(drate) : NULL;
    for (int a = 0; a < n && !st;) {
        int e = run_end(b, n, a);
        int hdt = b[a].p_half ? (int)b[a].half_dtype : ZLM_BF16;
        st = zli_cuda_done(index, what, zlk_cuda_lamb_apply(t + a, e - a, hdt, &c, dr + a, NULL));
        a = e;
    }
    zl_tensor_release(drate);
    free(rate);
    free(t);
    return st;
}

static zl_status nonfinite(int index, const zli_dev_span *s, int n, bool *found)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zl_tensor *flag = scratch(sizeof(int), ZL_MEM_OTHER, index);
    if (!flag) return zli_last_code();
    int *df = zl_tensor_data(flag), hf = 0;
    zl_status st = zli_cuda_memset0(df, sizeof *df, index);
    for (int k = 0; k < n && !st; k++)
        st = zli_cuda_done(index, "grad_nonfinite", zlk_cuda_nonfinite(s[k].x, (int)s[k].dt, s[k].n, df, NULL));
    if (!st) st = zli_cuda_copy(&hf, df, sizeof hf, ZLI_D2H, index);
    zl_tensor_release(flag);
    if (!st) *found = hf != 0;
    return st;
}

static zl_status sumsq(int index, const zli_dev_span *s, int n, double *part)
{
    if (zli_cuda_use(index)) return zli_last_code();
    int64_t total = 0, most = 0;
    for (int k = 0; k < n; k++) {
        int64_t c = ZLK_SUMSQ_CHUNKS(s[k].n);
        total += c;
        most = c > most ? c : most;
    }
    if (total == 0) return ZL_OK;
    zl_tensor *work = scratch((total + most * ZLM_SUMSQ_LANES) * 8, ZL_MEM_OTHER, index);
    if (!work) return zli_last_code();
    double *dpart = zl_tensor_data(work), *lanes = dpart + total;
    zl_status st = ZL_OK;
    int64_t at = 0;
    for (int k = 0; k < n && !st; k++) {
        st = zli_cuda_done(index, "grad_norm_sq", zlk_cuda_sumsq(s[k].x, (int)s[k].dt, s[k].n, lanes, dpart + at,
                                                                 NULL));
        at += ZLK_SUMSQ_CHUNKS(s[k].n);
    }
    if (!st) st = zli_cuda_copy(part, dpart, (size_t)total * sizeof *part, ZLI_D2H, index);
    zl_tensor_release(work);
    return st;
}

static zl_status scale(int index, const zli_dev_span *s, int n, float f)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zl_status st = ZL_OK;
    for (int k = 0; k < n && !st; k++)
        st = zli_cuda_done(index, "grad_scale", zlk_cuda_scale(s[k].x, (int)s[k].dt, s[k].n, f, NULL));
    return st;
}

const zli_dev_optim zli_cuda_optim = {
    .adam = adam, .sgd = sgd, .lamb_moments = lamb_moments, .lamb_apply = lamb_apply,
    .nonfinite = nonfinite, .sumsq = sumsq, .scale = scale,
};
