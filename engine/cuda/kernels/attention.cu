/* The softmax between attention's two GEMMs (cuBLASLt runs those): a thread
 * block per row of scores (rows in a grid-stride loop), causal rows cut at
 * their query's position, and its backward from dP to dS. f32 sums, as the
 * CPU's attention takes them. */
#include "common.cuh"
#include "../../math/attention.h"

struct zlk_att_max {
    __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

__device__ void attention_softmax_row(int64_t r, int64_t tq, int64_t tk, bool causal, float *s)
{
    int64_t lim = zlm_attention_limit(r, tq, tk, causal);
    float *row = s + r * tk;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) m = row[j] > m ? row[j] : m;
    m = zlk_block_reduce(m, zlk_att_max(), -INFINITY);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) {
        row[j] = zlm_attention_exp(row[j], m);
        sum += row[j];
    }
    float inv = 1.0f / zlk_block_reduce(sum, zlk_sum(), 0.0f);
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) row[j] = j < lim ? row[j] * inv : 0.0f;
}

__global__ void attention_softmax(int64_t rows, int64_t tq, int64_t tk, bool causal, float *s)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) attention_softmax_row(r, tq, tk, causal, s);
}

__device__ void attention_softmax_backward_row(int64_t r, int64_t tk, float *dp, const float *p)
{
    int64_t base = r * tk;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) dot += dp[base + j] * p[base + j];
    dot = zlk_block_reduce(dot, zlk_sum(), 0.0f);
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
        dp[base + j] = zlm_attention_grad(p[base + j], dp[base + j], dot);
}

__global__ void attention_softmax_backward(int64_t rows, int64_t tk, float *dp, const float *p)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) attention_softmax_backward_row(r, tk, dp, p);
}

extern "C" int zlk_cuda_attention_softmax(int64_t rows, int64_t tq, int64_t tk, bool causal, float *s, void *stream)
{
    if (rows <= 0 || tk <= 0) return 0;
    attention_softmax<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, tq, tk, causal, s);
    return zlk_launched();
}

extern "C" int zlk_cuda_attention_softmax_backward(int64_t rows, int64_t tk, float *dp, const float *p, void *stream)
{
    if (rows <= 0 || tk <= 0) return 0;
    attention_softmax_backward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, tk, dp, p);
    return zlk_launched();
}
