/* sum, mean, max, min and their positions on a device in the CPU's order
 * (math/reduce.h): a sum over a dim is one thread per output adding its
 * inputs in order; a max or min over a long last dim is one block per
 * output, split by the scan-equivalent rule zlm_pick_prefer; a sum over everything is one thread
 * per 4096-element chunk (double) and one thread adding the chunks in order. */
#include "common.cuh"
#include "../../math/cumsum.h"
#include "../../math/reduce.h"
#include "../../math/var.h"

__global__ void reduce_sum_dim(bool mean, int64_t outer, int64_t d, int64_t inner, const float *x, float *out)
{
    int64_t n = outer * inner;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        out[j] = zlm_reduce_sum(x, d, inner, j / inner, j % inner, mean);
}

__global__ void reduce_pick_dim(bool lowest, int64_t outer, int64_t d, int64_t inner, const float *x, float *out,
                                int64_t *idx)
{
    int64_t n = outer * inner;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t at;
        out[j] = zlm_reduce_pick(x, d, inner, j / inner, j % inner, lowest, &at);
        if (idx) idx[j] = at;
    }
}

/* One block per row of x [rows, d]: each thread keeps the winner of its
 * stride, then warps and the block combine winners by zlm_pick_prefer. */
__global__ void reduce_pick_rows(bool lowest, int64_t rows, int64_t d, const float *x, float *out, int64_t *idx)
{
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = x + r * d;
        float v = row[0];
        int64_t at = 0;
        for (int64_t k = threadIdx.x; k < d; k += blockDim.x)
            if (zlm_pick_prefer(row[k], k, v, at, lowest)) { v = row[k]; at = k; }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_down_sync(0xffffffffu, v, o);
            int64_t oi = __shfl_down_sync(0xffffffffu, at, o);
            if (zlm_pick_prefer(ov, oi, v, at, lowest)) { v = ov; at = oi; }
        }
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) { sv[warp] = v; si[warp] = at; }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); w++)
                if (zlm_pick_prefer(sv[w], si[w], v, at, lowest)) { v = sv[w]; at = si[w]; }
            out[r] = v;
            if (idx) idx[r] = at;
        }
        __syncthreads();   /* sv and si are free for the next row */
    }
}

__global__ void chunk_sums(int64_t n, const float *x, double *part)
{
    int64_t nc = zlm_sum_chunks(n);
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < nc; c += (int64_t)gridDim.x * blockDim.x)
        part[c] = zlm_chunk_sum(x, n, c);
}

__global__ void sum_finish(int64_t n, double div, const float *count, const double *part, float *out)
{
    out[0] = zlm_sum_finish(part, zlm_sum_chunks(n), count ? (double)*count : div);
}

__global__ void cumsum_fibres(int64_t fibres, int64_t len, int64_t inner, bool reverse, const float *x, float *out)
{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f < fibres; f += (int64_t)gridDim.x * blockDim.x)
        zlm_running_sum_fibre(f, len, inner, reverse, x, out);
}

extern "C" int zlk_cuda_cumsum(int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x, float *out,
                               void *stream)
{
    int64_t fibres = outer * inner;
    if (fibres <= 0 || len <= 0) return 0;
    cumsum_fibres<<<zlk_blocks(fibres), ZLK_THREADS, 0, zlk_stream(stream)>>>(fibres, len, inner, reverse, x, out);
    return zlk_launched();
}

__global__ void var_outputs(int64_t nout, int64_t count, zlm_view kept, zlm_view red, const float *x, double div,
                            bool is_std, double *mean, double *m2, float *out)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < nout; o += (int64_t)gridDim.x * blockDim.x) {
        zlm_var_moments(o, count, &kept, &red, x, mean, m2);
        out[o] = zlm_var_value(m2[o], div, is_std);
    }
}

__global__ void var_grads(int64_t n, zlm_view ov, int64_t count, const float *x, const float *g, const double *mean,
                          const double *m2, double correction, bool is_std, float *gx)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = zlm_view_offset(&ov, i);
        gx[i] = zlm_var_grad(g[o], x[i], mean[o], m2[o], count, correction, is_std);
    }
}

extern "C" int zlk_cuda_var(int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red, const float *x,
                            double correction, bool is_std, double *mean, double *m2, float *out, void *stream)
{
    if (nout <= 0) return 0;
    var_outputs<<<zlk_blocks(nout), ZLK_THREADS, 0, zlk_stream(stream)>>>(
        nout, count, *kept, *red, x, zlm_var_divisor(count, correction), is_std, mean, m2, out);
    return zlk_launched();
}

extern "C" int zlk_cuda_var_backward(int64_t n, const zlm_view *ov, int64_t count, const float *x, const float *g,
                                     const double *mean, const double *m2, double correction, bool is_std, float *gx,
                                     void *stream)
{
    if (n <= 0) return 0;
    var_grads<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, *ov, count, x, g, mean, m2, correction, is_std,
                                                                     gx);
    return zlk_launched();
}

__global__ void reduce_backward(int kind, int64_t n, int64_t len, int64_t inner, const float *g, const int64_t *idx,
                                float *gx)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        gx[j] = zlm_reduce_backward(kind, g, idx, len, inner, j);
}

/* Below this many positions a row's max or min is one thread's scan. */
#define ROW_SPLIT_MIN 64

extern "C" int zlk_cuda_reduce_dim(int kind, int64_t outer, int64_t d, int64_t inner, const float *x, float *out,
                                   int64_t *idx, void *stream)
{
    int64_t n = outer * inner;
    if (n <= 0) return 0;
    cudaStream_t s = zlk_stream(stream);
    if (kind == ZLM_R_SUM || kind == ZLM_R_MEAN)
        reduce_sum_dim<<<zlk_blocks(n), ZLK_THREADS, 0, s>>>(kind == ZLM_R_MEAN, outer, d, inner, x, out);
    else if (inner == 1 && d >= ROW_SPLIT_MIN)
        reduce_pick_rows<<<(unsigned)(n < 65535 ? n : 65535), ZLK_THREADS, 0, s>>>(zlm_reduce_lowest(kind), n, d, x,
                                                                                   out, idx);
    else
        reduce_pick_dim<<<zlk_blocks(n), ZLK_THREADS, 0, s>>>(zlm_reduce_lowest(kind), outer, d, inner, x, out, idx);
    return zlk_launched();
}

extern "C" int zlk_cuda_reduce_all(double div, const float *count, int64_t n, const float *x, double *work, float *out,
                                   void *stream)
{
    cudaStream_t s = zlk_stream(stream);
    int64_t nc = zlm_sum_chunks(n);
    if (nc > 0) chunk_sums<<<zlk_blocks(nc), ZLK_THREADS, 0, s>>>(n, x, work);
    sum_finish<<<1, 1, 0, s>>>(n, div, count, work, out);
    return zlk_launched();
}

extern "C" int zlk_cuda_reduce_backward(int kind, int64_t outer, int64_t len, int64_t inner, const float *g,
                                        const int64_t *idx, float *gx, void *stream)
{
    int64_t n = outer * len * inner;
    if (n <= 0) return 0;
    reduce_backward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, len, inner, g, idx, gx);
    return zlk_launched();
}
