/* Passes over a list of gradient tensors for mixed precision: the inf/NaN check
 * that marks an fp16 step as overflowed, the global sum of squares behind
 * gradient clipping, scaling in place, and the clip coefficient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../ops/op_util.h"
#include "device_optim.h"
#ifdef __F16C__
#include <immintrin.h>
#endif

/* Design note. A pass cuts its tensors into chunks of at most GRAD_CHUNK
 * elements (a chunk never spans two tensors) and runs the chunks in parallel,
 * so many small tensors and one large one keep both cores busy alike. The sum
 * of squares is taken per chunk in double, in fixed lanes, and the chunk sums
 * are added in list order: the result is the same for any thread count. The
 * overflow check is an OR, exact in any order. A strided tensor is read
 * through a contiguous copy (gradients are almost always contiguous). */
#define GRAD_CHUNK ZLI_GRAD_CHUNK
#define LANES 8

typedef struct chunk {
    const void *p;
    zl_dtype dt;
    int64_t n;
} chunk;

typedef struct chunk_list {
    chunk *c;
    int64_t n;
    int64_t elems;
    zl_tensor **copies;   /* contiguous copies of strided tensors, released with the list */
    int ncopies;
} chunk_list;

static void list_free(chunk_list *l)
{
    for (int i = 0; i < l->ncopies; i++) zl_tensor_release(l->copies[i]);
    free(l->copies);
    free(l->c);
}

/* The list checked; *on_device when it lives on a device (all of it on one). */
static zl_status check_list(const char *op, zl_tensor *const *ts, int n, bool *on_device)
{
    if (n < 0) return zl_error(ZL_EINVAL, "%s: the tensor count must be >= 0, got %d", op, n);
    if (n > 0 && !ts) return zl_error(ZL_EINVAL, "%s: the tensor list is NULL", op);
    for (int i = 0; i < n; i++) {
        char role[32], shape[128];
        snprintf(role, sizeof role, "tensor %d of the list", i);
        if (zli_check_arg(op, role, ts[i])) return zli_last_code();
        const zl_tensor *t = ts[i];
        if (t->storage->dev != ts[0]->storage->dev || t->storage->dev_index != ts[0]->storage->dev_index) {
            char here[32], first[32];
            zl_device_str(zl_tensor_device(t), zl_tensor_device_index(t), here, sizeof here);
            zl_device_str(zl_tensor_device(ts[0]), zl_tensor_device_index(ts[0]), first, sizeof first);
            return zl_error(ZL_EDEVICE, "%s: %s is on %s and tensor 0 on %s: a list lives in one place", op, role,
                            here, first);
        }
        if (t->dtype != ZL_DTYPE_F32 && t->dtype != ZL_DTYPE_BF16 && t->dtype != ZL_DTYPE_F16)
            return zl_error(ZL_EDTYPE, "%s: %s (shape %s) is %s; gradients must be f32, bf16 or f16", op, role,
                            zl_shape_str(t->ndim, t->shape, shape, sizeof shape), zl_dtype_name(t->dtype));
    }
    *on_device = n > 0 && ts[0]->storage->dev != NULL;
    return ZL_OK;
}

static zl_status list_make(const char *op, zl_tensor *const *ts, int n, chunk_list *l)
{
    memset(l, 0, sizeof *l);
    int64_t nc = 0;
    for (int i = 0; i < n; i++) nc += (zl_tensor_numel(ts[i]) + GRAD_CHUNK - 1) / GRAD_CHUNK;
    l->c = malloc((size_t)(nc ? nc : 1) * sizeof *l->c);
    l->copies = malloc((size_t)(n > 0 ? n : 1) * sizeof *l->copies);
    if (!l->c || !l->copies) {
        list_free(l);
        return zl_error(ZL_ENOMEM, "%s: out of memory", op);
    }
    for (int i = 0; i < n; i++) {
        zl_tensor *t = ts[i];
        int64_t numel = zl_tensor_numel(t);
        if (numel == 0) continue;
        if (!zl_tensor_is_contiguous(t)) {
            t = zli_copy_as(t, t->dtype, ZL_MEM_OTHER);
            if (!t) {
                list_free(l);
                return ZL_ENOMEM;
            }
            l->copies[l->ncopies++] = t;
        }
        const char *base = zl_tensor_data(t);
        size_t es = zl_dtype_size(t->dtype);
        for (int64_t at = 0; at < numel; at += GRAD_CHUNK) {
            int64_t len = numel - at < GRAD_CHUNK ? numel - at : GRAD_CHUNK;
            l->c[l->n++] = (chunk){base + (size_t)at * es, t->dtype, len};
        }
        l->elems += numel;
    }
    return ZL_OK;
}

/* ---- inf/NaN: an all-ones exponent, found as the largest exponent field ---- */

static bool nonfinite_f32(const uint32_t *restrict u, int64_t n)   /* u [n] */
{
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t e = u[i] & 0x7f800000u;
        m = e > m ? e : m;
    }
    return m == 0x7f800000u;
}

static bool nonfinite_half(const uint16_t *restrict h, int64_t n, uint16_t exp_mask)   /* h [n] */
{
    uint16_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t e = h[i] & exp_mask;
        m = e > m ? e : m;
    }
    return m == exp_mask;
}

static bool chunk_nonfinite(const chunk *c)
{
    switch (c->dt) {
    case ZL_DTYPE_F32: return nonfinite_f32(c->p, c->n);
    case ZL_DTYPE_BF16: return nonfinite_half(c->p, c->n, 0x7f80u);
    case ZL_DTYPE_F16: return nonfinite_half(c->p, c->n, 0x7c00u);
    default: return false;
    }
}

zl_status zl_grad_nonfinite(zl_tensor *const *tensors, int n, bool *found)
{
    if (!found) return zl_error(ZL_EINVAL, "grad_nonfinite: the result pointer is NULL");
    bool dev;
    if (check_list("grad_nonfinite", tensors, n, &dev)) return zli_last_code();
    if (dev) return zli_grad_nonfinite_device(tensors, n, found);
    chunk_list l;
    if (list_make("grad_nonfinite", tensors, n, &l)) return zli_last_code();
    int any = 0;
    #pragma omp parallel for schedule(static) reduction(| : any) if (l.elems > ZLI_PAR_MIN)
    for (int64_t i = 0; i < l.n; i++) any |= chunk_nonfinite(&l.c[i]);
    list_free(&l);
    *found = any != 0;
    return ZL_OK;
}

/* ---- sum of squares in double, LANES fixed partial sums per chunk ---- */

static double lanes_total(const double acc[LANES], double tail)
{
    double s = tail;
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

static double sumsq_f32(const float *restrict x, int64_t n)   /* x [n] */
{
    double acc[LANES] = {0}, tail = 0;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) tail += (double)x[i] * (double)x[i];
    return lanes_total(acc, tail);
}

static double sumsq_bf16(const uint16_t *restrict h, int64_t n)   /* h [n] */
{
    double acc[LANES] = {0}, tail = 0;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            uint32_t u = (uint32_t)h[i + k] << 16;
            float f;
            memcpy(&f, &u, 4);
            acc[k] += (double)f * (double)f;
        }
    for (; i < n; i++) {
        double f = zl_bf16_to_f32(h[i]);
        tail += f * f;
    }
    return lanes_total(acc, tail);
}

static double sumsq_f16(const uint16_t *restrict h, int64_t n)   /* h [n] */
{
    double acc[LANES] = {0}, tail = 0;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        float f[LANES];
#ifdef __F16C__
        _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
#else
        for (int k = 0; k < LANES; k++) f[k] = zl_f16_to_f32(h[i + k]);
#endif
        for (int k = 0; k < LANES; k++) acc[k] += (double)f[k] * (double)f[k];
    }
    for (; i < n; i++) {
        double f = zl_f16_to_f32(h[i]);
        tail += f * f;
    }
    return lanes_total(acc, tail);
}

static double chunk_sumsq(const chunk *c)
{
    switch (c->dt) {
    case ZL_DTYPE_F32: return sumsq_f32(c->p, c->n);
    case ZL_DTYPE_BF16: return sumsq_bf16(c->p, c->n);
    case ZL_DTYPE_F16: return sumsq_f16(c->p, c->n);
    default: return 0;
    }
}

zl_status zl_grad_norm_sq(zl_tensor *const *tensors, int n, double *out)
{
    if (!out) return zl_error(ZL_EINVAL, "grad_norm_sq: the result pointer is NULL");
    *out = 0;
    return zl_grad_norm_sq_add(tensors, n, out);
}

zl_status zl_grad_norm_sq_add(zl_tensor *const *tensors, int n, double *acc)
{
    if (!acc) return zl_error(ZL_EINVAL, "grad_norm_sq: the result pointer is NULL");
    bool dev;
    if (check_list("grad_norm_sq", tensors, n, &dev)) return zli_last_code();
    if (dev) {
        double s;
        zl_status st = zli_grad_norm_sq_device(tensors, n, &s);
        if (!st) *acc += s;
        return st;
    }
    chunk_list l;
    if (list_make("grad_norm_sq", tensors, n, &l)) return zli_last_code();
    double *part = malloc((size_t)(l.n ? l.n : 1) * sizeof *part);
    if (!part) {
        list_free(&l);
        return zl_error(ZL_ENOMEM, "grad_norm_sq: out of memory");
    }
    #pragma omp parallel for schedule(static) if (l.elems > ZLI_PAR_MIN)
    for (int64_t i = 0; i < l.n; i++) part[i] = chunk_sumsq(&l.c[i]);
    double s = *acc;
    for (int64_t i = 0; i < l.n; i++) s += part[i];
    free(part);
    list_free(&l);
    *acc = s;
    return ZL_OK;
}

/* ---- scaling in place ---- */

static void scale_f32(float *restrict x, int64_t n, float s)   /* x [n], in place */
{
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

/* Round to nearest even, NaN kept quiet: bit for bit zl_f32_to_bf16, inlined
 * so that the loop vectorises. */
static inline uint16_t round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void scale_bf16(uint16_t *restrict h, int64_t n, float s)   /* h [n], in place */
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        h[i] = round_bf16(f * s);
    }
}

/* F16C's conversions round to nearest even as zl_f32_to_f16 does; only NaN
 * payloads may differ. */
static void scale_f16(uint16_t *restrict h, int64_t n, float s)   /* h [n], in place */
{
    int64_t i = 0;
#ifdef __F16C__
    __m256 vs = _mm256_set1_ps(s);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))), vs);
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
#endif
    for (; i < n; i++) h[i] = zl_f32_to_f16(zl_f16_to_f32(h[i]) * s);
}

/* A strided tensor in place, element by element. */
static void scale_strided(zl_tensor *t, float s)
{
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    char *base = zl_tensor_data(t);
    int64_t n = zl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        char *p = base + zli_linear_offset(t, i) * (int64_t)tr->size;
        tr->from_f32(p, tr->to_f32(p) * s);
    }
}

zl_status zl_grad_scale(zl_tensor *const *tensors, int n, double s)
{
    if (!isfinite(s)) return zl_error(ZL_EINVAL, "grad_scale: the factor must be finite, got %g", s);
    bool dev;
    if (check_list("grad_scale", tensors, n, &dev)) return zli_last_code();
    /* Chunks run in parallel: a storage listed twice would be updated by two threads at once. */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (zl_tensor_shares_storage(tensors[i], tensors[j]))
                return zl_error(ZL_EINVAL, "grad_scale: tensors %d and %d share storage; list each gradient once", i + 1, j + 1);
    float sf = (float)s;
    if (dev) return zli_grad_scale_device(tensors, n, sf);
    /* Strided tensors are scaled in place element by element: the chunk list
     * holds only the contiguous ones (it would read strided ones from copies). */
    zl_tensor **dense = calloc((size_t)(n > 0 ? n : 1), sizeof *dense);
    if (!dense) return zl_error(ZL_ENOMEM, "grad_scale: out of memory");
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (zl_tensor_is_contiguous(tensors[i])) dense[nd++] = tensors[i];
    chunk_list l;
    zl_status st = list_make("grad_scale", dense, nd, &l);
    free(dense);
    if (st) return st;
    for (int i = 0; i < n; i++)
        if (!zl_tensor_is_contiguous(tensors[i])) scale_strided(tensors[i], sf);
    #pragma omp parallel for schedule(static) if (l.elems > ZLI_PAR_MIN)
    for (int64_t i = 0; i < l.n; i++) {
        void *p = (void *)l.c[i].p;
        if (l.c[i].dt == ZL_DTYPE_F32) scale_f32(p, l.c[i].n, sf);
        else if (l.c[i].dt == ZL_DTYPE_BF16) scale_bf16(p, l.c[i].n, sf);
        else scale_f16(p, l.c[i].n, sf);
    }
    list_free(&l);
    return ZL_OK;
}

double zl_grad_clip_coef(double norm, double max_norm)
{
    if (!(max_norm > 0) || !isfinite(norm)) return 1.0;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? coef : 1.0;
}
