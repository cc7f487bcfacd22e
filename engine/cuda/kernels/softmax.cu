/* softmax and log_softmax over any dimension, forward and backward. Over the
 * last one, a thread block per row (rows in a grid-stride loop), the max and
 * the double sums reduced in shared memory between the steps of
 * math/softmax.h; over another, rows whose elements lie `inner` apart,
 * one thread per row running the row functions as the CPU does: neighbouring
 * threads read neighbouring elements. */
#include "common.cuh"
#include "../../math/softmax.h"
#include "../../math/strided.h"

struct zlk_softmax_max {
    __device__ float operator()(float a, float b) const { return zlm_softmax_max(a, b); }
};

__device__ void softmax_forward_row(int64_t r, bool is_log, int64_t d, const void *x, int xdt, void *y, int ydt)
{
    int64_t base = r * d;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x) m = zlm_softmax_max(m, zlm_load(x, xdt, base + k));
    m = zlk_block_reduce(m, zlk_softmax_max(), -INFINITY);
    double s = 0;
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x) s += zlm_softmax_exp(zlm_load(x, xdt, base + k), m);
    s = zlk_block_reduce(s, zlk_sum(), 0.0);
    if (is_log) {
        float shift = zlm_log_softmax_shift(s);
        for (int64_t k = threadIdx.x; k < d; k += blockDim.x)
            zlm_store(y, ydt, base + k, zlm_log_softmax_out(zlm_load(x, xdt, base + k), m, shift));
    } else {
        float inv = zlm_softmax_inv(s);
        for (int64_t k = threadIdx.x; k < d; k += blockDim.x)
            zlm_store(y, ydt, base + k, zlm_softmax_out(zlm_load(x, xdt, base + k), m, inv));
    }
}

__global__ void softmax_forward(int64_t rows, bool is_log, int64_t d, const void *x, int xdt, void *y, int ydt)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) softmax_forward_row(r, is_log, d, x, xdt, y, ydt);
}

__device__ void softmax_backward_row(int64_t row, bool is_log, int64_t d, const void *y, int ydt, const void *g,
                                     int gdt, float *gx)
{
    int64_t base = row * d;
    double acc = 0;
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x)
        acc += is_log ? (double)zlm_load(g, gdt, base + k)
                      : zlm_softmax_dot_term(zlm_load(y, ydt, base + k), zlm_load(g, gdt, base + k));
    float r = (float)zlk_block_reduce(acc, zlk_sum(), 0.0);
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
        float yk = zlm_load(y, ydt, base + k), gk = zlm_load(g, gdt, base + k);
        gx[base + k] = is_log ? zlm_log_softmax_grad(yk, gk, r) : zlm_softmax_grad(yk, gk, r);
    }
}

__global__ void softmax_backward(int64_t rows, bool is_log, int64_t d, const void *y, int ydt, const void *g, int gdt,
                                 float *gx)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) softmax_backward_row(r, is_log, d, y, ydt, g, gdt, gx);
}

__global__ void softmax_strided_forward(bool is_log, int64_t rows, int64_t d, int64_t inner, const void *x, int xdt,
                                        void *y, int ydt)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = zlm_softmax_row_base(r, d, inner);
        zlm_softmax_row(is_log, d, inner, (const char *)x + base * zlm_dtype_size(xdt), xdt,
                        (char *)y + base * zlm_dtype_size(ydt), ydt);
    }
}

__global__ void softmax_strided_backward(bool is_log, int64_t rows, int64_t d, int64_t inner, const void *y, int ydt,
                                         const void *g, int gdt, float *gx)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = zlm_softmax_row_base(r, d, inner);
        zlm_softmax_row_backward(is_log, d, inner, (const char *)y + base * zlm_dtype_size(ydt), ydt,
                                 (const char *)g + base * zlm_dtype_size(gdt), gdt, gx + base);
    }
}

extern "C" int zlk_cuda_softmax_forward(bool is_log, int64_t outer, int64_t d, int64_t inner, const void *x, int xdt,
                                        void *y, int ydt, void *stream)
{
    int64_t rows = outer * inner;
    if (rows <= 0 || d <= 0) return 0;
    if (inner == 1)
        softmax_forward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, is_log, d, x, xdt, y, ydt);
    else
        softmax_strided_forward<<<zlk_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(is_log, rows, d, inner, x,
                                                                                          xdt, y, ydt);
    return zlk_launched();
}

extern "C" int zlk_cuda_softmax_backward(bool is_log, int64_t outer, int64_t d, int64_t inner, const void *y, int ydt,
                                         const void *g, int gdt, float *gx, void *stream)
{
    int64_t rows = outer * inner;
    if (rows <= 0 || d <= 0) return 0;
    if (inner == 1)
        softmax_backward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, is_log, d, y, ydt, g, gdt,
                                                                                      gx);
    else
        softmax_strided_backward<<<zlk_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(is_log, rows, d, inner, y,
                                                                                           ydt, g, gdt, gx);
    return zlk_launched();
}
