/* Flash attention on tensor cores (math/flash.h's steps): bf16 or f16 q, k
 * and v of head width 64 or 128, the scores never written to memory. A block
 * of four warps takes 64 query rows (each warp 16) through the keys a tile of
 * 64 at a time; the products run as 16x16x16 WMMA tiles from shared memory,
 * and a warp's two lanes per row take its softmax steps over the tile the
 * accumulators were stored to. The backward is two kernels, so that no
 * gradient is added atomically and every run gives the same bits: one a
 * block per 64 keys (dK, dV: its query heads and rows in order), one a
 * block per 64 queries (dQ), each recomputing P from the rows' lse. */
#include <stdlib.h>
#include <string.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include "common.cuh"
#include "../../math/flash.h"

using namespace nvcuda;

#define FL_BQ ZLM_FLASH_BQ
#define FL_BK ZLM_FLASH_BK
#define FL_WARPS 4
#define FL_THREADS (FL_WARPS * 32)

/* Row strides in shared memory, padded so a warp's rows fall on other banks:
 * tiles of D halves, per-warp f32 scratch of 16 rows, per-warp half rows. */
template <int D> struct fl_dims {
    static constexpr int DP = D + 8;
    static constexpr int SW = (D > FL_BK ? D : FL_BK) + 4;
    static constexpr int PW = FL_BK + 8;
};

template <typename T> __device__ inline T fl_half(float v);
template <> __device__ inline __nv_bfloat16 fl_half<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ inline __half fl_half<__half>(float v) { return __float2half_rn(v); }
__device__ inline float fl_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float fl_float(__half v) { return __half2float(v); }

template <typename T> using fl_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using fl_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
/* A row-major [n][k] tile read as its transpose [k][n]. */
template <typename T> using fl_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> fl_c;

/* Rows row0 .. row0 + 63 of src [rows, D] into dst [64, DP], 16 bytes a
 * load, zeros past the last row (a masked score still multiplies them). */
template <typename T, int D> __device__ void fl_load(T *dst, const T *src, int64_t row0, int64_t rows)
{
    constexpr int V = D / 8, DP = fl_dims<D>::DP;
    for (int e = threadIdx.x; e < 64 * V; e += blockDim.x) {
        int r = e / V, c = e % V;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (row0 + r < rows) val = *(const uint4 *)(src + (row0 + r) * D + c * 8);
        *(uint4 *)(dst + r * DP + c * 8) = val;
    }
}

/* out [16][SW] = a [16][D] (a warp's rows of a tile, stride DP) times the
 * transpose of the 64 rows of b [64][D]. */
template <typename T, int D> __device__ void fl_rows_by_rows(const T *a, const T *b, float *out)
{
    constexpr int DP = fl_dims<D>::DP;
    fl_c acc[4];
    #pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.0f);
    #pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        fl_a<T> fa;
        wmma::load_matrix_sync(fa, a + kk * 16, DP);
        #pragma unroll
        for (int n = 0; n < 4; n++) {
            fl_bt<T> fb;
            wmma::load_matrix_sync(fb, b + n * 16 * DP + kk * 16, DP);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
    #pragma unroll
    for (int n = 0; n < 4; n++) wmma::store_matrix_sync(out + n * 16, acc[n], fl_dims<D>::SW, wmma::mem_row_major);
}

/* Both of the backward's score products, S (or its transpose) into s and dP
 * (or its transpose) into dp, ready for the warp's lanes. */
template <typename T, int D> __device__ void fl_scores_and_dp(const T *a, const T *b, const T *da, const T *db,
                                                              float *s, float *dp)
{
    fl_rows_by_rows<T, D>(a, b, s);
    fl_rows_by_rows<T, D>(da, db, dp);
    __syncwarp();
}

/* acc[D / 16] += p [16][64] (stride PW) times the 64 rows of b [64][D]. */
template <typename T, int D> __device__ void fl_add_product(fl_c *acc, const T *p, const T *b)
{
    constexpr int DP = fl_dims<D>::DP;
    #pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        fl_a<T> fa;
        wmma::load_matrix_sync(fa, p + kk * 16, fl_dims<D>::PW);
        #pragma unroll
        for (int n = 0; n < D / 16; n++) {
            fl_b<T> fb;
            wmma::load_matrix_sync(fb, b + kk * 16 * DP + n * 16, DP);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* A warp's 16 rows of acc[D / 16] times scale into dst [rows, D] (f32) from
 * row0 on, through the warp's scratch s. */
template <int D> __device__ void fl_store_rows(fl_c *acc, float scale, float *s, float *dst, int64_t row0,
                                               int64_t rows)
{
    constexpr int SW = fl_dims<D>::SW;
    #pragma unroll
    for (int n = 0; n < D / 16; n++) {
        #pragma unroll
        for (int t = 0; t < acc[n].num_elements; t++) acc[n].x[t] *= scale;
        wmma::store_matrix_sync(s + n * 16, acc[n], SW, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = threadIdx.x & 31; e < 16 * D; e += 32) {
        int r = e / D, c = e % D;
        if (row0 + r < rows) dst[(row0 + r) * D + c] = s[r * SW + c];
    }
    __syncwarp();
}

template <int D> static size_t fl_forward_bytes(void)
{
    return (size_t)3 * 64 * fl_dims<D>::DP * 2 + (size_t)FL_WARPS * 16 * (fl_dims<D>::SW * 4 + fl_dims<D>::PW * 2);
}

template <typename T, int D>
__global__ void __launch_bounds__(FL_THREADS) flash_forward(int64_t tq, int64_t tk, int64_t grp, bool causal,
                                                            float scale, const T *q, const T *k, const T *v, T *o,
                                                            float *lse)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    constexpr int DP = fl_dims<D>::DP, SW = fl_dims<D>::SW, PW = fl_dims<D>::PW;
    extern __shared__ __align__(128) unsigned char fl_smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
    T *sq = (T *)fl_smem, *sk = sq + 64 * DP, *sv = sk + 64 * DP;
    float *ss = (float *)(sv + 64 * DP) + warp * 16 * SW;
    T *sp = (T *)((float *)(sv + 64 * DP) + FL_WARPS * 16 * SW) + warp * 16 * PW;
    int64_t b = blockIdx.x, q0 = (int64_t)blockIdx.y * FL_BQ, i = q0 + warp * 16 + row;
    const T *kb = k + b / grp * tk * D, *vb = v + b / grp * tk * D;
    fl_load<T, D>(sq, q + b * tq * D, q0, tq);
    int64_t lim = i < tq ? zlm_attention_limit(i, tq, tk, causal) : 0;
    int64_t last = (q0 + FL_BQ < tq ? q0 + FL_BQ : tq) - 1, kend = zlm_attention_limit(last, tq, tk, causal);
    float m = -INFINITY, l = 0.0f, acc_o[D / 2];
    #pragma unroll
    for (int t = 0; t < D / 2; t++) acc_o[t] = 0.0f;
    for (int64_t k0 = 0; k0 < kend; k0 += FL_BK) {
        __syncthreads();
        fl_load<T, D>(sk, kb, k0, tk);
        fl_load<T, D>(sv, vb, k0, tk);
        __syncthreads();
        fl_rows_by_rows<T, D>(sq + warp * 16 * DP, sk, ss);
        __syncwarp();
        /* the lane's row, every other column: its half of the tile */
        float tm = -INFINITY;
        #pragma unroll
        for (int t = 0; t < FL_BK / 2; t++) {
            int c = half + 2 * t;
            float s = ss[row * SW + c] * scale;
            ss[row * SW + c] = s;
            if (k0 + c < lim) tm = s > tm ? s : tm;
        }
        float other = __shfl_xor_sync(0xffffffffu, tm, 1);
        tm = other > tm ? other : tm;
        float mn = tm > m ? tm : m, a = zlm_flash_rescale(m, mn), ts = 0.0f;
        #pragma unroll
        for (int t = 0; t < FL_BK / 2; t++) {
            int c = half + 2 * t;
            float p = k0 + c < lim ? zlm_expf_nonpos(ss[row * SW + c] - mn) : 0.0f;
            ts += p;
            sp[row * PW + c] = fl_half<T>(p);
        }
        ts += __shfl_xor_sync(0xffffffffu, ts, 1);
        l = l * a + ts;
        m = mn;
        __syncwarp();
        fl_c pv[D / 16];
        #pragma unroll
        for (int n = 0; n < D / 16; n++) wmma::fill_fragment(pv[n], 0.0f);
        fl_add_product<T, D>(pv, sp, sv);
        #pragma unroll
        for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(ss + n * 16, pv[n], SW, wmma::mem_row_major);
        __syncwarp();
        #pragma unroll
        for (int t = 0; t < D / 2; t++) acc_o[t] = acc_o[t] * a + ss[row * SW + half + 2 * t];
        __syncwarp();
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    #pragma unroll
    for (int t = 0; t < D / 2; t++) ss[row * SW + half + 2 * t] = acc_o[t] * inv;
    if (half == 0 && i < tq) lse[b * tq + i] = zlm_flash_lse(m, l);
    __syncwarp();
    for (int e = lane; e < 16 * D; e += 32) {
        int r = e / D, c = e % D;
        int64_t ii = q0 + warp * 16 + r;
        if (ii < tq) o[(b * tq + ii) * D + c] = fl_half<T>(ss[r * SW + c]);
    }
#endif
}

/* delta [rows] = each row's <dO, O>, a warp a row. */
template <typename T>
__global__ void flash_delta(int64_t rows, int d, const T *o, const T *dout, float *delta)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        float s = 0.0f;
        for (int c = lane; c < d; c += 32) s += fl_float(o[r * d + c]) * fl_float(dout[r * d + c]);
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) delta[r] = s;
    }
}

template <int D> static size_t fl_backward_bytes(void)
{
    return (size_t)4 * 64 * fl_dims<D>::DP * 2 + 2 * 64 * 4 +
           (size_t)FL_WARPS * 2 * 16 * (fl_dims<D>::SW * 4 + fl_dims<D>::PW * 2);
}

/* dK and dV of 64 keys of key/value head blockIdx.x: every query head of its
 * group, every query tile that sees them, in order. */
template <typename T, int D>
__global__ void __launch_bounds__(FL_THREADS) flash_backward_kv(int64_t tq, int64_t tk, int64_t grp, bool causal,
                                                                float scale, const T *q, const T *k, const T *v,
                                                                const T *dout, const float *lse, const float *delta,
                                                                float *dk, float *dv)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    constexpr int DP = fl_dims<D>::DP, SW = fl_dims<D>::SW, PW = fl_dims<D>::PW;
    extern __shared__ __align__(128) unsigned char fl_smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
    T *sk = (T *)fl_smem, *sv = sk + 64 * DP, *sq = sv + 64 * DP, *sdo = sq + 64 * DP;
    float *slse = (float *)(sdo + 64 * DP), *sdelta = slse + 64;
    float *ss = sdelta + 64 + warp * 2 * 16 * SW, *sdp = ss + 16 * SW;
    T *sp = (T *)(sdelta + 64 + FL_WARPS * 2 * 16 * SW) + warp * 2 * 16 * PW, *sds = sp + 16 * PW;
    int64_t bk = blockIdx.x, k0 = (int64_t)blockIdx.y * FL_BK, j = k0 + warp * 16 + row;
    fl_load<T, D>(sk, k + bk * tk * D, k0, tk);
    fl_load<T, D>(sv, v + bk * tk * D, k0, tk);
    fl_c gk[D / 16], gv[D / 16];
    #pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(gk[n], 0.0f), wmma::fill_fragment(gv[n], 0.0f);
    /* the first query that sees key k0 */
    int64_t first = causal && k0 > tk - tq ? k0 - (tk - tq) : 0;
    for (int64_t h = 0; h < grp; h++) {
        int64_t b = bk * grp + h;
        for (int64_t i0 = first / FL_BQ * FL_BQ; i0 < tq; i0 += FL_BQ) {
            __syncthreads();
            fl_load<T, D>(sq, q + b * tq * D, i0, tq);
            fl_load<T, D>(sdo, dout + b * tq * D, i0, tq);
            for (int e = threadIdx.x; e < 64; e += blockDim.x) {
                bool in = i0 + e < tq;
                slse[e] = in ? lse[b * tq + i0 + e] : 0.0f;
                sdelta[e] = in ? delta[b * tq + i0 + e] : 0.0f;
            }
            __syncthreads();
            fl_scores_and_dp<T, D>(sk + warp * 16 * DP, sq, sv + warp * 16 * DP, sdo, ss, sdp);
            #pragma unroll
            for (int t = 0; t < FL_BQ / 2; t++) {
                int c = half + 2 * t;
                int64_t ii = i0 + c;
                bool seen = ii < tq && j < zlm_attention_limit(ii, tq, tk, causal);
                float p = seen ? zlm_flash_p(ss[row * SW + c] * scale, slse[c]) : 0.0f;
                float ds = seen ? zlm_attention_grad(p, sdp[row * SW + c], sdelta[c]) : 0.0f;
                sp[row * PW + c] = fl_half<T>(p);
                sds[row * PW + c] = fl_half<T>(ds);
            }
            __syncwarp();
            fl_add_product<T, D>(gv, sp, sdo);
            fl_add_product<T, D>(gk, sds, sq);
        }
    }
    fl_store_rows<D>(gk, scale, ss, dk + bk * tk * D, k0 + warp * 16, tk);
    fl_store_rows<D>(gv, 1.0f, ss, dv + bk * tk * D, k0 + warp * 16, tk);
#endif
}

/* dQ of 64 query rows of head blockIdx.x, over the key tiles they see. */
template <typename T, int D>
__global__ void __launch_bounds__(FL_THREADS) flash_backward_q(int64_t tq, int64_t tk, int64_t grp, bool causal,
                                                               float scale, const T *q, const T *k, const T *v,
                                                               const T *dout, const float *lse, const float *delta,
                                                               float *dq)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    constexpr int DP = fl_dims<D>::DP, SW = fl_dims<D>::SW, PW = fl_dims<D>::PW;
    extern __shared__ __align__(128) unsigned char fl_smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
    T *sq = (T *)fl_smem, *sdo = sq + 64 * DP, *sk = sdo + 64 * DP, *sv = sk + 64 * DP;
    float *ss = (float *)(sv + 64 * DP) + 2 * 64 + warp * 2 * 16 * SW, *sdp = ss + 16 * SW;
    T *sds = (T *)((float *)(sv + 64 * DP) + 2 * 64 + FL_WARPS * 2 * 16 * SW) + warp * 2 * 16 * PW;
    int64_t b = blockIdx.x, q0 = (int64_t)blockIdx.y * FL_BQ, i = q0 + warp * 16 + row;
    const T *kb = k + b / grp * tk * D, *vb = v + b / grp * tk * D;
    fl_load<T, D>(sq, q + b * tq * D, q0, tq);
    fl_load<T, D>(sdo, dout + b * tq * D, q0, tq);
    int64_t lim = i < tq ? zlm_attention_limit(i, tq, tk, causal) : 0;
    float row_lse = i < tq ? lse[b * tq + i] : 0.0f, row_delta = i < tq ? delta[b * tq + i] : 0.0f;
    int64_t last = (q0 + FL_BQ < tq ? q0 + FL_BQ : tq) - 1, kend = zlm_attention_limit(last, tq, tk, causal);
    fl_c gq[D / 16];
    #pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(gq[n], 0.0f);
    for (int64_t k0 = 0; k0 < kend; k0 += FL_BK) {
        __syncthreads();
        fl_load<T, D>(sk, kb, k0, tk);
        fl_load<T, D>(sv, vb, k0, tk);
        __syncthreads();
        fl_scores_and_dp<T, D>(sq + warp * 16 * DP, sk, sdo + warp * 16 * DP, sv, ss, sdp);
        #pragma unroll
        for (int t = 0; t < FL_BK / 2; t++) {
            int c = half + 2 * t;
            bool seen = k0 + c < lim;
            float p = seen ? zlm_flash_p(ss[row * SW + c] * scale, row_lse) : 0.0f;
            sds[row * PW + c] = fl_half<T>(seen ? zlm_attention_grad(p, sdp[row * SW + c], row_delta) : 0.0f);
        }
        __syncwarp();
        fl_add_product<T, D>(gq, sds, sk);
    }
    fl_store_rows<D>(gq, scale, ss, dq + b * tq * D, q0 + warp * 16, tq);
#endif
}

/* Whether the kernels take these sizes, pointers and the current device:
 * bf16 or f16, d = dv of 64 or 128, 16-byte aligned buffers (their rows
 * then are too), tiles that fit the grid, compute capability 8 or more; and
 * not while ZLUA_CUDA_FLASH=0 asks for the composed attention (to tell
 * the two apart when a result looks wrong, as PyTorch's sdp_kernel switch). */
extern "C" bool zlk_cuda_flash_takes(int dt, int64_t d, int64_t dv, int64_t tq, int64_t tk, const void *const *bufs,
                                     int nbufs)
{
    static const bool off = [] {
        const char *v = getenv("ZLUA_CUDA_FLASH");
        return v && strcmp(v, "0") == 0;
    }();
    if (off || (dt != ZLM_BF16 && dt != ZLM_F16) || d != dv || (d != 64 && d != 128)) return false;
    if (tq <= 0 || tk <= 0 || (tq + FL_BQ - 1) / FL_BQ > 65535 || (tk + FL_BK - 1) / FL_BK > 65535) return false;
    for (int i = 0; i < nbufs; i++)
        if ((uintptr_t)bufs[i] % 16) return false;
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 8;
}

template <typename Kernel> static int fl_allow(Kernel kernel, size_t bytes)
{
    return (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename T, int D>
static int fl_forward(const int64_t *dims, bool causal, float scale, const void *q, const void *k, const void *v,
                      void *out, float *lse, cudaStream_t s)
{
    size_t bytes = fl_forward_bytes<D>();
    int e = fl_allow(flash_forward<T, D>, bytes);
    if (e) return e;
    dim3 grid((unsigned)dims[0], (unsigned)((dims[1] + FL_BQ - 1) / FL_BQ));
    flash_forward<T, D><<<grid, FL_THREADS, bytes, s>>>(dims[1], dims[2], dims[5], causal, scale, (const T *)q,
                                                        (const T *)k, (const T *)v, (T *)out, lse);
    return zlk_launched();
}

template <typename T, int D>
static int fl_backward(const int64_t *dims, bool causal, float scale, const void *q, const void *k, const void *v,
                       const void *out, const void *dout, const float *lse, float *delta, float *dq, float *dk,
                       float *dv, cudaStream_t s)
{
    int64_t B = dims[0], tq = dims[1], tk = dims[2], grp = dims[5];
    size_t bytes = fl_backward_bytes<D>();
    flash_delta<T><<<zlk_blocks(B * tq * 32), ZLK_THREADS, 0, s>>>(B * tq, D, (const T *)out, (const T *)dout,
                                                                    delta);
    int e = zlk_launched();
    if (!e && dk) e = fl_allow(flash_backward_kv<T, D>, bytes);
    if (!e && dk) {
        dim3 grid((unsigned)(B / grp), (unsigned)((tk + FL_BK - 1) / FL_BK));
        flash_backward_kv<T, D><<<grid, FL_THREADS, bytes, s>>>(tq, tk, grp, causal, scale, (const T *)q,
                                                                (const T *)k, (const T *)v, (const T *)dout, lse,
                                                                delta, dk, dv);
        e = zlk_launched();
    }
    if (!e && dq) e = fl_allow(flash_backward_q<T, D>, bytes);
    if (!e && dq) {
        dim3 grid((unsigned)B, (unsigned)((tq + FL_BQ - 1) / FL_BQ));
        flash_backward_q<T, D><<<grid, FL_THREADS, bytes, s>>>(tq, tk, grp, causal, scale, (const T *)q,
                                                               (const T *)k, (const T *)v, (const T *)dout, lse,
                                                               delta, dq);
        e = zlk_launched();
    }
    return e;
}

/* dims in ops/device_kernels.h's ZLI_ATT_* order: B, tq, tk, d, dv, group. */
extern "C" int zlk_cuda_flash_forward(int dt, const int64_t *dims, bool causal, float scale, const void *q,
                                      const void *k, const void *v, void *out, float *lse, void *stream)
{
    cudaStream_t s = zlk_stream(stream);
    bool wide = dims[3] == 128;
    if (dt == ZLM_BF16)
        return wide ? fl_forward<__nv_bfloat16, 128>(dims, causal, scale, q, k, v, out, lse, s)
                    : fl_forward<__nv_bfloat16, 64>(dims, causal, scale, q, k, v, out, lse, s);
    return wide ? fl_forward<__half, 128>(dims, causal, scale, q, k, v, out, lse, s)
                : fl_forward<__half, 64>(dims, causal, scale, q, k, v, out, lse, s);
}

extern "C" int zlk_cuda_flash_backward(int dt, const int64_t *dims, bool causal, float scale, const void *q,
                                       const void *k, const void *v, const void *out, const void *dout,
                                       const float *lse, float *delta, float *dq, float *dk, float *dv, void *stream)
{
    cudaStream_t s = zlk_stream(stream);
    bool wide = dims[3] == 128;
    if (dt == ZLM_BF16)
        return wide ? fl_backward<__nv_bfloat16, 128>(dims, causal, scale, q, k, v, out, dout, lse, delta, dq, dk,
                                                      dv, s)
                    : fl_backward<__nv_bfloat16, 64>(dims, causal, scale, q, k, v, out, dout, lse, delta, dq, dk,
                                                     dv, s);
    return wide ? fl_backward<__half, 128>(dims, causal, scale, q, k, v, out, dout, lse, delta, dq, dk, dv, s)
                : fl_backward<__half, 64>(dims, causal, scale, q, k, v, out, dout, lse, delta, dq, dk, dv, s);
}
