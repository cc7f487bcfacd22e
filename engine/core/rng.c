/* Philox-4x32-10 counter-based generator. A draw of n numbers takes counters
 * offset .. offset+n-1, one per element, and advances the offset by n: any
 * split of the elements across threads, or a device, gives the same numbers.
 * NULL names the current context's generator. */
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include "tensor_impl.h"
#include "context_impl.h"
/* The per-element draw, shared with the CUDA kernels: a libc-only header. */
#include "../math/rng.h"

static zl_generator *gen(zl_generator *g) { return g ? g : &zl_context_current()->rng; }
static const zl_generator *cgen(const zl_generator *g) { return g ? g : &zl_context_current()->rng; }

zl_generator *zl_generator_new(uint64_t seed)
{
    zl_generator *g = calloc(1, sizeof *g);
    if (!g) { zl_error(ZL_ENOMEM, "generator: out of memory"); return NULL; }
    g->seed = seed;
    return g;
}

void zl_generator_free(zl_generator *g) { if (g && !g->in_context) free(g); }
void zl_generator_seed(zl_generator *g, uint64_t seed) { gen(g)->seed = seed; gen(g)->offset = 0; }
uint64_t zl_generator_get_seed(const zl_generator *g) { return cgen(g)->seed; }
uint64_t zl_generator_get_offset(const zl_generator *g) { return cgen(g)->offset; }
void zl_generator_set_offset(zl_generator *g, uint64_t off) { gen(g)->offset = off; }
void zl_manual_seed(uint64_t seed) { zl_generator_seed(NULL, seed); }

/* The host fills ZLI_RAND_BLOCK elements at a time: first every element's
 * Philox words, a loop of integer arithmetic alone that the compiler turns
 * into vector instructions (the draw's cost), then the values from them,
 * each as zlm_rand_value computes it, so the numbers are the same bits. */
void zli_rand_block(bool normal, double a, double b, uint64_t key, uint64_t base, int m, float *v)
{
    uint32_t w0[ZLI_RAND_BLOCK], w1[ZLI_RAND_BLOCK];
    for (int j = 0; j < m; j++) {
        uint32_t r[4];
        zlm_philox(base + (uint64_t)j, key, r);
        w0[j] = r[0];
        w1[j] = r[1];
    }
    if (normal) {
        for (int j = 0; j < m; j++) v[j] = zlm_normal_of(a, b, w0[j], w1[j]);
    } else {
        for (int j = 0; j < m; j++) v[j] = zlm_uniform_of(a, b, w0[j]);
    }
}

/* A tensor on a device is filled there by the device's rand primitive, from
 * the same counters; one without it is refused by name. */
static zl_status fill(zl_tensor *t, bool normal, double a, double b, zl_generator *g)
{
    const char *op = normal ? "normal_" : "uniform_";
    if (zli_check_arg(op, "tensor", t)) return ZL_EINVAL;
    const zli_device_ops *dev = t->storage->dev;
    if (dev && !dev->rand && zli_need_host(op, "the tensor", t)) return ZL_EDEVICE;
    if (!zl_dtype_traits_of(t->dtype)->is_float)
        return zl_error(ZL_EDTYPE, "%s: needs a float tensor, got %s", op, zl_dtype_name(t->dtype));
    if (!zl_tensor_is_contiguous(t)) return zl_error(ZL_EINVAL, "%s: needs a contiguous tensor", op);
    g = gen(g);
    int64_t n = zl_tensor_numel(t);
    uint64_t base = g->offset, key = g->seed;
    if (dev) {
        zl_status st = dev->rand(t, normal, a, b, key, base);
        if (!st) g->offset += (uint64_t)n;
        return st;
    }
    g->offset += (uint64_t)n;
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    char *p = zl_tensor_data(t);
    int64_t blocks = (n + ZLI_RAND_BLOCK - 1) / ZLI_RAND_BLOCK;
    #pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t k = 0; k < blocks; k++) {
        int64_t i0 = k * ZLI_RAND_BLOCK, m = n - i0 < ZLI_RAND_BLOCK ? n - i0 : ZLI_RAND_BLOCK;
        float v[ZLI_RAND_BLOCK];
        zli_rand_block(normal, a, b, key, base + (uint64_t)i0, (int)m, v);
        if (t->dtype == ZL_DTYPE_F32)
            memcpy((float *)p + i0, v, (size_t)m * sizeof(float));
        else
            for (int64_t j = 0; j < m; j++) tr->from_f32(p + (i0 + j) * (int64_t)tr->size, v[j]);
    }
    return ZL_OK;
}

zl_status zl_tensor_uniform_(zl_tensor *t, double lo, double hi, zl_generator *g) { return fill(t, false, lo, hi, g); }
zl_status zl_tensor_normal_(zl_tensor *t, double mean, double std, zl_generator *g) { return fill(t, true, mean, std, g); }

static zl_tensor *make(zl_dtype dt, int ndim, const int64_t *shape, bool normal, zl_generator *g)
{
    zl_tensor *t = zl_tensor_new(dt, ndim, shape, ZL_MEM_OTHER);
    if (t && fill(t, normal, normal ? 0.0 : 0.0, 1.0, g)) { zl_tensor_release(t); return NULL; }
    return t;
}

zl_tensor *zl_tensor_rand(zl_dtype dt, int ndim, const int64_t *shape, zl_generator *g) { return make(dt, ndim, shape, false, g); }
zl_tensor *zl_tensor_randn(zl_dtype dt, int ndim, const int64_t *shape, zl_generator *g) { return make(dt, ndim, shape, true, g); }

int64_t zl_generator_randint(zl_generator *g, int64_t n)
{
    if (n <= 0) return zl_error(ZL_EINVAL, "zl_generator_randint: n must be > 0, got %lld", (long long)n), -1;
    g = gen(g);
    uint32_t r[4];
    zlm_philox(g->offset++, g->seed, r);
    uint64_t x = ((uint64_t)r[0] << 32) | r[1];
    return (int64_t)(x % (uint64_t)n);
}

zl_tensor *zl_randperm(int64_t n, zl_generator *g)
{
    zl_tensor *t = zl_tensor_arange(ZL_DTYPE_I64, n);
    if (!t) return NULL;
    int64_t *p = zl_tensor_data(t);
    for (int64_t i = n - 1; i > 0; i--) {   /* Fisher-Yates */
        int64_t j = zl_generator_randint(g, i + 1), tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
    return t;
}
