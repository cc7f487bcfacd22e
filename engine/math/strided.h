/* Views and every dtype as the copy, fill and add kernels read them: the
 * element offset of logical index i in a strided view, and any zl_dtype
 * element as a double and back, saturating as engine/core/dtype.c does. */
#ifndef ZL_MATH_STRIDED_H
#define ZL_MATH_STRIDED_H

#include "convert.h"

/* All seven zl_dtype codes; the first three are hd.h's ZLM_F32/F16/BF16. */
enum { ZLM_I32 = 3, ZLM_I64 = 4, ZLM_U8 = 5, ZLM_BOOL = 6 };

/* A view: shape and strides in elements, outermost first, and the offset of
 * element [0, ..., 0]. Passed to kernels by value. */
typedef struct zlm_view {
    int ndim;
    int64_t shape[8];
    int64_t stride[8];
    int64_t offset;
} zlm_view;

static inline ZL_HD int64_t zlm_view_offset(const zlm_view *v, int64_t i)
{
    int64_t off = v->offset;
    for (int k = v->ndim - 1; k >= 0; k--) {
        int64_t s = v->shape[k];
        off += (i % s) * v->stride[k];
        i /= s;
    }
    return off;
}

/* The view over shape (nd dims) with the given element strides (0 where
 * broadcast), offset 0: an operand a kernel reads through its strides. */
static inline ZL_HD zlm_view zlm_view_over(int nd, const int64_t *shape, const int64_t *stride)
{
    zlm_view v;
    v.ndim = nd;
    v.offset = 0;
    for (int k = 0; k < nd; k++) {
        v.shape[k] = shape[k];
        v.stride[k] = stride[k];
    }
    return v;
}

/* The same offsets from fewer dims: size-1 dims dropped, and a dim merged
 * into the next when it steps exactly over it (row-major order is kept), so
 * a kernel divides once per dim left; a contiguous view becomes one dim of
 * stride 1. */
static inline ZL_HD void zlm_view_coalesce(zlm_view *v)
{
    int n = 0;
    for (int k = 0; k < v->ndim; k++) {
        if (v->shape[k] == 1) continue;
        if (n > 0 && v->stride[n - 1] == v->shape[k] * v->stride[k]) {
            v->shape[n - 1] *= v->shape[k];
            v->stride[n - 1] = v->stride[k];
            continue;
        }
        v->shape[n] = v->shape[k];
        v->stride[n] = v->stride[k];
        n++;
    }
    v->ndim = n;
}

/* Whether every w elements of v, from a multiple of w on, lie side by side
 * from an offset that is a multiple of w: the innermost dim is contiguous and
 * w divides its length, the view's offset and every other stride. A kernel
 * then reads them in one wide load (a head of q narrowed from a fused qkv
 * and transposed, say) with one offset computed per w elements. */
static inline ZL_HD bool zlm_view_runs_of(const zlm_view *v, int64_t w)
{
    if (v->ndim == 0 || v->stride[v->ndim - 1] != 1 || v->shape[v->ndim - 1] % w || v->offset % w) return false;
    for (int k = 0; k < v->ndim - 1; k++)
        if (v->stride[k] % w) return false;
    return true;
}

static inline ZL_HD int zlm_dtype_size(int dt)
{
    return dt == ZLM_I64 ? 8 : dt == ZLM_F32 || dt == ZLM_I32 ? 4 : dt == ZLM_F16 || dt == ZLM_BF16 ? 2 : 1;
}

/* Float to integer saturates and NaN gives 0: a C cast of an out-of-range
 * value is undefined. */
static inline ZL_HD int64_t zlm_saturate(double v, double lo, double hi)
{
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

static inline ZL_HD double zlm_get64(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case ZLM_F32: case ZLM_F16: case ZLM_BF16: return zlm_load(p, dt, i);
    case ZLM_I32: return ((const int32_t *)p)[i];
    case ZLM_I64: return (double)((const int64_t *)p)[i];
    case ZLM_U8: return ((const uint8_t *)p)[i];
    default: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
    }
}

static inline ZL_HD void zlm_set64(void *p, int dt, int64_t i, double v)
{
    switch (dt) {
    case ZLM_F32: case ZLM_F16: case ZLM_BF16: zlm_store(p, dt, i, (float)v); break;
    case ZLM_I32: ((int32_t *)p)[i] = (int32_t)zlm_saturate(v, -2147483648.0, 2147483647.0); break;
    case ZLM_I64:
        ((int64_t *)p)[i] = zlm_saturate(v, -9223372036854775808.0, 9223372036854774784.0);
        break;
    case ZLM_U8: ((uint8_t *)p)[i] = (uint8_t)zlm_saturate(v, 0.0, 255.0); break;
    default: ((uint8_t *)p)[i] = v != 0.0; break;
    }
}

/* Element soff of src (sdt) to element doff of dst (ddt): raw bytes when the
 * dtypes agree (an i64 above 2^53 survives), else through a double. */
static inline ZL_HD void zlm_copy_at(const void *src, int sdt, int64_t soff, void *dst, int ddt, int64_t doff)
{
    if (sdt == ddt) {
        /* Whole elements at their width: a memcpy of a run-time size is a
         * byte loop on a GPU. */
        switch (zlm_dtype_size(sdt)) {
        case 8: ((uint64_t *)dst)[doff] = ((const uint64_t *)src)[soff]; break;
        case 4: ((uint32_t *)dst)[doff] = ((const uint32_t *)src)[soff]; break;
        case 2: ((uint16_t *)dst)[doff] = ((const uint16_t *)src)[soff]; break;
        default: ((uint8_t *)dst)[doff] = ((const uint8_t *)src)[soff]; break;
        }
    } else {
        zlm_set64(dst, ddt, doff, zlm_get64(src, sdt, soff));
    }
}

/* Element i of dst (contiguous, ddt) = element i of the view s over src (sdt). */
static inline ZL_HD void zlm_copy_elem(const zlm_view *s, const void *src, int sdt, void *dst, int ddt, int64_t i)
{
    zlm_copy_at(src, sdt, zlm_view_offset(s, i), dst, ddt, i);
}

/* Element i of the view d over dst = element i of the view s over src: a
 * strided destination (a slice of a larger tensor, a transposed view). */
static inline ZL_HD void zlm_copy_view_elem(const zlm_view *d, void *dst, int ddt, const zlm_view *s, const void *src,
                                            int sdt, int64_t i)
{
    zlm_copy_at(src, sdt, zlm_view_offset(s, i), dst, ddt, zlm_view_offset(d, i));
}

/* Element i of the view d over dst (a float dtype) += alpha * element i of
 * the view s over src, in f32 as one fused multiply-add: what core's add_
 * compiles to on the host (GCC contracts it under -march=native) and what
 * nvcc makes of it, written out so both give the same bits. */
static inline ZL_HD void zlm_add_elem(const zlm_view *d, void *dst, int ddt, const zlm_view *s, const void *src,
                                      int sdt, float alpha, int64_t i)
{
    int64_t od = zlm_view_offset(d, i);
    zlm_store(dst, ddt, od, fmaf(alpha, (float)zlm_get64(src, sdt, zlm_view_offset(s, i)), zlm_load(dst, ddt, od)));
}

#endif
