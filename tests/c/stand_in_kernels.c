/* The stand-in device's op kernels: what each CUDA kernel computes per
 * element (engine/math), in plain loops over host memory, so every op that
 * runs on a device runs here without a GPU and is compared with the host. */
#include <stdlib.h>
#include "stand_in_kernels.h"
#include "math/attention.h"
#include "math/binary.h"
#include "math/convert.h"
#include "math/binary_int.h"
#include "math/conv.h"
#include "math/cross_entropy.h"
#include "math/dropout.h"
#include "math/embedding.h"
#include "math/cumsum.h"
#include "math/flash.h"
#include "math/gather.h"
#include "math/index_select.h"
#include "math/layer_norm.h"
#include "math/reduce.h"
#include "math/rms_norm.h"
#include "math/rotary.h"
#include "math/select.h"
#include "math/mse.h"
#include "math/pool.h"
#include "math/softmax.h"
#include "math/sum_to.h"
#include "math/unary.h"
#include "math/var.h"

stand_in_counts stand_in_calls;

static void count_half(int n, const int *dts)
{
    for (int i = 0; i < n; i++)
        if (dts[i] == ZLM_BF16 || dts[i] == ZLM_F16) {
            stand_in_calls.half_operands++;
            return;
        }
}

static zl_status fake_unary(int index, int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0,
                            float p1)
{
    CHECK(index == FAKE_INDEX);
    count_half(2, (int[]){xdt, ydt});
    for (int64_t i = 0; i < n; i++) zlm_store(y, ydt, i, zlm_unary_forward(kind, zlm_load(x, xdt, i), p0, p1));
    return ZL_OK;
}

static zl_status fake_unary_backward(int index, int kind, int64_t n, const void *x, int xdt, const void *y, int ydt,
                                     const void *g, int gdt, float *gx, float p0, float p1)
{
    CHECK(index == FAKE_INDEX);
    count_half(3, (int[]){xdt, y ? ydt : ZLM_F32, gdt});
    for (int64_t i = 0; i < n; i++)
        gx[i] = zlm_unary_backward(kind, zlm_load(x, xdt, i), y ? zlm_load(y, ydt, i) : 0.0f, zlm_load(g, gdt, i), p0,
                                   p1);
    return ZL_OK;
}

/* The operands' broadcast views over the output's shape; returns its element count. */
static int64_t views_of(int ndim, const int64_t *shape, const int64_t *sa, const int64_t *sb, zlm_view *va,
                        zlm_view *vb)
{
    *va = zlm_view_over(ndim, shape, sa);
    *vb = zlm_view_over(ndim, shape, sb);
    return zli_numel(ndim, shape);
}

static zl_status fake_binary(int index, int kind, int ndim, const int64_t *shape, const int64_t *sa,
                             const int64_t *sb, const void *a, int adt, const void *b, int bdt, void *out, int odt)
{
    CHECK(index == FAKE_INDEX);
    count_half(3, (int[]){adt, bdt, odt});
    zlm_view va, vb;
    int64_t n = views_of(ndim, shape, sa, sb, &va, &vb);
    for (int64_t i = 0; i < n; i++)
        zlm_store(out, odt, i,
                  zlm_binary_forward(kind, zlm_load(a, adt, zlm_view_offset(&va, i)),
                                     zlm_load(b, bdt, zlm_view_offset(&vb, i))));
    return ZL_OK;
}

/* A plain triple loop over A and B stored as dt (ZLM_*): the order differs
 * from OpenBLAS's, so GEMM results are compared to a tolerance, not bit for
 * bit. alpha and beta as BLAS applies them: alpha times the product, plus
 * beta times C. */
static void loop_gemm(int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, float *C,
                      int64_t ldc, int64_t sc, int64_t batch)
{
    for (int64_t b = 0; b < batch; b++) {
        float *Cb = C + b * sc;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t p = 0; p < K; p++)
                    s += (double)zlm_load(A, dt, b * sa + (ta ? p * lda + i : i * lda + p)) *
                         zlm_load(B, dt, b * sb + (tb ? j * ldb + p : p * ldb + j));
                float v = alpha * (float)s;
                Cb[i * ldc + j] = beta == 0.0f ? v : v + beta * Cb[i * ldc + j];
            }
    }
}

static zl_status fake_gemm_batched(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                   const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                                   float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    CHECK(index == FAKE_INDEX);
    stand_in_calls.batched_gemms += batch > 1;
    loop_gemm(ZLM_F32, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    return ZL_OK;
}

static zl_status fake_gemm_half(int index, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                                float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    CHECK(index == FAKE_INDEX && (dt == ZLM_BF16 || dt == ZLM_F16));
    if (dt != ZLM_BF16 && dt != ZLM_F16) return zl_error(ZL_EINVAL, "gemm_half: dtype %d", dt);
    stand_in_calls.half_gemms[dt]++;
    loop_gemm(dt, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    return ZL_OK;
}

/* linear's one-pass forward: the half GEMM into f32, plus the bias, rounded
 * once; it declines as a GPU's may for some shapes while asked to. */

static zl_status fake_linear_half(int index, int dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                                  const void *B, int64_t ldb, const float *bias, void *D, int64_t ldd, bool *done)
{
    CHECK(index == FAKE_INDEX && (dt == ZLM_BF16 || dt == ZLM_F16));
    *done = false;
    if (stand_in_calls.linear_half_declines) return ZL_OK;
    float *acc = malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof *acc);
    if (!acc) return zl_error(ZL_ENOMEM, "linear_half: out of memory");
    loop_gemm(dt, false, true, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, acc, N, 0, 1);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) zlm_store(D, dt, m * ldd + n, acc[m * N + n] + (bias ? bias[n] : 0.0f));
    free(acc);
    stand_in_calls.linear_halfs++;
    *done = true;
    return ZL_OK;
}

static zl_status fake_gemm(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           const float *B, int64_t ldb, float *C, int64_t ldc)
{
    return fake_gemm_batched(index, ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1);
}

static zl_status fake_att_softmax(int index, int64_t rows, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                                  const zlm_view *mv, float *s)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t r = 0; r < rows; r++)
        zlm_attention_softmax_row_masked(s + r * tk, r, zlm_attention_limit(r, tq, tk, causal), tk, mask, mv);
    return ZL_OK;
}

static zl_status fake_att_softmax_backward(int index, int64_t rows, int64_t tk, float *dp, const float *p)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t r = 0; r < rows; r++) zlm_attention_softmax_row_backward(dp + r * tk, p + r * tk, tk);
    return ZL_OK;
}

/* n elements of p (dt) widened to f32, in a new buffer. */
static float *widen(const void *p, int dt, int64_t n)
{
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    for (int64_t i = 0; f && i < n; i++) f[i] = zlm_load(p, dt, i);
    return f;
}

static float dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* Flash attention a query row at a time (math/flash.h). It takes only keys
 * and values of one width, as a GPU's kernels take only some widths, so
 * the composed path has the rest. */
static zl_status fake_flash_forward(int index, int dt, const int64_t *dims, bool causal, float scale, const void *q,
                                    const void *k, const void *v, void *out, float *lse, bool *done)
{
    CHECK(index == FAKE_INDEX && (dt == ZLM_BF16 || dt == ZLM_F16));
    int64_t B = dims[ZLI_ATT_B], tq = dims[ZLI_ATT_TQ], tk = dims[ZLI_ATT_TK], d = dims[ZLI_ATT_D];
    int64_t grp = dims[ZLI_ATT_G];
    *done = d == dims[ZLI_ATT_DV];
    if (!*done) return ZL_OK;
    float *qf = widen(q, dt, B * tq * d), *kf = widen(k, dt, B / grp * tk * d), *vf = widen(v, dt, B / grp * tk * d);
    float s[ZLM_FLASH_BK], *o = malloc((size_t)d * sizeof *o);
    CHECK(qf && kf && vf && o);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < tq; i++) {
            int64_t r = b * tq + i, kv = b / grp * tk * d;
            lse[r] = zlm_flash_row(qf + r * d, kf + kv, vf + kv, zlm_attention_limit(i, tq, tk, causal), d, scale, dt,
                                   s, o);
            for (int64_t c = 0; c < d; c++) zlm_store(out, dt, r * d + c, o[c]);
        }
    free(o), free(vf), free(kf), free(qf);
    stand_in_calls.flash[0]++;
    return ZL_OK;
}

/* Its backward score by score: P from the row's lse, dS = P (dP - delta),
 * each rounded to dt where a GEMM of the GPU's reads it; the products with
 * scale applied at the end, as the kernels' accumulators are. */
static zl_status fake_flash_backward(int index, int dt, const int64_t *dims, bool causal, float scale, const void *q,
                                     const void *k, const void *v, const void *out, const void *dout,
                                     const float *lse, float *delta, float *dq, float *dk, float *dv)
{
    CHECK(index == FAKE_INDEX && (dt == ZLM_BF16 || dt == ZLM_F16) && !dk == !dv);
    int64_t B = dims[ZLI_ATT_B], tq = dims[ZLI_ATT_TQ], tk = dims[ZLI_ATT_TK], d = dims[ZLI_ATT_D];
    int64_t grp = dims[ZLI_ATT_G], nq = B * tq * d, nkv = B / grp * tk * d;
    float *qf = widen(q, dt, nq), *kf = widen(k, dt, nkv), *vf = widen(v, dt, nkv);
    float *of = widen(out, dt, nq), *gf = widen(dout, dt, nq);
    CHECK(qf && kf && vf && of && gf);
    for (int64_t r = 0; r < B * tq; r++) delta[r] = dot(gf + r * d, of + r * d, d);
    if (dq) memset(dq, 0, (size_t)nq * sizeof *dq);
    if (dk) memset(dk, 0, (size_t)nkv * sizeof *dk), memset(dv, 0, (size_t)nkv * sizeof *dv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < tq; i++) {
            int64_t r = b * tq + i, lim = zlm_attention_limit(i, tq, tk, causal);
            for (int64_t j = 0; j < lim; j++) {
                int64_t kj = (b / grp * tk + j) * d;
                float p = zlm_flash_p(dot(qf + r * d, kf + kj, d) * scale, lse[r]);
                float ds = zlm_round_to(zlm_attention_grad(p, dot(gf + r * d, vf + kj, d), delta[r]), dt);
                p = zlm_round_to(p, dt);
                for (int64_t c = 0; dk && c < d; c++) {
                    dv[kj + c] += p * gf[r * d + c];
                    dk[kj + c] += ds * qf[r * d + c];
                }
                for (int64_t c = 0; dq && c < d; c++) dq[r * d + c] += ds * kf[kj + c];
            }
        }
    for (int64_t e = 0; dq && e < nq; e++) dq[e] *= scale;
    for (int64_t e = 0; dk && e < nkv; e++) dk[e] *= scale;
    free(gf), free(of), free(vf), free(kf), free(qf);
    stand_in_calls.flash[1]++;
    return ZL_OK;
}

static zl_status fake_dropout(int index, int64_t n, uint64_t seed, uint64_t offset, float p, float scale,
                              const float *x, uint8_t *keep, float *y)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < n; i++) {
        keep[i] = zlm_dropout_keep(seed, offset + (uint64_t)i, p);
        y[i] = zlm_dropout_apply(keep[i], x[i], scale);
    }
    return ZL_OK;
}

static zl_status fake_dropout_backward(int index, int64_t n, const uint8_t *keep, const float *g, float scale,
                                       float *gx)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < n; i++) gx[i] = zlm_dropout_apply(keep[i], g[i], scale);
    return ZL_OK;
}

static zl_status fake_reduce_dim(int index, int kind, int64_t outer, int64_t d, int64_t inner, const float *x,
                                 float *out, int64_t *idx)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t j = 0; j < outer * inner; j++) {
        int64_t at = 0;
        if (kind == ZLM_R_SUM || kind == ZLM_R_MEAN) out[j] = zlm_reduce_sum(x, d, inner, j / inner, j % inner,
                                                                             kind == ZLM_R_MEAN);
        else out[j] = zlm_reduce_pick(x, d, inner, j / inner, j % inner, zlm_reduce_lowest(kind), &at);
        if (idx) idx[j] = at;
    }
    return ZL_OK;
}

static zl_status fake_reduce_all(int index, double div, const float *count, int64_t n, const float *x, double *work,
                                 float *out)
{
    CHECK(index == FAKE_INDEX);
    int64_t nc = zlm_sum_chunks(n);
    for (int64_t c = 0; c < nc; c++) work[c] = zlm_chunk_sum(x, n, c);
    out[0] = zlm_sum_finish(work, nc, count ? (double)*count : div);
    return ZL_OK;
}

static zl_status fake_cumsum(int index, int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x,
                             float *out)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t f = 0; f < outer * inner; f++) zlm_running_sum_fibre(f, len, inner, reverse, x, out);
    return ZL_OK;
}

static zl_status fake_var(int index, int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red,
                          const float *x, double correction, bool is_std, double *mean, double *m2, float *out)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t o = 0; o < nout; o++) {
        zlm_var_moments(o, count, kept, red, x, mean, m2);
        out[o] = zlm_var_value(m2[o], zlm_var_divisor(count, correction), is_std);
    }
    return ZL_OK;
}

static zl_status fake_var_backward(int index, int64_t n, const zlm_view *ov, int64_t count, const float *x,
                                   const float *g, const double *mean, const double *m2, double correction,
                                   bool is_std, float *gx)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < n; i++) {
        int64_t o = zlm_view_offset(ov, i);
        gx[i] = zlm_var_grad(g[o], x[i], mean[o], m2[o], count, correction, is_std);
    }
    return ZL_OK;
}

static zl_status fake_reduce_backward(int index, int kind, int64_t outer, int64_t len, int64_t inner, const float *g,
                                      const int64_t *idx, float *gx)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t j = 0; j < outer * len * inner; j++) gx[j] = zlm_reduce_backward(kind, g, idx, len, inner, j);
    return ZL_OK;
}

static zl_status fake_select(int index, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *sc,
                             const void *a, const int64_t *sa, const void *b, const int64_t *sb, int es, void *out)
{
    CHECK(index == FAKE_INDEX);
    zlm_select s = {.ndim = ndim};
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        s.shape[i] = shape[i];
        s.sc[i] = sc[i];
        s.sa[i] = sa[i];
        s.sb[i] = sb[i];
        n *= shape[i];
    }
    for (int64_t i = 0; i < n; i++) zlm_select_elem(&s, cond, a, b, es, out, i);
    return ZL_OK;
}

static zl_status fake_sum_to(int index, int nd, const int64_t *shape, const int *red, const float *g, float *out,
                             int64_t nout)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t j = 0; j < nout; j++) out[j] = zlm_sum_to_elem(g, nd, shape, red, j);
    return ZL_OK;
}

/* Element i of buffer p in dtype dt, as a byte address (the math headers take rows so). */
static void *at(const void *p, int dt, int64_t i) { return (char *)p + i * (int64_t)zl_dtype_size((zl_dtype)dt); }

static zl_status fake_softmax(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *x,
                              int xdt, void *y, int ydt)
{
    CHECK(index == FAKE_INDEX);
    count_half(2, (int[]){xdt, ydt});
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t b = zlm_softmax_row_base(r, d, inner);
        zlm_softmax_row(is_log, d, inner, at(x, xdt, b), xdt, at(y, ydt, b), ydt);
    }
    return ZL_OK;
}

static zl_status fake_softmax_backward(int index, bool is_log, int64_t outer, int64_t d, int64_t inner,
                                       const void *y, int ydt, const void *g, int gdt, float *gx)
{
    CHECK(index == FAKE_INDEX);
    count_half(2, (int[]){ydt, gdt});
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t b = zlm_softmax_row_base(r, d, inner);
        zlm_softmax_row_backward(is_log, d, inner, at(y, ydt, b), ydt, at(g, gdt, b), gdt, gx + b);
    }
    return ZL_OK;
}

/* Row r of x [rows, ncls] (xdt) in f32, as the kernel loads each element. */
static float *row_f32(const void *x, int xdt, int64_t ncls, int64_t r)
{
    float *row = malloc((size_t)(ncls ? ncls : 1) * sizeof *row);
    CHECK(row != NULL);
    for (int64_t c = 0; row && c < ncls; c++) row[c] = zlm_load(x, xdt, r * ncls + c);
    return row;
}

static zl_status fake_ce_forward(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                                 int64_t ignore, const zlm_ce_opts *o, float *lse, float *loss)
{
    CHECK(index == FAKE_INDEX);
    count_half(1, &xdt);
    for (int64_t r = 0; r < rows; r++) {
        float *row = row_f32(x, xdt, ncls, r);
        zlm_ce_row(ncls, row, target[r], ignore, lse + r, loss + r);
        zlm_ce_opts_finish(o, ncls, row, target[r], ignore, lse[r], loss + r);
        free(row);
    }
    return ZL_OK;
}

static zl_status fake_ce_backward(int index, int64_t rows, int64_t ncls, const void *x, int xdt,
                                  const int64_t *target, int64_t ignore, const zlm_ce_opts *o, const float *lse,
                                  const float *g, int64_t g_stride, float k, const float *count, int gdt, float *gx)
{
    CHECK(index == FAKE_INDEX);
    count_half(1, &xdt);
    if (count) k = zlm_ce_mean_factor((int64_t)*count);
    for (int64_t r = 0; r < rows; r++) {
        float *row = row_f32(x, xdt, ncls, r);
        zlm_ce_opts_row_backward(o, ncls, row, target[r], ignore, lse[r], zlm_ce_scale(g[r * g_stride], k), gdt,
                                 gx + r * ncls);
        free(row);
    }
    return ZL_OK;
}

static zl_status fake_ce_targets(int index, int64_t rows, int64_t ncls, int64_t *target, int64_t ignore,
                                 zlm_index_fault *fault, float *counted)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t r = 0; r < rows; r++) zlm_ce_check_target(fault, r, target, ignore, ncls, counted);
    return ZL_OK;
}

static zl_status fake_ln_forward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                 const void *b, int bdt, double eps, void *y, int ydt, float *mean, float *rstd)
{
    CHECK(index == FAKE_INDEX);
    count_half(4, (int[]){xdt, w ? wdt : ZLM_F32, b ? bdt : ZLM_F32, ydt});
    for (int64_t r = 0; r < rows; r++)
        zlm_ln_row(m, at(x, xdt, r * m), xdt, w, wdt, b, bdt, eps, at(y, ydt, r * m), ydt, mean + r, rstd + r);
    return ZL_OK;
}

static zl_status fake_ln_backward_x(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                    int wdt, const float *mean, const float *rstd, const void *g, int gdt, float *gx)
{
    CHECK(index == FAKE_INDEX);
    count_half(3, (int[]){xdt, w ? wdt : ZLM_F32, gdt});
    for (int64_t r = 0; r < rows; r++)
        zlm_ln_row_backward(m, at(x, xdt, r * m), xdt, w, wdt, mean[r], rstd[r], at(g, gdt, r * m), gdt, gx + r * m);
    return ZL_OK;
}

static zl_status fake_ln_backward_wb(int index, int64_t rows, int64_t m, const void *x, int xdt, const float *mean,
                                     const float *rstd, const void *g, int gdt, float *gw, float *gb)
{
    CHECK(index == FAKE_INDEX);
    count_half(2, (int[]){xdt, gdt});
    for (int64_t j = 0; j < m; j++) zlm_ln_column_backward(rows, m, j, x, xdt, mean, rstd, g, gdt, gw, gb);
    return ZL_OK;
}

static zl_status fake_rms_forward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                  int rdt, double eps, void *y, int ydt, float *rstd)
{
    CHECK(index == FAKE_INDEX);
    count_half(3, (int[]){xdt, w ? wdt : ZLM_F32, ydt});
    for (int64_t r = 0; r < rows; r++) {
        const void *xr = at(x, xdt, r * m);
        float rs = rstd[r] = zlm_rms_rstd(zlm_rms_row_sum(m, xr, xdt, NULL, ZLM_F32, NULL, ZLM_F32), m, eps);
        for (int64_t j = 0; j < m; j++)
            zlm_store(y, ydt, r * m + j,
                      zlm_rms_out(zlm_load(xr, xdt, j), rs, rdt, w != NULL, w ? zlm_load(w, wdt, j) : 0.0f));
    }
    return ZL_OK;
}

/* The weight's gradient in the host's order: chunks of rows summed, then the chunks. */
static zl_status fake_rms_backward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                   int rdt, const float *rstd, const void *g, int gdt, float *gx, float *gw,
                                   double *part)
{
    CHECK(index == FAKE_INDEX);
    count_half(3, (int[]){xdt, w ? wdt : ZLM_F32, gdt});
    for (int64_t r = 0; gx && r < rows; r++) {
        const void *xr = at(x, xdt, r * m), *gr = at(g, gdt, r * m);
        float k = zlm_rms_k(zlm_rms_row_sum(m, xr, xdt, gr, gdt, w, wdt), m, rstd[r]);
        for (int64_t j = 0; j < m; j++)
            gx[r * m + j] = zlm_rms_grad_x(zlm_load(xr, xdt, j),
                                           zlm_rms_gn(zlm_load(gr, gdt, j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f),
                                           rstd[r], k);
    }
    int64_t nchunks = (rows + ZLM_RMS_CHUNK_ROWS - 1) / ZLM_RMS_CHUNK_ROWS;
    for (int64_t j = 0; gw && j < m; j++) {
        for (int64_t c = 0; c < nchunks; c++) {
            double s = 0;
            for (int64_t r = c * ZLM_RMS_CHUNK_ROWS; r < rows && r < (c + 1) * ZLM_RMS_CHUNK_ROWS; r++)
                s += zlm_rms_grad_w_term(zlm_load(g, gdt, r * m + j), zlm_load(x, xdt, r * m + j), rstd[r], rdt);
            part[c * m + j] = s;
        }
        double s = 0;
        for (int64_t c = 0; c < nchunks; c++) s += part[c * m + j];
        gw[j] = (float)s;
    }
    return ZL_OK;
}

static zl_status fake_emb_forward(int index, int64_t n, int64_t v, int64_t d, int es, const int64_t *idx,
                                  const void *w, void *out, zlm_index_fault *fault)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < n * d; i++) zlm_embedding_gather(i, v, d, es, idx, w, out, fault);
    return ZL_OK;
}

static zl_status fake_emb_backward(int index, int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad,
                                   const float *g, float *gw, bool accumulate)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t j = 0; j < d; j++)
        zlm_embedding_backward_columns(n, v, d, j, j + 1, idx, pad, g, ZLM_F32, gw, accumulate);
    return ZL_OK;
}

static zl_status fake_rotary(int index, int nd, const int64_t *shape, const float *a, const int64_t *as,
                             const float *c, const int64_t *cs, const float *s, const int64_t *ss, bool backward,
                             float *y)
{
    CHECK(index == FAKE_INDEX);
    zlm_view va = zlm_view_over(nd, shape, as), vc = zlm_view_over(nd, shape, cs), vs = zlm_view_over(nd, shape, ss);
    int64_t n = zli_numel(nd, shape), d = shape[nd - 1], h = d / 2;
    for (int64_t i = 0; i < n; i++) {
        bool first = i % d < h;
        int64_t p = first ? i + h : i - h;
        y[i] = zlm_rotary(first, a[zlm_view_offset(&va, i)], c[zlm_view_offset(&vc, i)], a[zlm_view_offset(&va, p)],
                          s[zlm_view_offset(&vs, backward ? p : i)], backward ? 1.0f : -1.0f);
    }
    return ZL_OK;
}

static zl_status fake_gather(int index, const zlm_view *v, int64_t sd, int64_t len, int dim, int64_t n,
                             const int64_t *idx, const void *x, int es, void *out, zlm_index_fault *fault)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t p = 0; p < n; p++) zlm_gather_elem(p, v, sd, len, idx, x, es, out, fault, dim);
    return ZL_OK;
}

static zl_status fake_gather_backward(int index, const zlm_view *v, int64_t sd, int64_t len, int64_t nfib, int64_t md,
                                      int64_t inner, const int64_t *idx, const float *g, float *gx)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t f = 0; f < nfib; f++) zlm_gather_backward_fibre(f, v, sd, len, md, inner, idx, g, gx);
    return ZL_OK;
}

static zl_status fake_scatter(int index, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len,
                              int dim, int64_t nfib, int64_t md, int64_t inner, const int64_t *idx, const void *src,
                              int wdt, void *out, zlm_index_fault *fault)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t f = 0; f < nfib; f++)
        zlm_scatter_fibre(f, add, xv, sv, sd, len, md, inner, idx, src, wdt, out, fault, dim);
    return ZL_OK;
}

static zl_status fake_scatter_backward(int index, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd,
                                       int64_t len, int64_t nfib, int64_t md, int64_t inner, const int64_t *idx,
                                       const float *g, float *gx, float *gs)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t f = 0; f < nfib; f++) zlm_scatter_backward_fibre(f, add, xv, sv, sd, len, md, inner, idx, g, gx, gs);
    return ZL_OK;
}

static zl_status fake_index_select(int index, int64_t outer, int64_t len, int64_t m, int64_t inner, int es,
                                   const int64_t *idx, const void *x, void *out, zlm_index_fault *fault, int dim)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < outer * m * inner; i++)
        zlm_index_select_gather(i, len, m, inner, es, idx, x, out, fault, dim);
    return ZL_OK;
}

static zl_status fake_index_select_backward(int index, int64_t outer, int64_t len, int64_t m, int64_t inner,
                                            const int64_t *idx, const float *g, float *gx)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t t = 0; t < outer * inner; t++) zlm_index_select_backward_column(t, len, m, inner, idx, g, gx);
    return ZL_OK;
}

static zl_status fake_mse_forward(int index, int64_t n, const float *x, const float *t, float *sq)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < n; i++) sq[i] = zlm_mse_sq(x[i], t[i]);
    return ZL_OK;
}

static zl_status fake_mse_backward(int index, int64_t n, const float *x, const float *t, const float *g,
                                   int64_t g_stride, float k, float *gx, float *gt)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t i = 0; i < n; i++) {
        float v = zlm_mse_grad(x[i], t[i], g[i * g_stride], k);
        if (gx) gx[i] = v;
        if (gt) gt[i] = -v;
    }
    return ZL_OK;
}

static zlm_window window_of(const zli_dev_window *w)
{
    return (zlm_window){.c = w->c, .h = w->h, .w = w->w, .kh = w->kh, .kw = w->kw, .oh = w->oh, .ow = w->ow,
                        .sh = w->sh, .sw = w->sw, .ph = w->ph, .pw = w->pw, .dh = w->dh, .dw = w->dw};
}

static zl_status fake_pool_forward(int index, const zli_dev_window *w, int64_t planes, const float *x, float *y,
                                   int64_t *arg)
{
    CHECK(index == FAKE_INDEX);
    zlm_window g = window_of(w);
    for (int64_t i = 0; i < planes * g.oh * g.ow; i++) zlm_pool_max(&g, x, i, y, arg);
    return ZL_OK;
}

/* Average pooling's forward (out [planes, oh, ow]) or backward (out [planes, h, w]). */
static zl_status fake_avg_pool(const zli_dev_window *w, int64_t planes, bool count_pad, bool backward,
                               const float *in, float *out)
{
    zlm_window g = window_of(w);
    int64_t n = backward ? planes * g.h * g.w : planes * g.oh * g.ow;
    for (int64_t i = 0; i < n; i++)
        out[i] = backward ? zlm_avg_pool_grad(&g, in, i, count_pad) : zlm_avg_pool(&g, in, i, count_pad);
    return ZL_OK;
}

static zl_status fake_avg_pool_forward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                       const float *x, float *y)
{
    CHECK(index == FAKE_INDEX);
    return fake_avg_pool(w, planes, count_pad, false, x, y);
}

static zl_status fake_avg_pool_backward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                        const float *gy, float *gx)
{
    CHECK(index == FAKE_INDEX);
    return fake_avg_pool(w, planes, count_pad, true, gy, gx);
}

static zl_status fake_pool_backward(int index, const zli_dev_window *w, int64_t planes, const int64_t *arg,
                                    const float *gy, float *gx)
{
    CHECK(index == FAKE_INDEX);
    zlm_window g = window_of(w);
    for (int64_t i = 0; i < planes * g.h * g.w; i++) gx[i] = zlm_pool_grad(&g, arg, gy, i);
    return ZL_OK;
}

static zl_status fake_im2col(int index, const zli_dev_window *w, const float *x, float *col)
{
    CHECK(index == FAKE_INDEX);
    zlm_window g = window_of(w);
    for (int64_t i = 0; i < g.c * g.kh * g.kw * g.oh * g.ow; i++) col[i] = zlm_im2col_elem(&g, x, i);
    return ZL_OK;
}

static zl_status fake_col2im(int index, const zli_dev_window *w, const float *col, float *gx)
{
    CHECK(index == FAKE_INDEX);
    zlm_window g = window_of(w);
    for (int64_t i = 0; i < g.c * g.h * g.w; i++) gx[i] = zlm_col2im_elem(&g, col, i);
    return ZL_OK;
}

static zl_status fake_conv_bias_backward(int index, int64_t n, int64_t nout, int64_t len, const float *g, float *gb)
{
    CHECK(index == FAKE_INDEX);
    for (int64_t o = 0; o < nout; o++) gb[o] = zlm_conv_bias_grad(g, n, nout, len, o);
    return ZL_OK;
}

static zl_status fake_binary_int(int index, int kind, int ndim, const int64_t *shape, const int64_t *sa,
                                 const int64_t *sb, const void *a, int adt, const void *b, int bdt, void *out, int odt)
{
    CHECK(index == FAKE_INDEX);
    zlm_view va, vb;
    int64_t n = views_of(ndim, shape, sa, sb, &va, &vb);
    for (int64_t i = 0; i < n; i++) zlm_binary_int_elem(kind, &va, a, adt, &vb, b, bdt, out, odt, i);
    return ZL_OK;
}

const zli_dev_kernels stand_in_kernels = {
    .halves = true, .gemm_f16 = true,
    .binary_int = fake_binary_int,
    .pool_forward = fake_pool_forward, .pool_backward = fake_pool_backward,
    .avg_pool_forward = fake_avg_pool_forward, .avg_pool_backward = fake_avg_pool_backward, .im2col = fake_im2col,
    .col2im = fake_col2im, .conv_bias_backward = fake_conv_bias_backward,
    .mse_forward = fake_mse_forward, .mse_backward = fake_mse_backward,
    .index_select = fake_index_select, .index_select_backward = fake_index_select_backward, .gather = fake_gather,
    .gather_backward = fake_gather_backward, .scatter = fake_scatter, .scatter_backward = fake_scatter_backward,
    .emb_forward = fake_emb_forward, .emb_backward = fake_emb_backward, .index_faults = fake_index_faults,
    .rotary = fake_rotary,
    .ce_forward = fake_ce_forward, .ce_backward = fake_ce_backward, .ce_targets = fake_ce_targets,
    .ln_forward = fake_ln_forward,
    .ln_backward_x = fake_ln_backward_x, .ln_backward_wb = fake_ln_backward_wb,
    .rms_forward = fake_rms_forward, .rms_backward = fake_rms_backward,
    .softmax = fake_softmax, .softmax_backward = fake_softmax_backward,
    .unary = fake_unary, .unary_backward = fake_unary_backward, .binary = fake_binary, .sum_to = fake_sum_to,
    .gemm = fake_gemm, .gemm_batched = fake_gemm_batched, .gemm_half = fake_gemm_half, .linear_half = fake_linear_half,
    .att_softmax = fake_att_softmax, .att_softmax_backward = fake_att_softmax_backward,
    .flash_forward = fake_flash_forward, .flash_backward = fake_flash_backward, .dropout = fake_dropout,
    .dropout_backward = fake_dropout_backward, .reduce_dim = fake_reduce_dim, .reduce_all = fake_reduce_all,
    .reduce_backward = fake_reduce_backward, .cumsum = fake_cumsum, .var = fake_var,
    .var_backward = fake_var_backward, .select = fake_select,
};
