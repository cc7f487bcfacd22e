/* The ops layer's kernel table for CUDA devices (ops/device_kernels.h): each
 * entry launches its kernel from kernels/ on its buffers in the default
 * stream's order (zli_cuda_done says when a fault is seen). */
#include "cuda_impl.h"
#include "kernels/kernels.h"
#include "../ops/device_kernels.h"

static zl_status unary(int index, int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0, float p1)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "unary op", zlk_cuda_unary_forward(kind, n, x, xdt, y, ydt, p0, p1, NULL));
}

static zl_status unary_backward(int index, int kind, int64_t n, const void *x, int xdt, const void *y, int ydt,
                                const void *g, int gdt, float *gx, float p0, float p1)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "unary op backward",
                         zlk_cuda_unary_backward(kind, n, x, xdt, y, ydt, g, gdt, gx, p0, p1, NULL));
}

static zlk_bcast bcast_of(int ndim, const int64_t *shape, const int64_t *sa, const int64_t *sb)
{
    zlk_bcast bc = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) {
        bc.shape[i] = shape[i];
        bc.sa[i] = sa[i];
        bc.sb[i] = sb[i];
    }
    return bc;
}

static zl_status binary(int index, int kind, int ndim, const int64_t *shape, const int64_t *sa, const int64_t *sb,
                        const void *a, int adt, const void *b, int bdt, void *out, int odt)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlk_bcast bc = bcast_of(ndim, shape, sa, sb);
    return zli_cuda_done(index, "binary op", zlk_cuda_binary_forward(kind, &bc, a, adt, b, bdt, out, odt, NULL));
}

static zl_status binary_int(int index, int kind, int ndim, const int64_t *shape, const int64_t *sa, const int64_t *sb,
                            const void *a, int adt, const void *b, int bdt, void *out, int odt)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlk_bcast bc = bcast_of(ndim, shape, sa, sb);
    return zli_cuda_done(index, "binary op on integers",
                         zlk_cuda_binary_int_forward(kind, &bc, a, adt, b, bdt, out, odt, NULL));
}

static zl_status sum_to(int index, int nd, const int64_t *shape, const int *red, const float *g, float *out,
                        int64_t nout)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "sum to shape", zlk_cuda_sum_to(nd, shape, red, g, out, nout, NULL));
}

static zl_status softmax(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *x, int xdt,
                         void *y, int ydt)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "softmax", zlk_cuda_softmax_forward(is_log, outer, d, inner, x, xdt, y, ydt, NULL));
}

static zl_status softmax_backward(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *y,
                                  int ydt, const void *g, int gdt, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "softmax backward",
                         zlk_cuda_softmax_backward(is_log, outer, d, inner, y, ydt, g, gdt, gx, NULL));
}

static zl_status ce_forward(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                            int64_t ignore, const zlm_ce_opts *o, float *lse, float *loss)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "cross_entropy",
                         zlk_cuda_cross_entropy_forward(rows, ncls, x, xdt, target, ignore, o, lse, loss, NULL));
}

static zl_status ce_backward(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                             int64_t ignore, const zlm_ce_opts *o, const float *lse, const float *g,
                             int64_t g_stride, float k, const float *count, int gdt, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "cross_entropy backward",
                         zlk_cuda_cross_entropy_backward(rows, ncls, x, xdt, target, ignore, o, lse, g, g_stride, k,
                                                         count, gdt, gx, NULL));
}

static zl_status ce_targets(int index, int64_t rows, int64_t ncls, int64_t *target, int64_t ignore,
                            zlm_index_fault *fault, float *counted)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "cross_entropy",
                         zlk_cuda_cross_entropy_targets(rows, ncls, target, ignore, fault, counted, NULL));
}

static zl_status ln_forward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                            const void *b, int bdt, double eps, void *y, int ydt, float *mean, float *rstd)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "layer_norm",
                         zlk_cuda_layer_norm_forward(rows, m, x, xdt, w, wdt, b, bdt, eps, y, ydt, mean, rstd, NULL));
}

static zl_status ln_backward_x(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                               const float *mean, const float *rstd, const void *g, int gdt, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "layer_norm backward",
                         zlk_cuda_layer_norm_backward_x(rows, m, x, xdt, w, wdt, mean, rstd, g, gdt, gx, NULL));
}

static zl_status ln_backward_wb(int index, int64_t rows, int64_t m, const void *x, int xdt, const float *mean,
                                const float *rstd, const void *g, int gdt, float *gw, float *gb)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "layer_norm backward",
                         zlk_cuda_layer_norm_backward_wb(rows, m, x, xdt, mean, rstd, g, gdt, gw, gb, NULL));
}

static zl_status rms_forward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                             int rdt, double eps, void *y, int ydt, float *rstd)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "rms_norm",
                         zlk_cuda_rms_norm_forward(rows, m, x, xdt, w, wdt, rdt, eps, y, ydt, rstd, NULL));
}

static zl_status rms_backward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                              int rdt, const float *rstd, const void *g, int gdt, float *gx, float *gw, double *part)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "rms_norm backward",
                         zlk_cuda_rms_norm_backward(rows, m, x, xdt, w, wdt, rdt, rstd, g, gdt, gx, gw, part, NULL));
}

static zl_status emb_forward(int index, int64_t n, int64_t v, int64_t d, int es, const int64_t *idx, const void *w,
                             void *out, zlm_index_fault *fault)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "embedding", zlk_cuda_embedding_forward(n, v, d, es, idx, w, out, fault, NULL));
}

static zl_status emb_backward(int index, int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad,
                              const float *g, float *gw, bool accumulate)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "embedding backward",
                         zlk_cuda_embedding_backward(n, v, d, idx, pad, g, ZLM_F32, gw, accumulate, NULL));
}

static zl_status rotary(int index, int nd, const int64_t *shape, const float *a, const int64_t *as, const float *c,
                        const int64_t *cs, const float *s, const int64_t *ss, bool backward, float *y)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "rotary", zlk_cuda_rotary(nd, shape, a, as, c, cs, s, ss, backward, y, NULL));
}

static zl_status att_softmax(int index, int64_t rows, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                             const zlm_view *mv, float *s)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "attention", zlk_cuda_attention_softmax(rows, tq, tk, causal, mask, mv, s, NULL));
}

static zl_status att_softmax_backward(int index, int64_t rows, int64_t tk, float *dp, const float *p)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "attention backward", zlk_cuda_attention_softmax_backward(rows, tk, dp, p, NULL));
}

static zl_status flash_forward(int index, int dt, const int64_t *dims, bool causal, float scale, const void *q,
                               const void *k, const void *v, void *out, float *lse, bool *done)
{
    if (zli_cuda_use(index)) return zli_last_code();
    const void *bufs[] = {q, k, v, out, lse};
    *done = zlk_cuda_flash_takes(dt, dims[ZLI_ATT_D], dims[ZLI_ATT_DV], dims[ZLI_ATT_TQ], dims[ZLI_ATT_TK], bufs, 5);
    if (!*done) return ZL_OK;
    return zli_cuda_done(index, "attention", zlk_cuda_flash_forward(dt, dims, causal, scale, q, k, v, out, lse, NULL));
}

static zl_status flash_backward(int index, int dt, const int64_t *dims, bool causal, float scale, const void *q,
                                const void *k, const void *v, const void *out, const void *dout, const float *lse,
                                float *delta, float *dq, float *dk, float *dv)
{
    if (zli_cuda_use(index)) return zli_last_code();
    const void *bufs[] = {q, k, v, out, dout, lse, delta, dq ? dq : q, dk ? dk : q, dv ? dv : q};
    if (!zlk_cuda_flash_takes(dt, dims[ZLI_ATT_D], dims[ZLI_ATT_DV], dims[ZLI_ATT_TQ], dims[ZLI_ATT_TK], bufs, 10))
        return zl_error(ZL_EINVAL, "attention backward: the flash kernels do not take these buffers");
    return zli_cuda_done(index, "attention backward",
                         zlk_cuda_flash_backward(dt, dims, causal, scale, q, k, v, out, dout, lse, delta, dq, dk, dv,
                                                 NULL));
}

static zl_status dropout(int index, int64_t n, uint64_t seed, uint64_t offset, float p, float scale, const float *x,
                         uint8_t *keep, float *y)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "dropout", zlk_cuda_dropout_forward(n, seed, offset, p, scale, x, keep, y, NULL));
}

static zl_status dropout_backward(int index, int64_t n, const uint8_t *keep, const float *g, float scale, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "dropout backward", zlk_cuda_dropout_backward(n, keep, g, scale, gx, NULL));
}

static zl_status reduce_dim(int index, int kind, int64_t outer, int64_t d, int64_t inner, const float *x, float *out,
                            int64_t *idx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "reduction", zlk_cuda_reduce_dim(kind, outer, d, inner, x, out, idx, NULL));
}

static zl_status reduce_all(int index, double div, const float *count, int64_t n, const float *x, double *work,
                            float *out)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "sum", zlk_cuda_reduce_all(div, count, n, x, work, out, NULL));
}

static zl_status cumsum(int index, int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x, float *out)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "cumsum", zlk_cuda_cumsum(outer, len, inner, reverse, x, out, NULL));
}

static zl_status var(int index, int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red, const float *x,
                     double correction, bool is_std, double *mean, double *m2, float *out)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, is_std ? "std" : "var",
                         zlk_cuda_var(nout, count, kept, red, x, correction, is_std, mean, m2, out, NULL));
}

static zl_status var_backward(int index, int64_t n, const zlm_view *ov, int64_t count, const float *x, const float *g,
                              const double *mean, const double *m2, double correction, bool is_std, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, is_std ? "std backward" : "var backward",
                         zlk_cuda_var_backward(n, ov, count, x, g, mean, m2, correction, is_std, gx, NULL));
}

static zl_status reduce_backward(int index, int kind, int64_t outer, int64_t len, int64_t inner, const float *g,
                                 const int64_t *idx, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "reduction backward",
                         zlk_cuda_reduce_backward(kind, outer, len, inner, g, idx, gx, NULL));
}

static zl_status select_(int index, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *sc,
                         const void *a, const int64_t *sa, const void *b, const int64_t *sb, int es, void *out)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_select s = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) {
        s.shape[i] = shape[i];
        s.sc[i] = sc[i];
        s.sa[i] = sa[i];
        s.sb[i] = sb[i];
    }
    return zli_cuda_done(index, "where", zlk_cuda_select(&s, cond, a, b, es, out, NULL));
}

static zl_status gather(int index, const zlm_view *v, int64_t sd, int64_t len, int dim, int64_t n, const int64_t *idx,
                        const void *x, int es, void *out, zlm_index_fault *fault)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "gather", zlk_cuda_gather(v, sd, len, dim, n, idx, x, es, out, fault, NULL));
}

static zl_status gather_backward(int index, const zlm_view *v, int64_t sd, int64_t len, int64_t nfib, int64_t md,
                                 int64_t inner, const int64_t *idx, const float *g, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "gather backward",
                         zlk_cuda_gather_backward(v, sd, len, nfib, md, inner, idx, g, gx, NULL));
}

static zl_status scatter(int index, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len, int dim,
                         int64_t nfib, int64_t md, int64_t inner, const int64_t *idx, const void *src, int wdt,
                         void *out, zlm_index_fault *fault)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, add ? "scatter_add" : "scatter",
                         zlk_cuda_scatter(add, xv, sv, sd, len, dim, nfib, md, inner, idx, src, wdt, out, fault, NULL));
}

static zl_status scatter_backward(int index, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd,
                                  int64_t len, int64_t nfib, int64_t md, int64_t inner, const int64_t *idx,
                                  const float *g, float *gx, float *gs)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "scatter backward",
                         zlk_cuda_scatter_backward(add, xv, sv, sd, len, nfib, md, inner, idx, g, gx, gs, NULL));
}

static zl_status index_select(int index, int64_t outer, int64_t len, int64_t m, int64_t inner, int es,
                              const int64_t *idx, const void *x, void *out, zlm_index_fault *fault, int dim)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "index_select",
                         zlk_cuda_index_select_forward(outer, len, m, inner, es, idx, x, out, fault, dim, NULL));
}

static zl_status index_select_backward(int index, int64_t outer, int64_t len, int64_t m, int64_t inner,
                                       const int64_t *idx, const float *g, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "index_select backward",
                         zlk_cuda_index_select_backward(outer, len, m, inner, idx, g, gx, NULL));
}

static zl_status mse_forward(int index, int64_t n, const float *x, const float *t, float *sq)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "mse_loss", zlk_cuda_mse_forward(n, x, t, sq, NULL));
}

static zl_status mse_backward(int index, int64_t n, const float *x, const float *t, const float *g, int64_t g_stride,
                              float k, float *gx, float *gt)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "mse_loss backward", zlk_cuda_mse_backward(n, x, t, g, g_stride, k, gx, gt, NULL));
}

static zlm_window window_of(const zli_dev_window *w)
{
    return (zlm_window){.c = w->c, .h = w->h, .w = w->w, .kh = w->kh, .kw = w->kw, .oh = w->oh, .ow = w->ow,
                        .sh = w->sh, .sw = w->sw, .ph = w->ph, .pw = w->pw, .dh = w->dh, .dw = w->dw};
}

static zl_status pool_forward(int index, const zli_dev_window *w, int64_t planes, const float *x, float *y,
                              int64_t *arg)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_window g = window_of(w);
    return zli_cuda_done(index, "max_pool2d", zlk_cuda_max_pool_forward(&g, planes, x, y, arg, NULL));
}

static zl_status pool_backward(int index, const zli_dev_window *w, int64_t planes, const int64_t *arg,
                               const float *gy, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_window g = window_of(w);
    return zli_cuda_done(index, "max_pool2d backward", zlk_cuda_max_pool_backward(&g, planes, arg, gy, gx, NULL));
}

static zl_status avg_pool_forward(int index, const zli_dev_window *w, int64_t planes, bool count_pad, const float *x,
                                  float *y)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_window g = window_of(w);
    return zli_cuda_done(index, "avg_pool2d", zlk_cuda_avg_pool_forward(&g, planes, count_pad, x, y, NULL));
}

static zl_status avg_pool_backward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                   const float *gy, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_window g = window_of(w);
    return zli_cuda_done(index, "avg_pool2d backward", zlk_cuda_avg_pool_backward(&g, planes, count_pad, gy, gx, NULL));
}

static zl_status im2col(int index, const zli_dev_window *w, const float *x, float *col)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_window g = window_of(w);
    return zli_cuda_done(index, "conv2d im2col", zlk_cuda_im2col(&g, x, col, NULL));
}

static zl_status col2im(int index, const zli_dev_window *w, const float *col, float *gx)
{
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_window g = window_of(w);
    return zli_cuda_done(index, "conv2d col2im", zlk_cuda_col2im(&g, col, gx, NULL));
}

static zl_status conv_bias_backward(int index, int64_t n, int64_t nout, int64_t len, const float *g, float *gb)
{
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, "conv2d bias backward", zlk_cuda_conv_bias_grad(n, nout, len, g, gb, NULL));
}

const zli_dev_kernels zli_cuda_kernels = {
    .halves = true, .gemm_f16 = true,
    .binary_int = binary_int,
    .pool_forward = pool_forward, .pool_backward = pool_backward, .avg_pool_forward = avg_pool_forward,
    .avg_pool_backward = avg_pool_backward, .im2col = im2col, .col2im = col2im,
    .conv_bias_backward = conv_bias_backward,
    .mse_forward = mse_forward, .mse_backward = mse_backward,
    .index_select = index_select, .index_select_backward = index_select_backward, .gather = gather,
    .gather_backward = gather_backward, .scatter = scatter, .scatter_backward = scatter_backward,
    .emb_forward = emb_forward, .emb_backward = emb_backward, .index_faults = zli_cuda_index_faults, .rotary = rotary,
    .ce_forward = ce_forward, .ce_backward = ce_backward, .ce_targets = ce_targets, .ln_forward = ln_forward,
    .ln_backward_x = ln_backward_x, .ln_backward_wb = ln_backward_wb, .rms_forward = rms_forward,
    .rms_backward = rms_backward,
    .unary = unary, .unary_backward = unary_backward, .binary = binary, .softmax = softmax,
    .softmax_backward = softmax_backward, .sum_to = sum_to, .gemm = zli_cuda_gemm,
    .gemm_batched = zli_cuda_gemm_batched, .gemm_half = zli_cuda_gemm_half, .linear_half = zli_cuda_linear_half,
    .att_softmax = att_softmax, .att_softmax_backward = att_softmax_backward,
    .flash_forward = flash_forward, .flash_backward = flash_backward,
    .dropout = dropout, .dropout_backward = dropout_backward, .reduce_dim = reduce_dim, .reduce_all = reduce_all,
    .reduce_backward = reduce_backward, .cumsum = cumsum, .var = var, .var_backward = var_backward, .select = select_,
};
