/* Private: core's view primitives (view.c). Each returns a new tensor header
 * over t's storage, or NULL with an error naming op; none records history. */
#ifndef ZL_CORE_VIEW_H
#define ZL_CORE_VIEW_H

#include "tensor_impl.h"

/* t as `shape` (one size may be -1, inferred). When strides forbid a view:
 * a contiguous copy if allow_copy, else ZL_ESHAPE. */
ZLI_HIDDEN zl_tensor *zli_reshape(const char *op, zl_tensor *t, int ndim, const int64_t *shape, bool allow_copy);
/* Dimensions reordered: out dim i is t's perm[i]. norm[t->ndim] [out]: perm
 * with negative dims normalised. */
ZLI_HIDDEN zl_tensor *zli_permute(zl_tensor *t, const int *perm, int *norm);
/* `length` elements of *dim from *start (either may be negative, counted from
 * the end); drop: remove that dimension (select). On success *dim and *start
 * hold the normalised values. */
ZLI_HIDDEN zl_tensor *zli_narrow(const char *op, zl_tensor *t, int *dim, int64_t *start, int64_t length,
                                 bool drop);
/* t broadcast to `shape` (new leading dims, size-1 dims stretched with stride 0;
 * -1 keeps a size). */
ZLI_HIDDEN zl_tensor *zli_expand(zl_tensor *t, int ndim, const int64_t *shape);

#endif
