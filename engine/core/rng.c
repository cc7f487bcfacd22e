/* Philox-4x32-10 counter-based generator. A draw of n numbers takes counters
 * offset .. offset+n-1, one per element, and advances the offset by n: any
 * split of the elements across threads gives the same numbers. NULL names the
 * current context's generator. */
#include <stdlib.h>
#include <math.h>
#include "tensor_impl.h"
#include "context_impl.h"

static inline void philox(uint64_t counter, uint64_t key, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static inline float u01(uint32_t x) { return (float)(x >> 8) * 0x1p-24f; }          /* [0, 1) */
static inline float u01_open(uint32_t x) { return ((float)(x >> 8) + 0.5f) * 0x1p-24f; } /* (0, 1) */

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

static zl_status fill(zl_tensor *t, bool normal, double a, double b, zl_generator *g)
{
    if (zli_check_arg(normal ? "normal_" : "uniform_", "tensor", t)) return ZL_EINVAL;
    if (zli_need_host(normal ? "normal_" : "uniform_", "the tensor", t)) return ZL_EDEVICE;
    if (!zl_dtype_traits_of(t->dtype)->is_float)
        return zl_error(ZL_EDTYPE, "%s: needs a float tensor, got %s", normal ? "normal_" : "uniform_",
                        zl_dtype_name(t->dtype));
    if (!zl_tensor_is_contiguous(t))
        return zl_error(ZL_EINVAL, "%s: needs a contiguous tensor", normal ? "normal_" : "uniform_");
    g = gen(g);
    int64_t n = zl_tensor_numel(t);
    uint64_t base = g->offset, key = g->seed;
    g->offset += (uint64_t)n;
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    char *p = zl_tensor_data(t);
    bool f32 = t->dtype == ZL_DTYPE_F32;
    #pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i++) {
        uint32_t r[4];
        philox(base + (uint64_t)i, key, r);
        float v;
        if (normal) {
            float u1 = u01_open(r[0]), u2 = u01(r[1]);
            v = (float)(a + b * (sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2)));
        } else {
            v = (float)(a + (b - a) * u01(r[0]));
        }
        if (f32) ((float *)p)[i] = v;
        else tr->from_f32(p + i * (int64_t)tr->size, v);
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
    g = gen(g);
    uint32_t r[4];
    philox(g->offset++, g->seed, r);
    uint64_t x = ((uint64_t)r[0] << 32) | r[1];
    return n > 0 ? (int64_t)(x % (uint64_t)n) : 0;
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
