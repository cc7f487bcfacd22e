/* conv2d with stride, padding, dilation and groups, forward and backward:
 * im2col then one sgemm per image and group (a group's channels are a slice
 * of the image, its filters a slice of the weight). Images run in order so
 * BLAS threads each GEMM and the weight gradient sums over images in a fixed
 * order; im2col and col2im split rows or channels over OpenMP threads: the
 * CPU's fused kernels. A table without them (a GPU's) gets the same steps
 * composed of its im2col, col2im and GEMM (conv_device.c). */
#include <stdio.h>
#include <string.h>
#include "conv.h"
#include "gemm.h"

/* col [C*kh*kw, oh*ow] [out] from one image x [C, H, W] (C a group's
 * channels); tap (ki, kj) reads ki * dh, kj * dw past the window's corner;
 * padding reads as 0. */
static void im2col(const conv_geom *g, const float *restrict x, float *restrict col)
{
    int64_t rows = g->c * g->kh * g->kw, len = g->oh * g->ow;
    #pragma omp parallel for schedule(static) if (rows * len > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / (g->kh * g->kw), ki = r / g->kw % g->kh, kj = r % g->kw;
        const float *xc = x + c * g->h * g->w;
        for (int64_t oi = 0; oi < g->oh; oi++) {
            int64_t ih = oi * g->sh - g->ph + ki * g->dh;
            float *dst = col + r * len + oi * g->ow;
            if (ih < 0 || ih >= g->h) {
                for (int64_t oj = 0; oj < g->ow; oj++) dst[oj] = 0.0f;
                continue;
            }
            const float *src = xc + ih * g->w;
            for (int64_t oj = 0; oj < g->ow; oj++) {
                int64_t iw = oj * g->sw - g->pw + kj * g->dw;
                dst[oj] = iw >= 0 && iw < g->w ? src[iw] : 0.0f;
            }
        }
    }
}

/* gx [C, H, W] [out] = every entry of col [C*kh*kw, oh*ow] added onto the pixel
 * im2col read it from. One thread per channel, so each sum has a fixed order. */
static void col2im(const conv_geom *g, const float *restrict col, float *restrict gx)
{
    int64_t len = g->oh * g->ow;
    #pragma omp parallel for schedule(static) if (g->c * g->kh * g->kw * len > ZLI_PAR_MIN && g->c > 1)
    for (int64_t c = 0; c < g->c; c++) {
        float *plane = gx + c * g->h * g->w;
        memset(plane, 0, (size_t)(g->h * g->w) * sizeof *plane);
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                const float *src = col + ((c * g->kh + ki) * g->kw + kj) * len;
                for (int64_t oi = 0; oi < g->oh; oi++) {
                    int64_t ih = oi * g->sh - g->ph + ki * g->dh;
                    if (ih < 0 || ih >= g->h) continue;
                    float *dst = plane + ih * g->w;
                    for (int64_t oj = 0; oj < g->ow; oj++) {
                        int64_t iw = oj * g->sw - g->pw + kj * g->dw;
                        if (iw >= 0 && iw < g->w) dst[iw] += src[oi * g->ow + oj];
                    }
                }
            }
    }
}

/* The geometry node n recorded: i[0..5] stride, padding and dilation; the
 * weight's second dim is a group's channels. */
static conv_geom geom_of(const zl_node *n)
{
    const zl_tensor *x = n->inputs[0], *w = n->inputs[1];
    return (conv_geom){.c = w->shape[1], .h = x->shape[2], .w = x->shape[3], .kh = w->shape[2], .kw = w->shape[3],
                       .oh = n->out_shape[2], .ow = n->out_shape[3], .sh = n->i[0], .sw = n->i[1], .ph = n->i[2],
                       .pw = n->i[3], .dh = n->i[4], .dw = n->i[5]};
}

/* The CPU's fused backward (ops/cpu/kernels.h). */
zl_status zli_cpu_conv2d_backward(int index, zl_node *n, const conv_geom *gp, int64_t G, zl_tensor *g,
                                  zl_tensor **gin)
{
    (void)index;
    zl_tensor *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    conv_geom geo = *gp;
    int64_t N = x->shape[0], O = w->shape[0], Og = O / G, K = geo.c * geo.kh * geo.kw, len = geo.oh * geo.ow;
    int64_t gimg = geo.c * geo.h * geo.w, img = G * gimg;
    bool direct = zli_conv_is_direct(&geo);
    const float *pg = zl_tensor_data(g);
    zl_tensor *xf = zli_f32c(x), *wf = zli_f32c(w);
    bool need_col = !direct && (zli_requires_grad(x) || zli_requires_grad(w));
    zl_tensor *col = xf && wf && need_col ? zli_new_f32(2, (int64_t[]){K, len}) : NULL;
    zl_status st = xf && wf && (!need_col || col) ? ZL_OK : ZL_ENOMEM;
    float *pc = col ? zl_tensor_data(col) : NULL;
    const float *pw = wf ? zl_tensor_data(wf) : NULL;
    if (!st && zli_requires_grad(x)) {
        /* gcol [K, len] = w_gᵀ [K, Og] · g_n,g [Og, len], folded back onto the group's channels. */
        gin[0] = zli_new_f32(4, x->shape);
        if (gin[0]) {
            float *pgx = zl_tensor_data(gin[0]);
            for (int64_t i = 0; i < N; i++)
                for (int64_t grp = 0; grp < G; grp++) {
                    float *dst = direct ? pgx + i * img + grp * gimg : pc;
                    zli_sgemm(true, false, K, len, Og, 1.0f, pw + grp * Og * K, K, pg + (i * O + grp * Og) * len,
                              len, 0.0f, dst, len);
                    if (!direct) col2im(&geo, pc, pgx + i * img + grp * gimg);
                }
        } else {
            st = ZL_ENOMEM;
        }
    }
    if (!st && zli_requires_grad(w)) {
        /* gw_g [Og, K] = Σ_n g_n,g [Og, len] · col_n,gᵀ [len, K], images in order. */
        gin[1] = zl_tensor_new(ZL_DTYPE_F32, 4, w->shape, ZL_MEM_GRADS);
        if (gin[1]) {
            float *pgw = zl_tensor_data(gin[1]);
            if (N == 0) memset(pgw, 0, (size_t)(O * K) * sizeof *pgw);
            const float *px = zl_tensor_data(xf);
            for (int64_t i = 0; i < N; i++)
                for (int64_t grp = 0; grp < G; grp++) {
                    const float *src = px + i * img + grp * gimg;
                    if (!direct) im2col(&geo, src, pc);
                    zli_sgemm(false, true, Og, K, len, 1.0f, pg + (i * O + grp * Og) * len, len, direct ? src : pc,
                              len, i ? 1.0f : 0.0f, pgw + grp * Og * K, K);
                }
        } else {
            st = ZL_ENOMEM;
        }
    }
    if (!st && b && zli_requires_grad(b)) {
        gin[2] = zl_tensor_new(ZL_DTYPE_F32, 1, b->shape, ZL_MEM_GRADS);
        if (gin[2]) {
            float *pb = zl_tensor_data(gin[2]);
            #pragma omp parallel for schedule(static) if (N * O * len > ZLI_PAR_MIN && O > 1)
            for (int64_t o = 0; o < O; o++) {
                double s = 0.0;
                for (int64_t i = 0; i < N; i++) {
                    const float *row = pg + (i * O + o) * len;
                    for (int64_t j = 0; j < len; j++) s += row[j];
                }
                pb[o] = (float)s;
            }
        } else {
            st = ZL_ENOMEM;
        }
    }
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(col);
    return st;
}

/* A table's fused backward where it has one, else the composed one. */
static zl_status conv_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("conv2d backward", 1, n->inputs, &k, &index) < 0) return zli_last_code();
    conv_geom geo = geom_of(n);
    int64_t groups = n->i[6];
    if (k->conv2d_backward) return k->conv2d_backward(index, n, &geo, groups, g, gin);
    return zli_conv2d_backward_composed(k, index, n, &geo, groups, g, gin);
}

static zl_status conv_check(const zl_tensor *x, const zl_tensor *w, const zl_tensor *b, int sh, int sw, int ph,
                            int pw, int dh, int dw, int groups, conv_geom *geo)
{
    const char *op = "conv2d";
    char s1[128], s2[128];
    if (zli_need_float(op, "input", x) || zli_need_float(op, "weight", w) || (b && zli_need_float(op, "bias", b)))
        return ZL_EDTYPE;
    if (x->ndim != 4)
        return zl_error(ZL_ESHAPE, "conv2d: input must be 4-d [N, C, H, W], got shape %s",
                        zl_shape_str(x->ndim, x->shape, s1, sizeof s1));
    if (w->ndim != 4)
        return zl_error(ZL_ESHAPE, "conv2d: weight must be 4-d [O, C, kh, kw], got shape %s",
                        zl_shape_str(w->ndim, w->shape, s1, sizeof s1));
    if (groups <= 0) return zl_error(ZL_EINVAL, "conv2d: groups must be positive, got %d", groups);
    if (x->shape[1] % groups != 0 || w->shape[0] % groups != 0)
        return zli_shape_error(op, x->shape[1] % groups ? "the input's channels are not a multiple of groups"
                                                         : "the weight's output channels are not a multiple of groups",
                               x, w);
    if (x->shape[1] != w->shape[1] * groups) {
        char what[160];
        if (groups == 1)
            snprintf(what, sizeof what, "input has %lld channels but the weight expects %lld",
                     (long long)x->shape[1], (long long)w->shape[1]);
        else
            snprintf(what, sizeof what, "input has %lld channels but the weight expects %lld (%lld a group, %d groups)",
                     (long long)x->shape[1], (long long)(w->shape[1] * groups), (long long)w->shape[1], groups);
        return zli_shape_error(op, what, x, w);
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return zli_shape_error(op, "bias must be [O] for a weight [O, C, kh, kw]", b, w);
    if (sh <= 0 || sw <= 0) return zl_error(ZL_EINVAL, "conv2d: stride must be positive, got (%d, %d)", sh, sw);
    if (ph < 0 || pw < 0) return zl_error(ZL_EINVAL, "conv2d: padding must be non-negative, got (%d, %d)", ph, pw);
    if (dh <= 0 || dw <= 0) return zl_error(ZL_EINVAL, "conv2d: dilation must be positive, got (%d, %d)", dh, dw);
    int64_t h = x->shape[2], wd = x->shape[3], kh = w->shape[2], kw = w->shape[3];
    /* The span a dilated kernel covers. */
    int64_t eh = (int64_t)dh * (kh - 1) + 1, ew = (int64_t)dw * (kw - 1) + 1;
    if (h + 2 * ph < eh || wd + 2 * pw < ew) {
        char span[64] = "";
        if (dh != 1 || dw != 1) snprintf(span, sizeof span, " dilated to %lldx%lld", (long long)eh, (long long)ew);
        return zl_error(ZL_ESHAPE, "conv2d: output would be empty: input %lldx%lld with padding (%d, %d) is "
                        "smaller than the kernel %lldx%lld%s (stride (%d, %d); input %s, weight %s)",
                        (long long)h, (long long)wd, ph, pw, (long long)kh, (long long)kw, span, sh, sw,
                        zl_shape_str(x->ndim, x->shape, s1, sizeof s1), zl_shape_str(w->ndim, w->shape, s2, sizeof s2));
    }
    *geo = (conv_geom){.c = w->shape[1], .h = h, .w = wd, .kh = kh, .kw = kw,
                       .oh = (h + 2 * ph - eh) / sh + 1, .ow = (wd + 2 * pw - ew) / sw + 1,
                       .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = dh, .dw = dw};
    return ZL_OK;
}

/* The CPU's fused forward (ops/cpu/kernels.h): y f32, each image's rows
 * starting as the bias and the GEMMs added to them. */
zl_tensor *zli_cpu_conv2d(int index, const conv_geom *gp, int64_t G, const zl_tensor *xf, const zl_tensor *wf,
                          const zl_tensor *bf)
{
    (void)index;
    conv_geom geo = *gp;
    int64_t N = xf->shape[0], O = wf->shape[0], Og = O / G, K = geo.c * geo.kh * geo.kw;
    int64_t len = geo.oh * geo.ow, gimg = geo.c * geo.h * geo.w, img = G * gimg;
    bool direct = zli_conv_is_direct(&geo);
    zl_tensor *col = !direct ? zli_new_f32(2, (int64_t[]){K, len}) : NULL;
    zl_tensor *y = direct || col ? zli_new_f32(4, (int64_t[]){N, O, geo.oh, geo.ow}) : NULL;
    if (y) {
        const float *px = zl_tensor_data(xf), *pw = zl_tensor_data(wf), *pb = bf ? zl_tensor_data(bf) : NULL;
        float *py = zl_tensor_data(y), *pc = col ? zl_tensor_data(col) : NULL;
        for (int64_t i = 0; i < N; i++) {
            float *yi = py + i * O * len;
            if (pb)
                for (int64_t o = 0; o < O; o++)
                    for (int64_t j = 0; j < len; j++) yi[o * len + j] = pb[o];
            for (int64_t grp = 0; grp < G; grp++) {
                const float *src = px + i * img + grp * gimg;
                if (!direct) im2col(&geo, src, pc);
                zli_sgemm(false, false, Og, len, K, 1.0f, pw + grp * Og * K, K, direct ? src : pc, len,
                          pb ? 1.0f : 0.0f, yi + grp * Og * len, len);
            }
        }
    }
    zl_tensor_release(col);
    return y;
}

zl_tensor *zl_conv2d(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w, int pad_h, int pad_w)
{
    return zl_conv2d_ex(x, w, b, stride_h, stride_w, pad_h, pad_w, 1, 1, 1);
}

zl_tensor *zl_conv2d_ex(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w, int pad_h, int pad_w,
                        int dilation_h, int dilation_w, int groups)
{
    zl_tensor *in[3] = {x, w, b};
    int nin = b ? 3 : 2;
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin("conv2d", nin, in)) return NULL;
    if (zli_op_device("conv2d", nin, in, &k, &index) < 0) return zli_op_end("conv2d", nin, in, NULL);
    /* The input and the weight in the one memory; a one-element bias may come from the host. */
    const zl_tensor *home = zli_op_home(nin, in);
    if (zli_same_device("conv2d", home, x) || zli_same_device("conv2d", home, w))
        return zli_op_end("conv2d", nin, in, NULL);
    conv_geom geo;
    if (conv_check(x, w, b, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, &geo))
        return zli_op_end("conv2d", nin, in, NULL);
    zl_tensor *xf = zli_f32c(x), *wf = zli_f32c(w), *bf = b ? zli_f32c_like(b, x) : NULL, *y = NULL;
    if (xf && wf && (!b || bf))
        y = k->conv2d ? k->conv2d(index, &geo, groups, xf, wf, bf) : zli_conv2d_composed(k, index, &geo, groups, xf, wf, bf);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(bf);
    y = zli_cast_result(y, zli_promote(x->dtype, w->dtype));
    zl_node *n;
    if (y && zli_record(y, "conv2d", conv_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    else if (y && n) {
        n->i[0] = stride_h; n->i[1] = stride_w;
        n->i[2] = pad_h; n->i[3] = pad_w;
        n->i[4] = dilation_h; n->i[5] = dilation_w;
        n->i[6] = groups;
    }
    return zli_op_end("conv2d", nin, in, y);
}
