/* Losses: cross_entropy (log-softmax and NLL fused, with ignore_index, class
 * weights and label smoothing) and mse_loss, each with a one-pass backward,
 * through the kernel table of their inputs' memory. Every sum over rows or
 * elements is taken in a fixed order, in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "device_kernels.h"

static zl_status check_reduction(const char *op, zl_reduction red)
{
    if (red == ZL_REDUCE_MEAN || red == ZL_REDUCE_SUM || red == ZL_REDUCE_NONE) return ZL_OK;
    return zl_error(ZL_EINVAL, "%s: unknown reduction %d (expected mean, sum or none)", op, (int)red);
}

/* ---- cross_entropy ----
 * Design: forward keeps one float per row, its log-sum-exp, rather than the
 * [N, C] softmax: the logits are held by the graph anyway, so backward
 * rebuilds softmax = exp(x - lse) in the same pass that writes the gradient,
 * and the saved state is N floats instead of N*C. Every table reads the
 * logits in their own dtype: the CPU's widens bf16 and f16 a row at a time
 * into a thread's own f32 row (a vocabulary's row stays in cache), the same
 * bits as widening the whole [N, C] first without that copy, which a
 * 50257-word vocabulary makes one of the largest tensors of a step. */

static bool is_half(zl_dtype dt) { return dt == ZL_DTYPE_BF16 || dt == ZL_DTYPE_F16; }

/* The node keeps the targets, the log-sum-exps, the class weights and the
 * mean's count of rows when the kernels counted them (saved slots 0 to 3)
 * where the kernels run; f[0..2] the options' keep, spread and wsum, f[3]
 * the mean's factor (1 otherwise). */
static zl_status ce_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *logits = n->inputs[0];
    int64_t ignore = n->i[1], rows = n->i[2], ncls = n->i[3];
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_device("cross_entropy backward", 1, &logits, &kern, &index) < 0) return zli_last_code();
    zlm_ce_opts o = {n->saved[2] ? zl_tensor_data(n->saved[2]) : NULL, (float)n->f[0], (float)n->f[1],
                     (float)n->f[2]};
    zl_tensor *xk = zli_kernel_input(logits, true), *gc = xk ? zli_f32c(g) : NULL;
    zl_tensor *gx = gc ? zli_new_f32_like(logits, logits->ndim, logits->shape) : NULL;
    zl_status st = gx ? ZL_OK : ZL_ENOMEM;
    /* A loss asked for in f32 from half logits rounds its gradient to their
     * precision, as the backward of an explicit conversion would. */
    int gdt = n->i[4] ? (int)zli_kernel_dtype(logits->dtype) : ZLM_F32;
    if (gx && rows * ncls > 0)
        st = kern->ce_backward(index, rows, ncls, zl_tensor_data(xk), (int)xk->dtype, zl_tensor_data(n->saved[0]),
                               ignore, &o, zl_tensor_data(n->saved[1]), zl_tensor_data(gc),
                               (zl_reduction)n->i[0] == ZL_REDUCE_NONE ? 1 : 0, (float)n->f[3],
                               n->saved[3] ? zl_tensor_data(n->saved[3]) : NULL, gdt, zl_tensor_data(gx));
    zl_tensor_release(xk);
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    gin[1] = NULL;
    return ZL_OK;
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
    zl_tensor *c = zli_host_copy(weight, ZL_DTYPE_F32);
    if (!c) return ZL_ENOMEM;
    memcpy(w, zl_tensor_data(c), (size_t)ncls * sizeof *w);
    zl_tensor_release(c);
    return ZL_OK;
}

/* The targets range-checked (read on the host, unless the kernels check
 * them: then there is no weight), the options (*o, its w left NULL) and the
 * mean's divisor: the rows not ignored, or their targets' weights summed
 * (the kernels count them when they check). */
static zl_status ce_prepare(const char *op, zl_tensor *target, zl_tensor *weight, int64_t rows, int64_t ncls,
                            int64_t ignore, double smoothing, bool kernels_check, zlm_ce_opts *o, double *denom)
{
    float *w = NULL;
    int64_t *tv = NULL;
    *o = (zlm_ce_opts){NULL, 1.0f, 0.0f, 0.0f};
    if (kernels_check ? zli_need_index(op, "target", target) : zli_index_array(op, "target", target, &tv))
        return zli_last_code();
    if (weight && !(w = malloc((size_t)ncls * sizeof *w))) return zl_error(ZL_ENOMEM, "%s: out of memory", op);
    zl_status st = weight ? ce_weight(op, weight, ncls, w) : ZL_OK;
    double count = 0.0, wsum = 0.0, all = 0.0;
    for (int64_t r = 0; !st && tv && r < rows; r++) {
        int64_t t = tv[r];
        if (t == ignore) continue;
        if (t < 0 || t >= ncls)
            st = zl_error(ZL_EINVAL, "%s: target %lld at position %lld is out of range for %lld classes "
                          "(expected 0..%lld, or ignore_index %lld)", op, (long long)t, (long long)r,
                          (long long)ncls, (long long)(ncls - 1), (long long)ignore);
        else if (w) wsum += w[t];
        count += 1.0;
    }
    for (int64_t c = 0; w && c < ncls; c++) all += w[c];
    free(w);
    free(tv);
    *denom = weight ? wsum : count;
    if (weight || smoothing > 0.0) {
        o->keep = (float)(1.0 - smoothing);
        o->spread = ncls ? (float)(smoothing / (double)ncls) : 0.0f;
        o->wsum = weight ? (float)all : (float)ncls;
    }
    return st;
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
    int index = 0;
    if (zli_op_begin(op, nin, in)) return NULL;
    if (zli_op_device(op, nin, in, &kern, &index) < 0) return zli_op_end(op, nin, in, NULL);
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
    /* A device with a fault note checks the targets in a kernel and counts
     * the mean's rows there, so nothing is read back to the host; class
     * weights still are, to be summed. */
    zlm_index_fault *fault = !weight && kern->ce_targets && kern->index_faults ? kern->index_faults(index) : NULL;
    zlm_ce_opts o;
    double denom = 0.0;
    if (ce_prepare(op, target, weight, rows, ncls, ignore_index, label_smoothing, fault != NULL, &o, &denom))
        return zli_op_end(op, nin, in, NULL);
    /* Everything the kernels read lives where the logits do; targets the
     * kernels check are the op's own copy, which they rewrite. */
    int64_t nlse = rows ? rows : 1;
    zl_tensor *tk = fault ? zli_own_copy_like(target, ZL_DTYPE_I64, logits)
                          : zli_contiguous_as_like(target, ZL_DTYPE_I64, logits);
    zl_tensor *count = NULL;
    if (tk && fault) {
        zl_tensor *counted = zli_new_f32_like(logits, 1, &nlse);
        count = counted ? zli_new_f32_like(logits, 0, NULL) : NULL;
        if (!count || kern->ce_targets(index, rows, ncls, zl_tensor_data(tk), ignore_index, fault,
                                       zl_tensor_data(counted)) ||
            zli_kernel_sum(kern, index, logits, zl_tensor_data(counted), rows, 1.0, NULL, zl_tensor_data(count))) {
            zl_tensor_release(tk);
            tk = NULL;
        }
        zl_tensor_release(counted);
    }
    zl_tensor *wk = tk && weight ? zli_contiguous_as_like(weight, ZL_DTYPE_F32, logits) : NULL;
    zl_tensor *xk = tk && (!weight || wk) ? zli_kernel_input(logits, true) : NULL;
    zl_tensor *lse = xk ? zli_new_f32_like(logits, 1, &nlse) : NULL;
    zl_tensor *loss = lse ? zli_new_f32_like(logits, batched ? 1 : 0, logits->shape) : NULL, *out = NULL;
    o.w = wk ? zl_tensor_data(wk) : NULL;
    zl_status st = loss ? ZL_OK : ZL_ENOMEM;
    if (!st && rows > 0 && ncls > 0)
        st = kern->ce_forward(index, rows, ncls, zl_tensor_data(xk), (int)xk->dtype, zl_tensor_data(tk),
                              ignore_index, &o, zl_tensor_data(lse), zl_tensor_data(loss));
    else if (!st && rows > 0)
        st = zl_tensor_fill(loss, 0.0);   /* no classes: every target was ignore_index */
    zl_tensor_release(xk);
    if (!st && red == ZL_REDUCE_NONE) {
        out = zl_tensor_retain(loss);
    } else if (!st && (out = zli_new_f32_like(logits, 0, NULL))) {
        /* Summed in zli_sum_fixed's order, in double, and divided there: all
         * rows ignored make the mean 0/0 = NaN, as in PyTorch. */
        const float *by = red == ZL_REDUCE_MEAN && count ? zl_tensor_data(count) : NULL;
        if (zli_kernel_sum(kern, index, logits, zl_tensor_data(loss), rows, red == ZL_REDUCE_SUM ? 1.0 : denom, by,
                           zl_tensor_data(out))) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(loss);
    out = zli_cast_result(out, dtype);
    zl_node *n = NULL;
    if (out && zli_record(out, op, ce_backward, 2, in, &n)) { zl_tensor_release(out); out = NULL; }
    if (n) {
        n->i[0] = red;
        n->i[1] = ignore_index;
        n->i[2] = rows;
        n->i[3] = ncls;
        n->i[4] = dtype != logits->dtype && is_half(logits->dtype);
        n->f[0] = o.keep;
        n->f[1] = o.spread;
        n->f[2] = o.wsum;
        n->f[3] = red == ZL_REDUCE_MEAN && !count ? (float)(1.0 / denom) : 1.0f;
        bool by_count = red == ZL_REDUCE_MEAN && count;
        if (zli_node_save(n, 0, tk, false) || zli_node_save(n, 1, lse, false) ||
            (wk && zli_node_save(n, 2, wk, false)) || (by_count && zli_node_save(n, 3, count, false))) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(tk);
    zl_tensor_release(wk);
    zl_tensor_release(lse);
    zl_tensor_release(count);
    return zli_op_end(op, nin, in, out);
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
    if (out && zli_kernel_sum(kern, index, home, zl_tensor_data(sq), cnt,
                                  red == ZL_REDUCE_MEAN ? (double)cnt : 1.0, NULL, zl_tensor_data(out))) {
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
