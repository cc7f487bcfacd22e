/* Unary elementwise kernels, forward and backward: grid-stride loops over
 * math/unary.h, reading any float storage dtype and computing in f32; with
 * every buffer 16-byte aligned, ZLK_VEC elements a thread at a time. */
#include "common.cuh"
#include "../../math/unary.h"

template <bool VEC>
__global__ void unary_forward(int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0, float p1)
{
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x, rest = 0;
    if (VEC) {
        for (int64_t i = t * ZLK_VEC; i + ZLK_VEC <= n; i += step * ZLK_VEC) {
            float v[ZLK_VEC];
            zlk_load_vec(x, xdt, i, v);
#pragma unroll
            for (int k = 0; k < ZLK_VEC; k++) v[k] = zlm_unary_forward(kind, v[k], p0, p1);
            zlk_store_vec(y, ydt, i, v);
        }
        rest = n / ZLK_VEC * ZLK_VEC;
    }
    for (int64_t i = rest + t; i < n; i += step)
        zlm_store(y, ydt, i, zlm_unary_forward(kind, zlm_load(x, xdt, i), p0, p1));
}

template <bool VEC>
__global__ void unary_backward(int kind, int64_t n, const void *x, int xdt, const void *y, int ydt, const void *g,
                               int gdt, float *gx, float p0, float p1)
{
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x, rest = 0;
    if (VEC) {
        for (int64_t i = t * ZLK_VEC; i + ZLK_VEC <= n; i += step * ZLK_VEC) {
            float xv[ZLK_VEC], yv[ZLK_VEC] = {0}, gv[ZLK_VEC];
            zlk_load_vec(x, xdt, i, xv);
            if (y) zlk_load_vec(y, ydt, i, yv);
            zlk_load_vec(g, gdt, i, gv);
#pragma unroll
            for (int k = 0; k < ZLK_VEC; k++) xv[k] = zlm_unary_backward(kind, xv[k], yv[k], gv[k], p0, p1);
            zlk_store_vec(gx, ZLM_F32, i, xv);
        }
        rest = n / ZLK_VEC * ZLK_VEC;
    }
    for (int64_t i = rest + t; i < n; i += step) {
        float yi = y ? zlm_load(y, ydt, i) : 0.0f;
        gx[i] = zlm_unary_backward(kind, zlm_load(x, xdt, i), yi, zlm_load(g, gdt, i), p0, p1);
    }
}

extern "C" int zlk_cuda_unary_forward(int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0,
                                      float p1, void *stream)
{
    if (n <= 0) return 0;
    const void *bufs[] = {x, y};
    if (zlk_aligned16(bufs, 2))
        unary_forward<true><<<zlk_vec_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, x, xdt, y, ydt, p0, p1);
    else
        unary_forward<false><<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, x, xdt, y, ydt, p0, p1);
    return zlk_launched();
}

extern "C" int zlk_cuda_unary_backward(int kind, int64_t n, const void *x, int xdt, const void *y, int ydt,
                                       const void *g, int gdt, float *gx, float p0, float p1, void *stream)
{
    if (n <= 0) return 0;
    const void *bufs[] = {x, y, g, gx};
    if (zlk_aligned16(bufs, 4))
        unary_backward<true><<<zlk_vec_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, x, xdt, y, ydt, g,
                                                                                         gdt, gx, p0, p1);
    else
        unary_backward<false><<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, x, xdt, y, ydt, g, gdt,
                                                                                      gx, p0, p1);
    return zlk_launched();
}
