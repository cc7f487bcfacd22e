/* The device's own copy, fill and add (core's primitives for a storage on a
 * CUDA device): grid-stride loops over math/strided.h, any view, any
 * dtype. A copy into a contiguous destination coalesces the source's view
 * first; a contiguous source is then a plain copy (same dtype) or a
 * conversion between float dtypes with no offset arithmetic, ZLK_VEC
 * elements a thread where both buffers are 16-byte aligned; a source lying
 * in runs of ZLK_VEC takes one offset and one wide load a run. */
#include "common.cuh"
#include "../../math/strided.h"

template <bool VEC> __global__ void convert_dense(int64_t n, const void *src, int sdt, void *dst, int ddt)
{
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x, rest = 0;
    if (VEC) {
        for (int64_t i = t * ZLK_VEC; i + ZLK_VEC <= n; i += step * ZLK_VEC) {
            float v[ZLK_VEC];
            zlk_load_vec(src, sdt, i, v);
            zlk_store_vec(dst, ddt, i, v);
        }
        rest = n / ZLK_VEC * ZLK_VEC;
    }
    for (int64_t i = rest + t; i < n; i += step) zlm_store(dst, ddt, i, zlm_load(src, sdt, i));
}

static bool is_float(int dt) { return dt == ZLM_F32 || dt == ZLM_F16 || dt == ZLM_BF16; }

/* A view whose elements lie in runs of ZLK_VEC (zlm_view_runs_of) into a
 * contiguous destination, a run a thread: one offset and wide loads. The
 * same dtype moves as bytes (a run of ZLK_VEC elements of es bytes is es
 * 8-byte words), so every value, NaN payloads too, keeps its bits; floats
 * of two dtypes convert as the element path does. */
__global__ void copy_runs(int64_t n, zlm_view s, const void *src, int sdt, void *dst, int ddt)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int es = zlm_dtype_size(sdt);
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * ZLK_VEC; i < n; i += step * ZLK_VEC) {
        int64_t at = zlm_view_offset(&s, i);
        if (sdt == ddt) {
            const uint64_t *from = (const uint64_t *)((const char *)src + at * es);
            uint64_t *to = (uint64_t *)((char *)dst + i * es);
            for (int w = 0; w < es; w++) to[w] = from[w];
            continue;
        }
        float v[ZLK_VEC];
        zlk_load_vec(src, sdt, at, v);
        zlk_store_vec(dst, ddt, i, v);
    }
}

/* A contiguous destination skips the offset arithmetic of its view. */
__global__ void copy_view(int64_t n, zlm_view s, const void *src, int sdt, bool strided, zlm_view d, void *dst, int ddt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (strided) zlm_copy_view_elem(&d, dst, ddt, &s, src, sdt, i);
        else zlm_copy_elem(&s, src, sdt, dst, ddt, i);
    }
}

__global__ void fill_view(int64_t n, zlm_view d, void *dst, int ddt, double v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_set64(dst, ddt, zlm_view_offset(&d, i), v);
}

__global__ void add_view(int64_t n, zlm_view d, void *dst, int ddt, zlm_view s, const void *src, int sdt, float alpha)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_add_elem(&d, dst, ddt, &s, src, sdt, alpha, i);
}

extern "C" int zlk_cuda_copy_view(int64_t n, const zlm_view *s, const void *src, int sdt, const zlm_view *d,
                                  void *dst, int ddt, void *stream)
{
    if (n <= 0) return 0;
    zlm_view sv = *s;
    if (!d) {
        zlm_view_coalesce(&sv);
        if (sv.ndim == 0 || (sv.ndim == 1 && sv.stride[0] == 1)) {
            int es = zlm_dtype_size(sdt);
            const char *from = (const char *)src + sv.offset * es;
            if (sdt == ddt)
                return (int)cudaMemcpyAsync(dst, from, (size_t)n * es, cudaMemcpyDeviceToDevice, zlk_stream(stream));
            if (is_float(sdt) && is_float(ddt)) {
                const void *bufs[] = {from, dst};
                cudaStream_t s = zlk_stream(stream);
                if (zlk_aligned16(bufs, 2))
                    convert_dense<true><<<zlk_vec_blocks(n), ZLK_THREADS, 0, s>>>(n, from, sdt, dst, ddt);
                else
                    convert_dense<false><<<zlk_blocks(n), ZLK_THREADS, 0, s>>>(n, from, sdt, dst, ddt);
                return zlk_launched();
            }
        }
    }
    const void *bufs[] = {src, dst};
    bool convertible = sdt == ddt || (is_float(sdt) && is_float(ddt));
    if (!d && convertible && zlm_view_runs_of(&sv, ZLK_VEC) && zlk_aligned16(bufs, 2)) {
        copy_runs<<<zlk_vec_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, sv, src, sdt, dst, ddt);
        return zlk_launched();
    }
    zlm_view dv = d ? *d : zlm_view{};
    copy_view<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, sv, src, sdt, d != NULL, dv, dst, ddt);
    return zlk_launched();
}

extern "C" int zlk_cuda_fill_view(int64_t n, const zlm_view *d, void *dst, int ddt, double v, void *stream)
{
    if (n <= 0) return 0;
    fill_view<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, *d, dst, ddt, v);
    return zlk_launched();
}

extern "C" int zlk_cuda_add_view(int64_t n, const zlm_view *d, void *dst, int ddt, const zlm_view *s, const void *src,
                                 int sdt, float alpha, void *stream)
{
    if (n <= 0) return 0;
    add_view<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, *d, dst, ddt, *s, src, sdt, alpha);
    return zlk_launched();
}
