/* conv2d's kernels around cuBLASLt's GEMM: im2col one thread per column
 * element, col2im one thread per pixel (a gather in the CPU's order, no
 * atomics), and the bias gradient one thread block per output channel, its
 * double sum reduced in a fixed tree (the same bits every run). */
#include "common.cuh"
#include "../../math/conv.h"

__global__ void im2col(zlm_window g, int64_t total, const float *x, float *col)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        col[i] = zlm_im2col_elem(&g, x, i);
}

__global__ void col2im(zlm_window g, int64_t total, const float *col, float *gx)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        gx[i] = zlm_col2im_elem(&g, col, i);
}

__global__ void conv_bias_grad(int64_t n, int64_t nout, int64_t len, const float *g, float *gb)
{
    for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {
        double s = 0.0;
        for (int64_t t = threadIdx.x; t < n * len; t += blockDim.x) s += zlm_conv_bias_term(g, nout, len, o, t);
        s = zlk_block_reduce(s, zlk_sum(), 0.0);
        if (threadIdx.x == 0) gb[o] = (float)s;
    }
}

extern "C" int zlk_cuda_im2col(const zlm_window *g, const float *x, float *col, void *stream)
{
    int64_t total = g->c * g->kh * g->kw * g->oh * g->ow;
    if (total <= 0) return 0;
    im2col<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(*g, total, x, col);
    return zlk_launched();
}

extern "C" int zlk_cuda_col2im(const zlm_window *g, const float *col, float *gx, void *stream)
{
    int64_t total = g->c * g->h * g->w;
    if (total <= 0) return 0;
    col2im<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(*g, total, col, gx);
    return zlk_launched();
}

extern "C" int zlk_cuda_conv_bias_grad(int64_t n, int64_t nout, int64_t len, const float *g, float *gb, void *stream)
{
    if (nout <= 0) return 0;
    conv_bias_grad<<<zlk_row_blocks(nout), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, nout, len, g, gb);
    return zlk_launched();
}
