/* View primitives: new headers over the same storage (reshape, permute,
 * narrow/select, expand), checked but recorded nowhere. The differentiable
 * zl_tensor_* views above core are built on these (ops/view.c). */
#include <stdlib.h>
#include <string.h>
#include "view.h"

/* Strides for viewing t as `shape` without copying, or false when impossible.
 * Old dims are taken from the back in chunks that are contiguous among
 * themselves; each chunk must be exactly covered by a run of new dims, which
 * then step through it with the chunk's base stride. Size-1 dims never matter. */
static bool view_strides(const zl_tensor *t, int ndim, const int64_t *shape, int64_t *stride)
{
    if (zl_tensor_is_contiguous(t) || zl_tensor_numel(t) == 0) {
        zli_contiguous_strides(ndim, shape, stride);
        return true;
    }
    int64_t osh[ZL_MAX_DIMS], ost[ZL_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1) { osh[on] = t->shape[i]; ost[on] = t->stride[i]; on++; }
    int vd = ndim - 1;
    int64_t base = ost[on - 1], chunk = 1, covered = 1;
    for (int d = on - 1; d >= 0; d--) {
        chunk *= osh[d];
        if (d > 0 && ost[d - 1] == chunk * base) continue;   /* chunk goes on */
        while (vd >= 0 && (covered < chunk || shape[vd] == 1)) {
            stride[vd] = covered * base;
            covered *= shape[vd];
            vd--;
        }
        if (covered != chunk) return false;
        if (d > 0) { base = ost[d - 1]; chunk = 1; covered = 1; }
    }
    for (; vd >= 0; vd--) {
        if (shape[vd] != 1) return false;
        stride[vd] = 1;
    }
    return true;
}

static zl_status infer_shape(const char *op, const zl_tensor *t, int ndim, const int64_t *shape,
                             int64_t *out)
{
    if (ndim < 0 || ndim > ZL_MAX_DIMS)
        return zl_error(ZL_EINVAL, "%s: %d dimensions requested, at most %d are supported", op, ndim, ZL_MAX_DIMS);
    int infer = -1;
    int64_t known = 1, n = zl_tensor_numel(t);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return zl_error(ZL_EINVAL, "%s: only one dimension can be -1", op);
            infer = i;
        } else if (shape[i] < 0) {
            return zl_error(ZL_EINVAL, "%s: invalid size %lld at dimension %d", op, (long long)shape[i], i);
        } else if (__builtin_mul_overflow(known, shape[i], &known)) {
            goto bad;
        }
        out[i] = shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || n % known != 0) goto bad;
        out[infer] = n / known;
    } else if (known != n) {
        goto bad;
    }
    if (!zli_shape_fits(ndim, out)) goto bad;   /* [0, 2^40, 2^40]: 0 elements, strides beyond int64 */
    return ZL_OK;
bad:;
    char a[128], b[128];
    return zl_error(ZL_ESHAPE, "%s: cannot reshape a tensor of shape %s (%lld elements) into %s", op,
                    zl_shape_str(t->ndim, t->shape, a, sizeof a), (long long)n,
                    zl_shape_str(ndim, shape, b, sizeof b));
}

zl_tensor *zli_reshape(const char *op, zl_tensor *t, int ndim, const int64_t *shape, bool allow_copy)
{
    int64_t sh[ZL_MAX_DIMS], st[ZL_MAX_DIMS];
    if (infer_shape(op, t, ndim, shape, sh)) return NULL;
    if (view_strides(t, ndim, sh, st)) return zli_view_of(t, ndim, sh, st, t->offset);
    if (allow_copy) {
        zl_tensor *c = zli_copy_as(t, t->dtype, ZL_MEM_ACTIVATIONS);
        zl_tensor *out = c ? zli_view_of(c, ndim, sh, (zli_contiguous_strides(ndim, sh, st), st), 0) : NULL;
        zl_tensor_release(c);
        return out;
    }
    char a[128], b[128];
    zl_error(ZL_ESHAPE, "view: a tensor of shape %s with these strides cannot be viewed as %s "
             "(use reshape, which copies)", zl_shape_str(t->ndim, t->shape, a, sizeof a),
             zl_shape_str(ndim, sh, b, sizeof b));
    return NULL;
}

zl_tensor *zli_permute(zl_tensor *t, const int *perm, int *norm)
{
    int64_t sh[ZL_MAX_DIMS], st[ZL_MAX_DIMS];
    bool seen[ZL_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        if (zli_norm_dim("permute", perm[i], t->ndim, &norm[i])) return NULL;
        if (seen[norm[i]]) {
            zl_error(ZL_EINVAL, "permute: dimension %d appears twice", perm[i]);
            return NULL;
        }
        seen[norm[i]] = true;
        sh[i] = t->shape[norm[i]];
        st[i] = t->stride[norm[i]];
    }
    return zli_view_of(t, t->ndim, sh, st, t->offset);
}

zl_tensor *zli_narrow(const char *op, zl_tensor *t, int *dim, int64_t *start, int64_t length, bool drop)
{
    int d;
    if (zli_norm_dim(op, *dim, t->ndim, &d)) return NULL;
    int64_t s = *start < 0 ? *start + t->shape[d] : *start;
    if (s < 0 || s > t->shape[d] || length < 0 || length > t->shape[d] - s) {
        zl_error(ZL_EINVAL, "%s: %lld elements from %lld are out of bounds for dimension %d of size %lld", op,
                 (long long)length, (long long)s, *dim, (long long)t->shape[d]);
        return NULL;
    }
    int64_t sh[ZL_MAX_DIMS], st[ZL_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == d && drop) continue;
        sh[nd] = i == d ? length : t->shape[i];
        st[nd++] = t->stride[i];
    }
    *dim = d;
    *start = s;
    return zli_view_of(t, nd, sh, st, t->offset + s * t->stride[d]);
}

zl_tensor *zli_expand(zl_tensor *t, int ndim, const int64_t *shape)
{
    int64_t sh[ZL_MAX_DIMS], st[ZL_MAX_DIMS];
    int lead = ndim - t->ndim;
    if (ndim < t->ndim || ndim > ZL_MAX_DIMS) goto bad;
    for (int i = 0; i < ndim; i++) {
        int64_t want = shape[i];
        if (i < lead) {
            if (want < 0) goto bad;
            sh[i] = want;
            st[i] = 0;
            continue;
        }
        int64_t have = t->shape[i - lead];
        if (want == -1) want = have;
        if (want == have) { sh[i] = have; st[i] = t->stride[i - lead]; }
        else if (have == 1 && want >= 0) { sh[i] = want; st[i] = 0; }
        else goto bad;
    }
    if (!zli_shape_fits(ndim, sh)) goto bad;   /* more elements than int64 counts */
    return zli_view_of(t, ndim, sh, st, t->offset);
bad:;
    char a[128], b[128];
    zl_error(ZL_ESHAPE, "expand: cannot expand shape %s to %s", zl_shape_str(t->ndim, t->shape, a, sizeof a),
             zl_shape_str(ndim, shape, b, sizeof b));
    return NULL;
}
