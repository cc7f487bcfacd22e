/* Losses: cross_entropy (log-softmax and NLL fused, with ignore_index, class
 * weights and label smoothing) and mse_loss, each with a one-pass backward, on
 * the host or a device. Per-row work runs in parallel; every sum over rows or
 * elements is taken in a fixed order, in double, on the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels.h"
#include "../../math/convert.h"
#include "../../math/cross_entropy.h"

static zl_status check_reduction(const char *op, zl_reduction red)
{
    if (red == ZL_REDUCE_MEAN || red == ZL_REDUCE_SUM || red == ZL_REDUCE_NONE) return ZL_OK;
    return zl_error(ZL_EINVAL, "%s: unknown reduction %d (expected mean, sum or none)", op, (int)red);
}

/* ---- cross_entropy ----
 * Design: forward keeps one float per row, its log-sum-exp, rather than the
 * [N, C] softmax: the logits are held by the graph anyway, so backward
 * rebuilds softmax = exp(x - lse) in the same pass that writes the gradient,
 * and the saved state is N floats instead of N*C. */

/* torch's options, as the host computes them: with keep = 1 - eps and
 * spread = eps / C, a row's loss is keep * w[t] * (lse - x[t]) + spread *
 * sum_c w[c] * (lse - x[c]), and its gradient scale * ((keep * w[t] + spread *
 * wsum) * softmax - keep * w[t] * onehot(t) - spread * w). */
typedef struct {
    float *w;           /* [C] class weights, or NULL for all ones */
    float keep, spread;
    float wsum;         /* the weights summed (C without them) */
} ce_ex;

typedef struct {
    int64_t count;      /* rows whose target is not ignore_index */
    double denom;       /* what the mean divides by: count, or those rows' target weights summed */
    const ce_ex *ex;    /* &opts, or NULL when neither weight nor smoothing is given */
    ce_ex opts;
    int64_t *target;    /* [N] */
    float *lse;         /* [N]; unused for ignored rows */
} ce_ctx;

/* One malloc holding the header, both arrays and the weights' copy (wcls
 * floats, 0 without weights), so ctx_free is plain free. */
static ce_ctx *ce_ctx_new(int64_t n, int64_t wcls)
{
    size_t rows = (size_t)(n ? n : 1);
    ce_ctx *c = malloc(sizeof *c + rows * sizeof(int64_t) + rows * sizeof(float) + (size_t)wcls * sizeof(float));
    if (!c) return NULL;
    c->count = 0;
    c->denom = 0.0;
    c->ex = NULL;
    c->target = (int64_t *)(c + 1);
    c->lse = (float *)(c->target + rows);
    c->opts = (ce_ex){.w = wcls ? c->lse + rows : NULL, .keep = 1.0f};
    return c;
}

/* zlm_ce_row with the max reduced at the vector's width (same bits). */
static void ce_row(int64_t ncls, const float *restrict x, int64_t target, int64_t ignore, float *lse, float *loss)
{
    if (target == ignore) {
        *lse = 0.0f;
        *loss = 0.0f;
        return;
    }
    float m = -INFINITY;
    #pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < ncls; c++) m = x[c] > m ? x[c] : m;
    zlm_ce_row_from_max(ncls, x, m, target, lse, loss);
}

/* ce_row, then the options' loss (ex non-NULL) from the row's lse, the
 * smoothing's sum taken in double in class order. */
static void ce_row_ex(const ce_ex *ex, int64_t ncls, const float *restrict x, int64_t target, int64_t ignore,
                      float *lse, float *loss)
{
    ce_row(ncls, x, target, ignore, lse, loss);
    if (!ex || target == ignore) return;
    double v = (double)ex->keep * (ex->w ? ex->w[target] : 1.0f) * *loss;
    if (ex->spread != 0.0f) {
        double s = 0.0, m = *lse;
        for (int64_t c = 0; c < ncls; c++) s += (ex->w ? ex->w[c] : 1.0) * (m - x[c]);
        v += (double)ex->spread * s;
    }
    *loss = (float)v;
}

/* x [ncls] f32; gx [out] [ncls]: zlm_ce_row_backward, or with the options
 * (ex non-NULL) their gradient (see ce_ex). */
static void ce_row_backward_ex(const ce_ex *ex, int64_t ncls, const float *restrict x, int64_t target,
                               int64_t ignore, float lse, float scale, float *restrict gx)
{
    if (!ex || target == ignore) {
        zlm_ce_row_backward(ncls, x, target, ignore, lse, scale, gx);
        return;
    }
    float a = ex->keep * (ex->w ? ex->w[target] : 1.0f), p = a + ex->spread * ex->wsum;
    for (int64_t c = 0; c < ncls; c++)
        gx[c] = scale * (p * zlm_ce_exp(x[c], lse) - ex->spread * (ex->w ? ex->w[c] : 1.0f));
    gx[target] -= scale * a;
}

/* x [n, ncls] contiguous; target [n]; lse, loss [n] [out]. Ignored rows get
 * loss 0. Without options the rows are the CUDA kernels'
 * (math/cross_entropy.h): a row's bits do not depend on the thread
 * count or the vector width. */
static void ce_forward_kernel(int64_t n, int64_t ncls, const float *restrict x, const int64_t *restrict target,
                              int64_t ignore, const ce_ex *ex, float *restrict lse, float *restrict loss)
{
    #pragma omp parallel for schedule(static) if (n * ncls > ZLI_PAR_MIN && n > 1)
    for (int64_t r = 0; r < n; r++) ce_row_ex(ex, ncls, x + r * ncls, target[r], ignore, &lse[r], &loss[r]);
}

/* gx[r, c] = scale_r * (exp(x[r, c] - lse[r]) - (c == target[r])) (or the
 * options' gradient); zero on ignored rows. scale_r is g[r] when g_stride is
 * 1 (reduction none) or g[0] * k otherwise. */
static void ce_backward_kernel(int64_t n, int64_t ncls, const float *restrict x, const ce_ctx *ctx, int64_t ignore,
                               const float *restrict g, int64_t g_stride, float k, float *restrict gx)
{
    #pragma omp parallel for schedule(static) if (n * ncls > ZLI_PAR_MIN && n > 1)
    for (int64_t r = 0; r < n; r++)
        ce_row_backward_ex(ctx->ex, ncls, x + r * ncls, ctx->target[r], ignore, ctx->lse[r],
                           zlm_ce_scale(g[r * g_stride], k), gx + r * ncls);
}

/* bf16 and f16 logits on the host are read where they lie, a row at a time
 * widened into a thread's own f32 row (a vocabulary's row stays in cache):
 * the same bits as widening the whole [N, C] first, without that copy, which
 * a 50257-word vocabulary makes one of the largest tensors of a step. The
 * gradient is f32, as every pending gradient is; when the loss was asked for
 * in f32 (zl_cross_entropy_as) it is rounded to the logits' precision, as the
 * backward of an explicit conversion to f32 would round it. */
static bool is_half(zl_dtype dt) { return dt == ZL_DTYPE_BF16 || dt == ZL_DTYPE_F16; }

static void widen_row(const uint16_t *restrict h, zl_dtype dt, int64_t n, float *restrict f)
{
    if (dt == ZL_DTYPE_BF16)
        for (int64_t c = 0; c < n; c++) f[c] = zlm_bf16_to_f32(h[c]);
    else
        for (int64_t c = 0; c < n; c++) f[c] = zlm_f16_to_f32(h[c]);
}

/* f rounded to dt's precision, in place. */
static void round_row(float *f, zl_dtype dt, int64_t n)
{
    if (dt == ZL_DTYPE_BF16)
        for (int64_t c = 0; c < n; c++) f[c] = zlm_bf16_to_f32(zlm_f32_to_bf16(f[c]));
    else
        for (int64_t c = 0; c < n; c++) f[c] = zlm_f16_to_f32(zlm_f32_to_f16(f[c]));
}

/* Room for one f32 row per thread, or NULL with the error set. */
static float *half_rows(const char *op, int64_t ncls, int *threads)
{
    *threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    float *rows = zl_mem_alloc((size_t)*threads * (size_t)ncls * sizeof(float), ZL_MEM_ACTIVATIONS);
    if (!rows) zl_error(ZL_ENOMEM, "%s: out of memory for %d rows of %lld floats", op, *threads, (long long)ncls);
    return rows;
}

static zl_status ce_forward_half(int64_t n, int64_t ncls, const uint16_t *x, zl_dtype dt, const int64_t *target,
                                 int64_t ignore, const ce_ex *ex, float *lse, float *loss)
{
    int threads;
    float *rows = half_rows("cross_entropy", ncls, &threads);
    if (!rows) return ZL_ENOMEM;
    #pragma omp parallel num_threads(threads) if (threads > 1 && n * ncls > ZLI_PAR_MIN && n > 1)
    {
        float *f = rows + (size_t)omp_get_thread_num() * (size_t)ncls;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            widen_row(x + r * ncls, dt, ncls, f);
            ce_row_ex(ex, ncls, f, target[r], ignore, &lse[r], &loss[r]);
        }
    }
    zl_mem_free(rows, (size_t)threads * (size_t)ncls * sizeof(float), ZL_MEM_ACTIVATIONS);
    return ZL_OK;
}

static zl_status ce_backward_half(int64_t n, int64_t ncls, const uint16_t *x, zl_dtype dt, const ce_ctx *ctx,
                                  int64_t ignore, const float *g, int64_t g_stride, float k, bool round,
                                  float *gx)
{
    int threads;
    float *rows = half_rows("cross_entropy backward", ncls, &threads);
    if (!rows) return ZL_ENOMEM;
    #pragma omp parallel num_threads(threads) if (threads > 1 && n * ncls > ZLI_PAR_MIN && n > 1)
    {
        float *f = rows + (size_t)omp_get_thread_num() * (size_t)ncls;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            widen_row(x + r * ncls, dt, ncls, f);
            ce_row_backward_ex(ctx->ex, ncls, f, ctx->target[r], ignore, ctx->lse[r],
                               zlm_ce_scale(g[r * g_stride], k), gx + r * ncls);
            if (round) round_row(gx + r * ncls, dt, ncls);
        }
    }
    zl_mem_free(rows, (size_t)threads * (size_t)ncls * sizeof(float), ZL_MEM_ACTIVATIONS);
    return ZL_OK;
}

/* On a device the targets and log-sum-exps the kernels read are device
 * tensors, kept in the node's saved slots 0 and 1. */
static zl_status ce_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *logits = n->inputs[0];
    const ce_ctx *ctx = n->ctx;
    zl_reduction red = (zl_reduction)n->i[0];
    int64_t ignore = n->i[1], rows = n->i[2], ncls = n->i[3];
    const zli_dev_kernels *kern = logits->storage->dev ? logits->storage->dev->kernels : NULL;
    float k = red != ZL_REDUCE_MEAN ? 1.0f : ctx->opts.w ? (float)(1.0 / ctx->denom) : zlm_ce_mean_factor(ctx->count);
    if (!kern && is_half(logits->dtype) && zl_tensor_is_contiguous(logits)) {
        zl_tensor *gc = zli_f32c(g);
        zl_tensor *gx = gc ? zli_new_f32(logits->ndim, logits->shape) : NULL;
        zl_status st = gx ? ZL_OK : ZL_ENOMEM;
        if (gx && rows * ncls > 0)
            st = ce_backward_half(rows, ncls, zl_tensor_data(logits), logits->dtype, ctx, ignore,
                                  zl_tensor_data(gc), red == ZL_REDUCE_NONE ? 1 : 0, k, n->i[4] != 0,
                                  zl_tensor_data(gx));
        zl_tensor_release(gc);
        if (st) { zl_tensor_release(gx); return st; }
        gin[0] = gx;
        gin[1] = NULL;
        return ZL_OK;
    }
    zl_tensor *xf = zli_kernel_input(logits, kern != NULL), *gc = xf ? zli_f32c(g) : NULL;
    zl_tensor *gx = gc ? zli_new_f32_like(logits, logits->ndim, logits->shape) : NULL;
    zl_status st = gx ? ZL_OK : ZL_ENOMEM;
    if (gx && rows * ncls > 0) {
        if (kern)
            st = kern->ce_backward(logits->storage->dev_index, rows, ncls, zl_tensor_data(xf), (int)xf->dtype,
                                   zl_tensor_data(n->saved[0]), ignore, zl_tensor_data(n->saved[1]),
                                   zl_tensor_data(gc), red == ZL_REDUCE_NONE ? 1 : 0, k, zl_tensor_data(gx));
        else
            ce_backward_kernel(rows, ncls, zl_tensor_data(xf), ctx, ignore, zl_tensor_data(gc),
                               red == ZL_REDUCE_NONE ? 1 : 0, k, zl_tensor_data(gx));
    }
    zl_tensor_release(xf);
    zl_tensor_release(gc);
    if (!st && n->i[4] && is_half(logits->dtype)) {
        zl_tensor *rounded = zli_copy_as(gx, logits->dtype, ZL_MEM_ACTIVATIONS);
        zl_tensor_release(gx);
        gx = rounded;
        st = gx ? ZL_OK : ZL_ENOMEM;
    }
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    gin[1] = NULL;
    return ZL_OK;
}

/* The per-row losses on the device (targets and log-sum-exps there too, for
 * backward); *loss is NULL on failure. */
static zl_status ce_device(const zli_dev_kernels *kern, int index, zl_tensor *logits, zl_tensor *target,
                           int64_t rows, int64_t ncls, int64_t ignore, zl_tensor **tdev, zl_tensor **lse,
                           zl_tensor **loss)
{
    zl_tensor *xf = zli_kernel_input(logits, true);
    *tdev = xf ? zli_contiguous_as_like(target, ZL_DTYPE_I64, logits) : NULL;
    *lse = *tdev ? zli_new_f32_like(logits, 1, &rows) : NULL;
    *loss = *lse ? zli_new_f32_like(logits, logits->ndim == 2 ? 1 : 0, logits->shape) : NULL;
    zl_status st = *loss ? ZL_OK : ZL_ENOMEM;
    if (*loss && rows * ncls > 0)
        st = kern->ce_forward(index, rows, ncls, zl_tensor_data(xf), (int)xf->dtype, zl_tensor_data(*tdev), ignore,
                              zl_tensor_data(*lse), zl_tensor_data(*loss));
    zl_tensor_release(xf);
    if (st) {
        zl_tensor_release(*loss);
        *loss = NULL;
    }
    return st;
}

/* weight [ncls] (any float dtype and layout, in host or device memory) into
 * w as f32; the shape and dtype checked, naming the op. */
static zl_status ce_weight(const char *op, zl_tensor *weight, int64_t ncls, float *w)
{
    char s[128];
    if (zli_need_float(op, "weight", weight)) return ZL_EDTYPE;
    if (weight->ndim != 1 || weight->shape[0] != ncls)
        return zl_error(ZL_ESHAPE, "%s: weight must be 1-d with one entry per class, [%lld], got shape %s", op,
                        (long long)ncls, zl_shape_str(weight->ndim, weight->shape, s, sizeof s));
    zl_tensor *c = zli_copy_as(weight, ZL_DTYPE_F32, ZL_MEM_OTHER);
    if (!c) return ZL_ENOMEM;
    zl_status st = ZL_OK;
    if (c->storage->dev) st = c->storage->dev->to_host(w, c);
    else memcpy(w, zl_tensor_data(c), (size_t)ncls * sizeof *w);
    zl_tensor_release(c);
    return st;
}

/* n elements of dt from host memory as a 1-d tensor where `like` lives. */
static zl_tensor *array_like(zl_dtype dt, int64_t n, const void *data, const zl_tensor *like)
{
    zl_tensor *h = zl_tensor_from_data(dt, 1, &n, data);
    zl_tensor *d = h ? zli_copy_as_like(h, dt, like) : NULL;
    zl_tensor_release(h);
    return d;
}

/* -spread * sum_c w[c] * log_softmax(x2)[r, c] per row of x2 [rows, ncls],
 * 0 on the rows `skip` marks (masked rather than multiplied, so an ignored
 * row of -inf gives 0, not NaN). The weights are constants. */
static zl_tensor *ce_smoothing_term(zl_tensor *x2, zl_tensor *weight, const uint8_t *skip, int64_t rows, float spread)
{
    zl_tensor *xf = is_half(x2->dtype) ? zl_tensor_to(x2, ZL_DTYPE_F32) : zl_tensor_retain(x2);
    zl_tensor *lp = xf ? zl_log_softmax(xf, 1) : NULL, *wd = lp && weight ? zl_tensor_detach(weight) : NULL;
    zl_tensor *lw = !lp ? NULL : !weight ? zl_tensor_retain(lp) : wd ? zl_mul(lp, wd) : NULL;
    zl_tensor *sum = lw ? zl_sum(lw, 1, false) : NULL;
    zl_tensor *mask = sum ? array_like(ZL_DTYPE_BOOL, rows, skip, x2) : NULL;
    zl_tensor *kept = mask ? zl_masked_fill(sum, mask, 0.0) : NULL;
    zl_tensor *term = kept ? zl_affine(kept, -(double)spread, 0.0) : NULL;
    zl_tensor *objs[] = {kept, mask, sum, lw, wd, lp, xf};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return term;
}

/* Design: a device's kernels know the plain loss only, so the options run
 * there composed of ops that do: row r's loss is the plain loss times keep *
 * w[t] (0 on ignored rows) plus the smoothing term, reduced as asked, and
 * autograd differentiates the composition. Nothing of [N, C] crosses to the
 * host; the coefficients and the mean's divisor come from ctx's host copies. */
static zl_tensor *ce_ex_device(zl_tensor *logits, zl_tensor *target, zl_tensor *weight, const ce_ctx *ctx,
                               int64_t ignore, zl_reduction red, zl_dtype dtype)
{
    const ce_ex *ex = ctx->ex;
    int64_t ncls = logits->shape[logits->ndim - 1], rows = logits->ndim == 2 ? logits->shape[0] : 1;
    size_t n = (size_t)(rows ? rows : 1);
    float *coef = malloc(n * sizeof *coef);
    uint8_t *skip = malloc(n);
    if (!coef || !skip) {
        free(coef);
        free(skip);
        zl_error(ZL_ENOMEM, "cross_entropy: out of memory");
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = ctx->target[r];
        skip[r] = t == ignore;
        coef[r] = skip[r] ? 0.0f : ex->keep * (ex->w ? ex->w[t] : 1.0f);
    }
    zl_tensor *x2 = zl_tensor_reshape(logits, 2, (int64_t[]){rows, ncls});
    zl_tensor *t1 = x2 ? zl_tensor_reshape(target, 1, &rows) : NULL;
    zl_tensor *nll = t1 ? zl_cross_entropy_as(x2, t1, ignore, ZL_REDUCE_NONE, ZL_DTYPE_F32) : NULL;
    zl_tensor *a = nll ? array_like(ZL_DTYPE_F32, rows, coef, logits) : NULL;
    zl_tensor *loss = a ? zl_mul(nll, a) : NULL, *next = NULL;
    if (loss && ex->spread != 0.0f) {
        zl_tensor *term = ce_smoothing_term(x2, weight, skip, rows, ex->spread);
        next = term ? zl_add(loss, term) : NULL;
        zl_tensor_release(term);
        zl_tensor_release(loss);
        loss = next;
    }
    if (loss && red == ZL_REDUCE_NONE && logits->ndim == 1) next = zl_tensor_reshape(loss, 0, NULL);
    else if (loss && red != ZL_REDUCE_NONE) next = zl_sum(loss, ZL_ALL_DIMS, false);
    else next = zl_tensor_retain(loss);
    zl_tensor_release(loss);
    loss = next;
    if (loss && red == ZL_REDUCE_MEAN) {
        /* All rows ignored (or their weights summing to 0): 0 * inf = NaN, as 0/0 in PyTorch. */
        next = zl_affine(loss, 1.0 / ctx->denom, 0.0);
        zl_tensor_release(loss);
        loss = next;
    }
    if (loss && dtype != ZL_DTYPE_F32) {
        next = zl_tensor_to(loss, dtype);
        zl_tensor_release(loss);
        loss = next;
    }
    zl_tensor *objs[] = {a, nll, t1, x2};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    free(coef);
    free(skip);
    return loss;
}

zl_tensor *zl_cross_entropy(zl_tensor *logits, zl_tensor *target, int64_t ignore_index, zl_reduction red)
{
    /* A NULL logits gets cross_entropy_ex's error naming it. */
    return zl_cross_entropy_ex(logits, target, NULL, ignore_index, 0.0, red, logits ? logits->dtype : ZL_DTYPE_F32);
}

zl_tensor *zl_cross_entropy_as(zl_tensor *logits, zl_tensor *target, int64_t ignore_index, zl_reduction red,
                               zl_dtype dtype)
{
    return zl_cross_entropy_ex(logits, target, NULL, ignore_index, 0.0, red, dtype);
}

zl_tensor *zl_cross_entropy_ex(zl_tensor *logits, zl_tensor *target, zl_tensor *weight, int64_t ignore_index,
                               double label_smoothing, zl_reduction red, zl_dtype dtype)
{
    const char *op = "cross_entropy";
    zl_tensor *in[3] = {logits, target, weight};
    int nin = weight ? 3 : 2;
    const zli_dev_kernels *kern = NULL;
    int index = 0, on;
    if (zli_op_begin(op, nin, in)) return NULL;
    if ((on = zli_op_device(op, nin, in, &kern, &index)) < 0) return zli_op_end(op, nin, in, NULL);
    if (zli_need_float(op, "logits", logits) || check_reduction(op, red)) return zli_op_end(op, nin, in, NULL);
    if (dtype != ZL_DTYPE_F32 && !is_half(dtype)) {
        zl_error(ZL_EINVAL, "%s: the loss's dtype must be f32, bf16 or f16, got %s", op, zl_dtype_name(dtype));
        return zli_op_end(op, nin, in, NULL);
    }
    if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
        zl_error(ZL_EINVAL, "%s: label_smoothing must be in [0, 1], got %g", op, label_smoothing);
        return zli_op_end(op, nin, in, NULL);
    }
    bool batched = logits->ndim == 2;
    if (!((batched && target->ndim == 1 && target->shape[0] == logits->shape[0]) ||
          (logits->ndim == 1 && target->ndim == 0))) {
        zli_shape_error(op, "expected logits [N, C] with target [N], or logits [C] with target []", logits, target);
        return zli_op_end(op, nin, in, NULL);
    }
    int64_t rows = batched ? logits->shape[0] : 1, ncls = logits->shape[logits->ndim - 1];
    int64_t *tv = NULL;
    if (zli_index_array(op, "target", target, &tv)) return zli_op_end(op, nin, in, NULL);
    ce_ctx *ctx = ce_ctx_new(rows, weight ? ncls : 0);
    if (!ctx) zl_error(ZL_ENOMEM, "%s: out of memory", op);
    if (!ctx || (weight && ce_weight(op, weight, ncls, ctx->opts.w))) {
        free(tv);
        free(ctx);
        return zli_op_end(op, nin, in, NULL);
    }
    double wsum = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = tv[r];
        if (t != ignore_index && (t < 0 || t >= ncls)) {
            zl_error(ZL_EINVAL, "%s: target %lld at position %lld is out of range for %lld classes "
                     "(expected 0..%lld, or ignore_index %lld)", op, (long long)t, (long long)r,
                     (long long)ncls, (long long)(ncls - 1), (long long)ignore_index);
            free(tv);
            free(ctx);
            return zli_op_end(op, nin, in, NULL);
        }
        ctx->target[r] = t;
        ctx->count += t != ignore_index;
        if (weight && t != ignore_index) wsum += ctx->opts.w[t];
    }
    free(tv);
    ctx->denom = weight ? wsum : (double)ctx->count;
    if (weight || label_smoothing > 0.0) {
        double all = 0.0;
        for (int64_t c = 0; weight && c < ncls; c++) all += ctx->opts.w[c];
        ctx->opts.keep = (float)(1.0 - label_smoothing);
        ctx->opts.spread = ncls ? (float)(label_smoothing / (double)ncls) : 0.0f;
        ctx->opts.wsum = weight ? (float)all : (float)ncls;
        ctx->ex = &ctx->opts;
        if (on) {
            zl_tensor *out = ce_ex_device(logits, target, weight, ctx, ignore_index, red, dtype);
            free(ctx);
            return zli_op_end(op, nin, in, out);
        }
    }

    bool rowwise = !on && is_half(logits->dtype) && zl_tensor_is_contiguous(logits);
    zl_tensor *xf = on || rowwise ? NULL : zli_f32c(logits), *tdev = NULL, *lse = NULL, *loss = NULL, *out = NULL;
    float *pl = NULL;
    if (on) {
        /* The per-row losses come back to the host, a float a row, to be summed
         * in the same order as on the CPU; the result goes back as a scalar. */
        if (!ce_device(kern, index, logits, target, rows, ncls, ignore_index, &tdev, &lse, &loss) &&
            red != ZL_REDUCE_NONE && (pl = malloc((size_t)(rows ? rows : 1) * sizeof *pl)) &&
            logits->storage->dev->to_host(pl, loss)) {
            free(pl);
            pl = NULL;
        }
    } else if ((xf || rowwise) && (loss = zli_new_f32(batched ? 1 : 0, logits->shape))) {
        pl = zl_tensor_data(loss);
        if (!rowwise)
            ce_forward_kernel(rows, ncls, zl_tensor_data(xf), ctx->target, ignore_index, ctx->ex, ctx->lse, pl);
        else if (rows * ncls > 0 &&
                 ce_forward_half(rows, ncls, zl_tensor_data(logits), logits->dtype, ctx->target, ignore_index,
                                 ctx->ex, ctx->lse, pl)) {
            zl_tensor_release(loss);
            loss = NULL;
            pl = NULL;
        }
    }
    if (loss && red == ZL_REDUCE_NONE) {
        out = zl_tensor_retain(loss);
    } else if (pl) {
        /* All rows ignored: the mean is 0/0 = NaN, as in PyTorch. */
        double s = zli_sum_fixed(pl, rows);
        double v = red == ZL_REDUCE_SUM ? s : s / ctx->denom;
        out = zli_full_like_device(logits, ZL_DTYPE_F32, 0, NULL, ZL_MEM_ACTIVATIONS, (float)v);
    }
    if (on) free(pl);
    zl_tensor_release(loss);
    zl_tensor_release(xf);
    out = zli_cast_result(out, dtype);
    zl_node *n = NULL;
    if (out && zli_record(out, op, ce_backward, 2, in, &n)) { zl_tensor_release(out); out = NULL; }
    if (n) {
        n->i[0] = red;
        n->i[1] = ignore_index;
        n->i[2] = rows;
        n->i[3] = ncls;
        n->i[4] = dtype != logits->dtype;   /* round the gradient to the logits' precision */
        n->ctx = ctx;
        n->ctx_free = free;
        ctx = NULL;
        if (on && (zli_node_save(n, 0, tdev, false) || zli_node_save(n, 1, lse, false))) {
            zl_tensor_release(out);   /* frees the node, ctx with it */
            out = NULL;
        }
    }
    zl_tensor_release(tdev);
    zl_tensor_release(lse);
    free(ctx);
    return zli_op_end(op, nin, in, out);
}

/* ---- mse_loss ---- */

/* The CPU's kernels (ops/cpu/kernels.h): sq[i] = (x[i] - t[i])^2 over n
 * contiguous elements; sq [out]. */
zl_status zli_cpu_mse_forward(int index, int64_t n, const float *restrict x, const float *restrict t,
                              float *restrict sq)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - t[i];
        sq[i] = d * d;
    }
    return ZL_OK;
}

/* gx[i] = k * g[i * g_stride] * (x[i] - t[i]); gt = -gx. Either output may be NULL. */
zl_status zli_cpu_mse_backward(int index, int64_t n, const float *restrict x, const float *restrict t,
                               const float *restrict g, int64_t g_stride, float k, float *restrict gx,
                               float *restrict gt)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = k * g[i * g_stride] * (x[i] - t[i]);
        if (gx) gx[i] = v;
        if (gt) gt[i] = -v;
    }
    return ZL_OK;
}

/* An mse node computes where its operands are: a device either is on (the
 * other may be a host scalar), else the host. */
static zl_status mse_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *t = n->inputs[1];
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_device("mse_loss backward", 2, n->inputs, &kern, &index) < 0) return zli_last_code();
    const zl_tensor *home = zli_op_home(2, n->inputs);
    zl_reduction red = (zl_reduction)n->i[0];
    int64_t cnt = zl_tensor_numel(x);
    zl_tensor *xf = zli_f32c_like(x, home), *tf = zli_f32c_like(t, home), *gc = zli_f32c(g);
    zl_status st = xf && tf && gc ? ZL_OK : ZL_ENOMEM;
    if (!st && zli_requires_grad(x) && !(gin[0] = zli_new_f32_like(home, x->ndim, x->shape))) st = ZL_ENOMEM;
    if (!st && zli_requires_grad(t) && !(gin[1] = zli_new_f32_like(home, t->ndim, t->shape))) st = ZL_ENOMEM;
    if (!st && cnt > 0) {
        float k = red == ZL_REDUCE_MEAN ? (float)(2.0 / (double)cnt) : 2.0f;
        float *gx = gin[0] ? zl_tensor_data(gin[0]) : NULL, *gt = gin[1] ? zl_tensor_data(gin[1]) : NULL;
        int64_t gs = red == ZL_REDUCE_NONE ? 1 : 0;
        st = kern->mse_backward(index, cnt, zl_tensor_data(xf), zl_tensor_data(tf), zl_tensor_data(gc), gs, k, gx,
                                gt);
    }
    zl_tensor_release(xf);
    zl_tensor_release(tf);
    zl_tensor_release(gc);
    return st;
}

/* The squared differences in home's memory, summed there for mean and sum
 * in the CPU's order (zli_kernel_sum). */
static zl_tensor *run_mse(const zli_dev_kernels *kern, int index, const zl_tensor *home, const zl_tensor *xf,
                          const zl_tensor *tf, zl_reduction red)
{
    int64_t cnt = zl_tensor_numel(xf);
    zl_tensor *sq = zli_new_f32_like(home, xf->ndim, xf->shape), *out = NULL;
    if (!sq || kern->mse_forward(index, cnt, zl_tensor_data(xf), zl_tensor_data(tf), zl_tensor_data(sq))) {
        zl_tensor_release(sq);
        return NULL;
    }
    if (red == ZL_REDUCE_NONE) return sq;
    out = zli_new_f32_like(home, 0, NULL);
    if (out && zli_kernel_sum(kern, index, home, zl_tensor_data(sq), cnt, red == ZL_REDUCE_MEAN, zl_tensor_data(out))) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(sq);
    return out;
}

zl_tensor *zl_mse_loss(zl_tensor *input, zl_tensor *target, zl_reduction red)
{
    const char *op = "mse_loss";
    zl_tensor *in[2] = {input, target};
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_begin(op, 2, in)) return NULL;
    if (zli_op_device(op, 2, in, &kern, &index) < 0) return zli_op_end(op, 2, in, NULL);
    if (zli_need_float(op, "input", input) || zli_need_float(op, "target", target) || check_reduction(op, red))
        return zli_op_end(op, 2, in, NULL);
    if (input->ndim != target->ndim ||
        memcmp(input->shape, target->shape, (size_t)input->ndim * sizeof input->shape[0]) != 0) {
        zli_shape_error(op, "input and target must have the same shape", input, target);
        return zli_op_end(op, 2, in, NULL);
    }
    const zl_tensor *home = zli_op_home(2, in);
    zl_tensor *xf = zli_f32c_like(input, home), *tf = zli_f32c_like(target, home);
    zl_tensor *out = xf && tf ? run_mse(kern, index, home, xf, tf, red) : NULL;
    zl_tensor_release(xf);
    zl_tensor_release(tf);
    out = zli_cast_result(out, zli_promote(input->dtype, target->dtype));
    zl_node *n = NULL;
    if (out && zli_record(out, op, mse_backward, 2, in, &n)) { zl_tensor_release(out); out = NULL; }
    if (n) n->i[0] = red;
    return zli_op_end(op, 2, in, out);
}
