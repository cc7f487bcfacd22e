/* conv2d composed of a kernel table's im2col and col2im around its GEMM (a
 * GPU's, which has no fused conv2d), one image and group at a time as the
 * CPU's fused kernels go, the weight gradient summed
 * over images in order through core's add, the bias gradient by its own
 * kernel. */
#include "conv.h"

/* col [K, len] on xf's device, or NULL for a direct (1x1) convolution. */
static zl_status col_buffer(const conv_geom *g, const zl_tensor *xf, zl_tensor **col)
{
    *col = NULL;
    if (zli_conv_is_direct(g)) return ZL_OK;
    *col = zli_new_f32_like(xf, 2, (int64_t[]){g->c * g->kh * g->kw, g->oh * g->ow});
    return *col ? ZL_OK : ZL_ENOMEM;
}

/* Group grp of image i of xf as a column matrix [K, len]: the group's
 * channels themselves when direct, else im2col'd into col. */
static zl_status columns_of(const zli_dev_kernels *k, int index, const conv_geom *g, int64_t groups,
                            const zl_tensor *xf, int64_t i, int64_t grp, zl_tensor *col, const float **src)
{
    int64_t gimg = g->c * g->h * g->w;
    *src = (const float *)zl_tensor_data(xf) + (i * groups + grp) * gimg;
    if (!col) return ZL_OK;
    zl_status st = k->im2col(index, g, *src, zl_tensor_data(col));
    *src = zl_tensor_data(col);
    return st;
}

zl_tensor *zli_conv2d_composed(const zli_dev_kernels *k, int index, const conv_geom *g, int64_t groups,
                             const zl_tensor *xf, const zl_tensor *wf, const zl_tensor *bf)
{
    int64_t N = xf->shape[0], O = wf->shape[0], Og = O / groups, K = g->c * g->kh * g->kw, len = g->oh * g->ow;
    zl_tensor *col, *y = NULL;
    zl_status st = col_buffer(g, xf, &col);
    if (!st && !(y = zli_new_f32_like(xf, 4, (int64_t[]){N, O, g->oh, g->ow}))) st = ZL_ENOMEM;
    for (int64_t i = 0; !st && i < N; i++)
        for (int64_t grp = 0; !st && grp < groups; grp++) {
            const float *src;
            st = columns_of(k, index, g, groups, xf, i, grp, col, &src);
            if (!st)
                st = k->gemm(index, false, false, Og, len, K, (const float *)zl_tensor_data(wf) + grp * Og * K, K,
                             src, len, (float *)zl_tensor_data(y) + (i * O + grp * Og) * len, len);
        }
    if (!st && bf) {
        /* The bias over each channel's plane: core's add, broadcast. */
        zl_tensor *bv = zli_view_of(bf, 3, (int64_t[]){O, 1, 1}, (int64_t[]){1, 1, 1}, bf->offset);
        st = bv ? zli_add(y, bv, 1.0) : ZL_ENOMEM;
        zl_tensor_release(bv);
    }
    zl_tensor_release(col);
    if (st) {
        zl_tensor_release(y);
        return NULL;
    }
    return y;
}

/* gx [N, C, H, W] [out]: per image and group gcol [K, len] = w_gᵀ [K, Og] ·
 * g_i,g [Og, len], folded back onto the group's channels (or written there,
 * when direct). */
static zl_status grad_x(const zli_dev_kernels *k, int index, const conv_geom *g, int64_t groups, const zl_tensor *x,
                        const zl_tensor *wf, const zl_tensor *gc, zl_tensor *col, zl_tensor **gx)
{
    int64_t N = x->shape[0], O = wf->shape[0], Og = O / groups, K = g->c * g->kh * g->kw, len = g->oh * g->ow;
    int64_t gimg = g->c * g->h * g->w;
    *gx = zli_new_f32_like(gc, 4, x->shape);
    zl_status st = *gx ? ZL_OK : ZL_ENOMEM;
    for (int64_t i = 0; !st && i < N; i++)
        for (int64_t grp = 0; !st && grp < groups; grp++) {
            float *dst = (float *)zl_tensor_data(*gx) + (i * groups + grp) * gimg;
            const float *gi = (const float *)zl_tensor_data(gc) + (i * O + grp * Og) * len;
            st = k->gemm(index, true, false, K, len, Og, (const float *)zl_tensor_data(wf) + grp * Og * K, K, gi, len,
                         col ? zl_tensor_data(col) : dst, len);
            if (!st && col) st = k->col2im(index, g, zl_tensor_data(col), dst);
        }
    return st;
}

/* gw [O, C / groups, kh, kw] [out] = Σ_i g_i [O, len] · col_iᵀ [len, K] per
 * group: image 0's products written, each later image's added by core's
 * add, images in order. */
static zl_status grad_w(const zli_dev_kernels *k, int index, const conv_geom *g, int64_t groups,
                        const zl_tensor *xf, const zl_tensor *w, const zl_tensor *gc, zl_tensor *col, zl_tensor **gw)
{
    int64_t N = xf->shape[0], O = w->shape[0], Og = O / groups, K = g->c * g->kh * g->kw, len = g->oh * g->ow;
    *gw = zli_new_f32_like(gc, 4, w->shape);
    zl_tensor *part = *gw && N > 1 ? zli_new_f32_like(gc, 4, w->shape) : NULL;
    zl_status st = *gw && (N <= 1 || part) ? ZL_OK : ZL_ENOMEM;
    if (!st) zl_tensor_set_category(*gw, ZL_MEM_GRADS);
    if (!st && N == 0) st = zl_tensor_fill(*gw, 0.0);
    for (int64_t i = 0; !st && i < N; i++) {
        zl_tensor *dst = i ? part : *gw;
        for (int64_t grp = 0; !st && grp < groups; grp++) {
            const float *src;
            st = columns_of(k, index, g, groups, xf, i, grp, col, &src);
            if (!st)
                st = k->gemm(index, false, true, Og, K, len,
                             (const float *)zl_tensor_data(gc) + (i * O + grp * Og) * len, len, src, len,
                             (float *)zl_tensor_data(dst) + grp * Og * K, K);
        }
        if (!st && i) st = zli_add(*gw, part, 1.0);
    }
    zl_tensor_release(part);
    return st;
}

zl_status zli_conv2d_backward_composed(const zli_dev_kernels *k, int index, zl_node *n, const conv_geom *g,
                                       int64_t groups, zl_tensor *grad, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    bool need_col = zli_requires_grad(x) || zli_requires_grad(w);
    zl_tensor *gc = zli_f32c(grad), *wf = gc ? zli_f32c(w) : NULL, *xf = wf ? zli_f32c(x) : NULL, *col = NULL;
    zl_status st = xf ? ZL_OK : ZL_ENOMEM;
    if (!st && need_col) st = col_buffer(g, xf, &col);
    if (!st && zli_requires_grad(x)) st = grad_x(k, index, g, groups, x, wf, gc, col, &gin[0]);
    if (!st && zli_requires_grad(w)) st = grad_w(k, index, g, groups, xf, w, gc, col, &gin[1]);
    if (!st && b && zli_requires_grad(b)) {
        gin[2] = zli_new_f32_like(gc, 1, b->shape);
        if (gin[2]) zl_tensor_set_category(gin[2], ZL_MEM_GRADS);
        st = gin[2] ? k->conv_bias_backward(index, x->shape[0], w->shape[0], g->oh * g->ow, zl_tensor_data(gc),
                                            zl_tensor_data(gin[2]))
                    : ZL_ENOMEM;
    }
    zl_tensor_release(col);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(gc);
    return st;
}
