/* How parameters are cut into chunks (ZL_ZERO_ALIGN, zlua/zero.h) and the
 * small element helpers every ZeRO path shares: slices of flat buffers, the
 * scaled add that accumulates reduced gradients, the clock. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "zero_impl.h"
#include "../math/convert.h"

int64_t zz_chunk(int64_t n, int P)
{
    int64_t k = (n + P - 1) / P;
    return (k + ZL_ZERO_ALIGN - 1) / ZL_ZERO_ALIGN * ZL_ZERO_ALIGN;
}

void zz_owned(int64_t n, int64_t k, int q, int64_t *lo, int64_t *own)
{
    *lo = (int64_t)q * k;
    if (*lo >= n) { *own = 0; return; }
    *own = n - *lo < k ? n - *lo : k;
}

double zz_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zl_status zz_fail(const char *what, const char *name)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zl_last_error());
    return zl_error(ZL_EINVAL, "ZeRO: %s %s: %s", what, name, msg);
}

int zz_find(const zl_zero *z, const zl_tensor *p)
{
    for (int i = 0; i < z->nent; i++)
        if (z->ents[i].p == p) return i;
    return -1;
}

void zz_axpy(void *dst, zl_dtype dt, const float *src, int64_t n, float alpha, bool first)
{
    if (dt == ZL_DTYPE_F32) {
        float *d = dst;
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) d[i] = (first ? 0.0f : d[i]) + alpha * src[i];
        return;
    }
    /* Half gradients take the conversions inline, so the loops vectorize. */
    if (dt == ZL_DTYPE_BF16 || dt == ZL_DTYPE_F16) {
        uint16_t *d = dst;
        if (dt == ZL_DTYPE_BF16) {
            #pragma omp parallel for schedule(static) if (n > 65536)
            for (int64_t i = 0; i < n; i++)
                d[i] = zlm_f32_to_bf16((first ? 0.0f : zlm_bf16_to_f32(d[i])) + alpha * src[i]);
        } else {
            #pragma omp parallel for schedule(static) if (n > 65536)
            for (int64_t i = 0; i < n; i++)
                d[i] = zlm_f32_to_f16((first ? 0.0f : zlm_f16_to_f32(d[i])) + alpha * src[i]);
        }
        return;
    }
    const zl_dtype_traits *tr = zl_dtype_traits_of(dt);
    char *d = dst;
    for (int64_t i = 0; i < n; i++) {
        char *p = d + i * (int64_t)tr->size;
        tr->from_f32(p, (first ? 0.0f : tr->to_f32(p)) + alpha * src[i]);
    }
}

zl_tensor *zz_slice(zl_tensor *t, int64_t off, int64_t n)
{
    return zl_tensor_narrow(t, 0, off, n);
}

void *zz_at(zl_tensor *t, int64_t off)
{
    return (char *)zl_tensor_data(t) + off * (int64_t)zl_dtype_size(zl_tensor_dtype(t));
}

zl_tensor *zz_buffer(zl_dtype dt, int64_t n, zl_mem_category cat, bool zero)
{
    zl_tensor *t = zl_tensor_new(dt, 1, &n, cat);
    if (t && zero) memset(zl_tensor_data(t), 0, (size_t)n * zl_dtype_size(dt));
    return t;
}
