/* Private helpers shared by the ops and their CPU kernels: dtype promotion, broadcasting
 * strides, output allocation, and the parallel-for threshold. */
#ifndef ZL_OP_UTIL_H
#define ZL_OP_UTIL_H

#include "../autograd/node.h"

/* Below this many elements a kernel runs on one thread: forking costs more. */
#define ZLI_PAR_MIN 32768

/* Sum of n floats in double, in fixed ZLI_SUM_CHUNK-element chunks added in
 * order: the same bits for any thread count (and when memory for the partial
 * sums is short, which only makes it serial). */
#define ZLI_SUM_CHUNK 4096
ZLI_HIDDEN double zli_sum_fixed(const float *x, int64_t n);

/* Result dtype of a binary op: equal dtypes keep theirs, a float beats an
 * integer, two different floats give f32, two different integers give i64. */
ZLI_HIDDEN zl_dtype zli_promote(zl_dtype a, zl_dtype b);
/* Strides that read t (any layout) as if broadcast to out_shape (0 on stretched dims). */
ZLI_HIDDEN void zli_bcast_strides(const zl_tensor *t, int ndim, const int64_t *out_shape, int64_t *stride);
/* A new f32 tensor charged to activations. */
ZLI_HIDDEN zl_tensor *zli_new_f32(int ndim, const int64_t *shape);
/* Convert an f32 result to dtype dt (releasing f32 when a conversion happened). */
ZLI_HIDDEN zl_tensor *zli_cast_result(zl_tensor *f32, zl_dtype dt);
/* Error naming both shapes: "<op>: <what> (shapes [a] and [b])". */
ZLI_HIDDEN zl_status zli_shape_error(const char *op, const char *what, const zl_tensor *a, const zl_tensor *b);
/* Sum g ([gshape]) down to `shape` (the reverse of broadcasting), f32 contiguous. */
ZLI_HIDDEN zl_tensor *zli_sum_to_shape(zl_tensor *g, int ndim, const int64_t *shape);
/* Check that t is a float tensor for op; names the role. */
ZLI_HIDDEN zl_status zli_need_float(const char *op, const char *role, const zl_tensor *t);
/* Ops a device has no kernels for run on the host (integers exact in 64
 * bits, and gather, scatter, var, cumsum), through the device's own copies:
 * t's values in host memory, contiguous, in dtype dt (t itself, retained,
 * when it is that already), and a host result r in dtype dt moved to where
 * `like` lives (r is released). */
ZLI_HIDDEN zl_tensor *zli_host_copy(zl_tensor *t, zl_dtype dt);
ZLI_HIDDEN zl_tensor *zli_host_result(zl_tensor *r, zl_dtype dt, const zl_tensor *like);
/* A norm over x's last nnorm dims (layer_norm, rms_norm): nnorm in
 * 1..ndim, and each of params[np] that is not NULL (named roles[i]) of
 * exactly those dims' shape; *rows and *m [out] the rows x is normalised in
 * and their length. The error names op. */
ZLI_HIDDEN zl_status zli_norm_dims(const char *op, const zl_tensor *x, int nnorm, int np,
                                   const zl_tensor *const *params, const char *const *roles, int64_t *rows,
                                   int64_t *m);
/* ZL_EDTYPE naming op and role unless t is an index tensor (i64 or i32). */
ZLI_HIDDEN zl_status zli_need_index(const char *op, const char *role, const zl_tensor *t);
/* Check that t is an index tensor (i64/i32) and copy it into a contiguous i64 array (malloc'd). */
ZLI_HIDDEN zl_status zli_index_array(const char *op, const char *role, const zl_tensor *t, int64_t **out);

#endif
