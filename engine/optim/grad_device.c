/* The mixed-precision passes (zlua/optim.h: zl_grad_nonfinite, zl_grad_norm_sq,
 * zl_grad_scale) over a list on a device: each tensor a span of the device's
 * memory (a strided one read through a contiguous copy made there), the pass
 * the device's table; the norm's chunk sums added in the host's order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../ops/op_util.h"
#include "device_optim.h"

typedef struct spans {
    zli_dev_span *s;
    int n;
    zl_tensor **copies;   /* contiguous copies of strided tensors, released with the spans */
    int ncopies;
    const zli_dev_optim *o;
    int index;
} spans;

static void spans_free(spans *l)
{
    for (int i = 0; i < l->ncopies; i++) zl_tensor_release(l->copies[i]);
    free(l->copies);
    free(l->s);
}

/* The non-empty tensors of ts as spans; a strided one is copied unless
 * `in_place` (the pass writes it), which refuses it. */
static zl_status spans_make(const char *op, zl_tensor *const *ts, int n, bool in_place, spans *l)
{
    memset(l, 0, sizeof *l);
    if (n == 0) return ZL_OK;
    if (!(l->o = zli_dev_optim_of(op, ts[0]))) return ZL_EDEVICE;
    l->index = zl_tensor_device_index(ts[0]);
    l->s = malloc((size_t)n * sizeof *l->s);
    l->copies = malloc((size_t)n * sizeof *l->copies);
    if (!l->s || !l->copies) {
        spans_free(l);
        return zl_error(ZL_ENOMEM, "%s: out of memory", op);
    }
    for (int i = 0; i < n; i++) {
        zl_tensor *t = ts[i];
        if (zl_tensor_numel(t) == 0) continue;
        if (!zl_tensor_is_contiguous(t)) {
            char where[32];
            zl_device_str(zl_tensor_device(t), zl_tensor_device_index(t), where, sizeof where);
            if (in_place) {
                spans_free(l);
                return zl_error(ZL_EINVAL, "%s: tensor %d of the list is a strided view on %s; scale the tensor it "
                                "views", op, i, where);
            }
            if (!(t = zl_tensor_contiguous(t))) {
                spans_free(l);
                return zli_last_code();
            }
            l->copies[l->ncopies++] = t;
        }
        l->s[l->n++] = (zli_dev_span){.x = zl_tensor_data(t), .dt = zl_tensor_dtype(t), .n = zl_tensor_numel(t)};
    }
    return ZL_OK;
}

zl_status zli_grad_nonfinite_device(zl_tensor *const *ts, int n, bool *found)
{
    spans l;
    if (spans_make("grad_nonfinite", ts, n, false, &l)) return zli_last_code();
    bool any = false;
    zl_status st = l.n ? l.o->nonfinite(l.index, l.s, l.n, &any) : ZL_OK;
    spans_free(&l);
    if (!st) *found = any;
    return st;
}

zl_status zli_grad_norm_sq_device(zl_tensor *const *ts, int n, double *out)
{
    spans l;
    if (spans_make("grad_norm_sq", ts, n, false, &l)) return zli_last_code();
    int64_t nc = 0;
    for (int i = 0; i < l.n; i++) nc += (l.s[i].n + ZLI_GRAD_CHUNK - 1) / ZLI_GRAD_CHUNK;
    double *part = malloc((size_t)(nc ? nc : 1) * sizeof *part);
    zl_status st = part ? ZL_OK : zl_error(ZL_ENOMEM, "grad_norm_sq: out of memory for %lld partial sums",
                                           (long long)nc);
    if (!st && l.n) st = l.o->sumsq(l.index, l.s, l.n, part);
    double s = 0;
    for (int64_t i = 0; i < nc && !st; i++) s += part[i];
    free(part);
    spans_free(&l);
    if (!st) *out = s;
    return st;
}

zl_status zli_grad_scale_device(zl_tensor *const *ts, int n, float s)
{
    spans l;
    if (spans_make("grad_scale", ts, n, true, &l)) return zli_last_code();
    zl_status st = l.n ? l.o->scale(l.index, l.s, l.n, s) : ZL_OK;
    spans_free(&l);
    return st;
}
