/* max_pool2d over x [N, C, H, W]. Padding counts as -inf, so a window is the max
 * of its part inside the image; forward keeps the position of each window's first
 * maximum and backward scatters the gradient there, one plane per thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../op_util.h"

typedef struct {
    int64_t h, w, kh, kw, oh, ow, sh, sw, ph, pw;
} pool_geom;

/* y [planes, oh, ow] [out] and arg [planes, oh, ow] [out] (flat position in
 * the plane) from x [planes, H, W]. */
static void pool_forward(const pool_geom *g, int64_t planes, const float *restrict x, float *restrict y,
                         int64_t *restrict arg)
{
    int64_t len = g->oh * g->ow;
    #pragma omp parallel for schedule(static) if (planes * len * g->kh * g->kw > ZLI_PAR_MIN && planes > 1)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * g->h * g->w;
        for (int64_t oi = 0; oi < g->oh; oi++) {
            int64_t h0 = oi * g->sh - g->ph, h1 = h0 + g->kh;
            if (h0 < 0) h0 = 0;
            if (h1 > g->h) h1 = g->h;
            for (int64_t oj = 0; oj < g->ow; oj++) {
                int64_t w0 = oj * g->sw - g->pw, w1 = w0 + g->kw;
                if (w0 < 0) w0 = 0;
                if (w1 > g->w) w1 = g->w;
                int64_t bi = h0 * g->w + w0;
                float best = xp[bi];
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) {
                        float v = xp[ih * g->w + iw];
                        if (v > best || (isnan(v) && !isnan(best))) { best = v; bi = ih * g->w + iw; }
                    }
                y[p * len + oi * g->ow + oj] = best;
                arg[p * len + oi * g->ow + oj] = bi;
            }
        }
    }
}

static zl_status pool_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    const int64_t *arg = n->ctx;
    int64_t planes = x->shape[0] * x->shape[1], hw = x->shape[2] * x->shape[3];
    int64_t len = n->out_shape[2] * n->out_shape[3];
    zl_tensor *gx = zli_new_f32(4, x->shape);
    if (!gx) return ZL_ENOMEM;
    float *px = zl_tensor_data(gx);
    const float *pg = zl_tensor_data(g);
    #pragma omp parallel for schedule(static) if (planes * (hw + len) > ZLI_PAR_MIN && planes > 1)
    for (int64_t p = 0; p < planes; p++) {
        float *dst = px + p * hw;
        memset(dst, 0, (size_t)hw * sizeof *dst);
        for (int64_t j = 0; j < len; j++) dst[arg[p * len + j]] += pg[p * len + j];
    }
    gin[0] = gx;
    return ZL_OK;
}

static zl_status pool_check(const zl_tensor *x, int kh, int kw, int sh, int sw, int ph, int pw, pool_geom *geo)
{
    char s[128];
    if (zli_need_float("max_pool2d", "input", x)) return ZL_EDTYPE;
    if (x->ndim != 4)
        return zl_error(ZL_ESHAPE, "max_pool2d: input must be 4-d [N, C, H, W], got shape %s",
                        zl_shape_str(x->ndim, x->shape, s, sizeof s));
    if (kh <= 0 || kw <= 0)
        return zl_error(ZL_EINVAL, "max_pool2d: kernel size must be positive, got (%d, %d)", kh, kw);
    if (x->shape[2] == 0 || x->shape[3] == 0)
        return zl_error(ZL_ESHAPE, "max_pool2d: the input's height and width must be positive, got %lldx%lld",
                        (long long)x->shape[2], (long long)x->shape[3]);
    if (sh <= 0 || sw <= 0) return zl_error(ZL_EINVAL, "max_pool2d: stride must be positive, got (%d, %d)", sh, sw);
    if (ph < 0 || pw < 0)
        return zl_error(ZL_EINVAL, "max_pool2d: padding must be non-negative, got (%d, %d)", ph, pw);
    /* Wider padding could leave a window with no element of the image in it. */
    if (2 * ph > kh || 2 * pw > kw)
        return zl_error(ZL_EINVAL, "max_pool2d: padding (%d, %d) must be at most half the kernel size (%d, %d)",
                        ph, pw, kh, kw);
    int64_t h = x->shape[2], w = x->shape[3];
    if (h + 2 * ph < kh || w + 2 * pw < kw)
        return zl_error(ZL_ESHAPE, "max_pool2d: output would be empty: input %lldx%lld with padding (%d, %d) is "
                        "smaller than the kernel %dx%d (stride (%d, %d); input %s)",
                        (long long)h, (long long)w, ph, pw, kh, kw, sh, sw,
                        zl_shape_str(x->ndim, x->shape, s, sizeof s));
    *geo = (pool_geom){.h = h, .w = w, .kh = kh, .kw = kw, .oh = (h + 2 * ph - kh) / sh + 1,
                       .ow = (w + 2 * pw - kw) / sw + 1, .sh = sh, .sw = sw, .ph = ph, .pw = pw};
    return ZL_OK;
}

zl_tensor *zl_max_pool2d(zl_tensor *x, int kh, int kw, int stride_h, int stride_w, int pad_h, int pad_w)
{
    if (zli_op_begin("max_pool2d", 1, &x)) return NULL;
    pool_geom geo;
    if (pool_check(x, kh, kw, stride_h, stride_w, pad_h, pad_w, &geo)) return zli_op_end("max_pool2d", 1, &x, NULL);
    int64_t planes = x->shape[0] * x->shape[1], nout = planes * geo.oh * geo.ow;
    zl_tensor *xf = zli_f32c(x);
    int64_t *arg = xf ? malloc((size_t)(nout ? nout : 1) * sizeof *arg) : NULL;
    zl_tensor *y = arg ? zli_new_f32(4, (int64_t[]){x->shape[0], x->shape[1], geo.oh, geo.ow}) : NULL;
    if (xf && !arg) zl_error(ZL_ENOMEM, "max_pool2d: out of memory");
    if (y) pool_forward(&geo, planes, zl_tensor_data(xf), zl_tensor_data(y), arg);
    zl_tensor_release(xf);
    y = zli_cast_result(y, x->dtype);
    zl_node *n = NULL;
    if (y && zli_record(y, "max_pool2d", pool_backward, 1, &x, &n)) { zl_tensor_release(y); y = NULL; }
    if (n) {
        n->ctx = arg;
        n->ctx_free = free;
    } else {
        free(arg);
    }
    return zli_op_end("max_pool2d", 1, &x, y);
}
