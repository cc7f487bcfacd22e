/* The CPU's fused conv2d: im2col then one sgemm per image and group (a
 * group's channels are a slice of the image, its filters a slice of the
 * weight). Images run in order so BLAS threads each GEMM and the weight
 * gradient sums over images in a fixed order; im2col and col2im split rows
 * or channels over OpenMP threads. */
#include <stdio.h>
#include <string.h>
#include "../conv.h"
#include "kernels.h"
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
