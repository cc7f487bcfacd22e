/* zlua/tensor.h — tensors: a refcounted storage plus a view (shape, strides in
 * elements, offset). Views share storage; dims are 0-based, negative dims count
 * from the end. Shapes are outermost first with the last dimension contiguous. */
#ifndef ZLUA_TENSOR_H
#define ZLUA_TENSOR_H

#include "base.h"
#include "dtype.h"
#include "memory.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZL_MAX_DIMS 8

typedef struct zl_tensor zl_tensor;

typedef enum zl_device { ZL_DEVICE_CPU = 0, ZL_DEVICE_CUDA = 1 } zl_device;

/* ---- creation: each returns a new reference, or NULL with zl_last_error() ---- */

/* Uninitialised contiguous tensor charged to `cat`. ndim may be 0 (a scalar). */
ZL_API zl_tensor *zl_tensor_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat);
ZL_API zl_tensor *zl_tensor_zeros(zl_dtype dt, int ndim, const int64_t *shape);
ZL_API zl_tensor *zl_tensor_full(zl_dtype dt, int ndim, const int64_t *shape, double value);
/* Copy n = prod(shape) elements of `data` (of dtype dt) into a new tensor. */
ZL_API zl_tensor *zl_tensor_from_data(zl_dtype dt, int ndim, const int64_t *shape, const void *data);
/* 0, 1, ..., n-1 */
ZL_API zl_tensor *zl_tensor_arange(zl_dtype dt, int64_t n);
ZL_API zl_tensor *zl_tensor_scalar(zl_dtype dt, double value);

/* ---- references ---- */
ZL_API zl_tensor *zl_tensor_retain(zl_tensor *t);   /* returns t; NULL is a no-op */
ZL_API void zl_tensor_release(zl_tensor *t);        /* NULL is a no-op */

/* ---- inspection (borrowed) ---- */
ZL_API int zl_tensor_ndim(const zl_tensor *t);
ZL_API int64_t zl_tensor_size(const zl_tensor *t, int dim);     /* dim may be negative; -1 and an error if invalid */
ZL_API const int64_t *zl_tensor_shape(const zl_tensor *t);      /* ndim entries */
ZL_API const int64_t *zl_tensor_strides(const zl_tensor *t);    /* ndim entries, in elements */
ZL_API int64_t zl_tensor_offset(const zl_tensor *t);
ZL_API int64_t zl_tensor_numel(const zl_tensor *t);
ZL_API zl_dtype zl_tensor_dtype(const zl_tensor *t);
ZL_API zl_device zl_tensor_device(const zl_tensor *t);
ZL_API bool zl_tensor_is_contiguous(const zl_tensor *t);
/* Pointer to element [0,...,0]. Valid while the tensor lives. */
ZL_API void *zl_tensor_data(const zl_tensor *t);
ZL_API zl_mem_category zl_tensor_category(const zl_tensor *t);
/* Make t a view of src's data (shape, dtype, storage), as PyTorch's `p.data = src`:
 * the tensor object stays the same (modules and hooks keep referring to it), its
 * contents change. For leaves only (ZL_ESTATE for a tensor produced by an op);
 * a gradient of another shape or dtype is dropped. Used to turn parameters into
 * half-precision working copies and, for ZeRO-3, to swap a parameter's data. */
ZL_API zl_status zl_tensor_set_data(zl_tensor *t, zl_tensor *src);
/* Move the tensor's whole storage to another memory category (a parameter
 * created as a plain tensor, say). */
ZL_API void zl_tensor_set_category(zl_tensor *t, zl_mem_category cat);
/* True when both views read the same storage. */
ZL_API bool zl_tensor_shares_storage(const zl_tensor *a, const zl_tensor *b);
/* Format "[2, 3]" into buf (always NUL-terminated); returns buf. */
ZL_API char *zl_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Element access by linear index in logical (row-major) order; get gives NaN
 * and sets the error for an index out of range or a tensor on a device. */
ZL_API double zl_tensor_get(const zl_tensor *t, int64_t linear_index);
ZL_API zl_status zl_tensor_set(zl_tensor *t, int64_t linear_index, double value);
/* Element access by a full index (ndim entries). */
ZL_API zl_status zl_tensor_get_at(const zl_tensor *t, const int64_t *index, double *out);
/* Copy every element, in logical order, converted to f64 / f32. `out` holds numel. */
ZL_API zl_status zl_tensor_to_f64(const zl_tensor *t, double *out);

/* ---- in-place (no autograd recording; an error on a leaf that requires grad
 * while grad mode is on, as in PyTorch) ---- */
ZL_API zl_status zl_tensor_fill(zl_tensor *t, double value);
/* dst = src (broadcast src to dst's shape; dtype converted). */
ZL_API zl_status zl_tensor_copy_(zl_tensor *dst, const zl_tensor *src);
/* dst += alpha * src (src broadcast to dst's shape, any dtypes; the sum is taken
 * in f32). Accumulates gradients across micro-steps without an allocation. */
ZL_API zl_status zl_tensor_add_(zl_tensor *dst, const zl_tensor *src, double alpha);

/* ---- views: new tensor header sharing storage; recorded by autograd ---- */
/* Reshape: a view when strides allow, otherwise a copy. One entry may be -1. */
ZL_API zl_tensor *zl_tensor_reshape(zl_tensor *t, int ndim, const int64_t *shape);
/* View: like reshape but fails instead of copying. */
ZL_API zl_tensor *zl_tensor_view(zl_tensor *t, int ndim, const int64_t *shape);
ZL_API zl_tensor *zl_tensor_transpose(zl_tensor *t, int d0, int d1);
ZL_API zl_tensor *zl_tensor_permute(zl_tensor *t, const int *perm);   /* ndim entries */
/* Elements [start, start+length) along dim. */
ZL_API zl_tensor *zl_tensor_narrow(zl_tensor *t, int dim, int64_t start, int64_t length);
/* Pick index along dim and drop that dim. */
ZL_API zl_tensor *zl_tensor_select(zl_tensor *t, int dim, int64_t index);
/* Broadcast to shape (size-1 dims stretched with stride 0; new leading dims). -1 keeps a size. */
ZL_API zl_tensor *zl_tensor_expand(zl_tensor *t, int ndim, const int64_t *shape);
ZL_API zl_tensor *zl_tensor_squeeze(zl_tensor *t, int dim);
ZL_API zl_tensor *zl_tensor_unsqueeze(zl_tensor *t, int dim);
/* t itself (retained) when already contiguous, otherwise a contiguous copy. */
ZL_API zl_tensor *zl_tensor_contiguous(zl_tensor *t);
/* A copy with dtype `dt` (differentiable between float dtypes). */
ZL_API zl_tensor *zl_tensor_to(zl_tensor *t, zl_dtype dt);
/* A contiguous copy (differentiable). */
ZL_API zl_tensor *zl_tensor_clone(zl_tensor *t);
/* Same data, no autograd history, requires_grad false. */
ZL_API zl_tensor *zl_tensor_detach(zl_tensor *t);

/* Broadcast the shapes of a and b (numpy rules) into out (ZL_MAX_DIMS entries). */
ZL_API zl_status zl_broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b,
                                     int *nout, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
