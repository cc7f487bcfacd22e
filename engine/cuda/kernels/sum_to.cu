/* A gradient summed down to a broadcast operand's shape. Leading dims summed
 * away and trailing ones kept, dims of size 1 aside (a bias's gradient:
 * [rows, cols] to [cols]), is a column sum, a block per 32 columns whose 32 rows of threads each add every
 * 32nd row (math/sum_to.h's lanes); any other shape one thread per
 * output element in the CPU's order. */
#include "common.cuh"
#include "../../math/sum_to.h"

#define ZLK_COL_LANES 32

/* A warp reads 32 neighbouring elements of a row; the lanes' double sums are
 * added in lane order, the same bits every run. */
__global__ void colsum(int64_t rows, int64_t cols, const float *g, float *out)
{
    __shared__ double part[ZLK_COL_LANES][33];
    int64_t j = blockIdx.x * (int64_t)32 + threadIdx.x;
    part[threadIdx.y][threadIdx.x] = j < cols ? zlm_colsum_lane(g, rows, cols, j, threadIdx.y, ZLK_COL_LANES) : 0.0;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        double t = 0;
        for (int l = 0; l < ZLK_COL_LANES; l++) t += part[l][threadIdx.x];
        out[j] = (float)t;
    }
}

struct sum_to_args {
    int nd;
    int64_t shape[8];
    int red[8];
};

__global__ void sum_to(sum_to_args a, const float *g, float *out, int64_t nout)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < nout; j += (int64_t)gridDim.x * blockDim.x)
        out[j] = zlm_sum_to_elem(g, a.nd, a.shape, a.red, j);
}

extern "C" int zlk_cuda_sum_to(int nd, const int64_t *shape, const int *red, const float *g, float *out, int64_t nout,
                               void *stream)
{
    if (nout <= 0) return 0;
    /* Dims of size 1 change no offset: the rest must be summed ones, then
     * kept ones. */
    int64_t rows = 1;
    bool column_sum = true, kept = false;
    for (int d = 0; d < nd && column_sum; d++) {
        if (shape[d] == 1) continue;
        if (!red[d]) {
            kept = true;
        } else {
            column_sum = !kept;
            rows *= shape[d];
        }
    }
    if (column_sum && rows > 1) {
        colsum<<<(unsigned)((nout + 31) / 32), dim3(32, ZLK_COL_LANES), 0, zlk_stream(stream)>>>(rows, nout, g, out);
        return zlk_launched();
    }
    sum_to_args a = {nd, {0}, {0}};
    for (int d = 0; d < nd; d++) {
        a.shape[d] = shape[d];
        a.red[d] = red[d];
    }
    sum_to<<<zlk_blocks(nout), ZLK_THREADS, 0, zlk_stream(stream)>>>(a, g, out, nout);
    return zlk_launched();
}
