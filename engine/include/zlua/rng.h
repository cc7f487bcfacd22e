/* zlua/rng.h — counter-based random numbers (Philox-4x32-10). Element i of a draw
 * depends only on (seed, offset + i), so results do not depend on thread count. */
#ifndef ZLUA_RNG_H
#define ZLUA_RNG_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zl_generator zl_generator;

/* NULL everywhere below means the current context's default generator
 * (zlua/context.h); a host that makes no context has one for the process. */
ZL_API zl_generator *zl_generator_new(uint64_t seed);
ZL_API void zl_generator_free(zl_generator *g);
ZL_API void zl_generator_seed(zl_generator *g, uint64_t seed);
ZL_API uint64_t zl_generator_get_seed(const zl_generator *g);
/* The number of counters consumed so far; with the seed it is the full state. */
ZL_API uint64_t zl_generator_get_offset(const zl_generator *g);
ZL_API void zl_generator_set_offset(zl_generator *g, uint64_t offset);
/* Seed the current context's default generator. */
ZL_API void zl_manual_seed(uint64_t seed);

/* Fill in place (contiguous float tensors of any float dtype). */
ZL_API zl_status zl_tensor_uniform_(zl_tensor *t, double lo, double hi, zl_generator *g);
ZL_API zl_status zl_tensor_normal_(zl_tensor *t, double mean, double std, zl_generator *g);
/* New tensors. */
ZL_API zl_tensor *zl_tensor_rand(zl_dtype dt, int ndim, const int64_t *shape, zl_generator *g);
ZL_API zl_tensor *zl_tensor_randn(zl_dtype dt, int ndim, const int64_t *shape, zl_generator *g);
/* A random permutation of 0..n-1 as i64. */
ZL_API zl_tensor *zl_randperm(int64_t n, zl_generator *g);
/* One uniform integer in [0, n) (consumes one counter); -1 and an error,
 * consuming none, when n <= 0. */
ZL_API int64_t zl_generator_randint(zl_generator *g, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
