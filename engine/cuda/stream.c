/* Each device's copy stream (zli_copy_stream, core/tensor_impl.h): one
 * non-blocking stream per device, made on first use, so that copies between
 * host and device run while the default stream's kernels go on; events
 * order the two where a copy reads or feeds the compute, and the allocator
 * keeps a device buffer a copy uses until the copy is done. */
#include <pthread.h>
#include <cuda_runtime_api.h>
#include "cuda_impl.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t g_copy[ZLI_CUDA_MAX_DEVICES];

/* Non-blocking: the legacy default stream, which every kernel goes to, does
 * not wait for it nor it for the default stream; only events order them. */
static zl_status copy_stream(int index, cudaStream_t *s)
{
    if (zli_cuda_use(index)) return zli_last_code();
    pthread_mutex_lock(&g_mu);
    cudaError_t e = cudaSuccess;
    if (!g_copy[index]) e = cudaStreamCreateWithFlags(&g_copy[index], cudaStreamNonBlocking);
    *s = g_copy[index];
    pthread_mutex_unlock(&g_mu);
    return e == cudaSuccess ? ZL_OK : zli_cuda_fail("cudaStreamCreateWithFlags (the copy stream)", index, e);
}

static zl_status record(int index, cudaStream_t on, void **ev)
{
    cudaEvent_t e;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r == cudaSuccess && (r = cudaEventRecord(e, on)) != cudaSuccess) cudaEventDestroy(e);
    if (r != cudaSuccess) return zli_cuda_fail("recording an event", index, r);
    *ev = e;
    return ZL_OK;
}

static zl_status mark(int index, void **ev)
{
    *ev = NULL;
    if (zli_cuda_use(index)) return zli_last_code();
    return record(index, 0, ev);
}

static zl_status start(int index, void *after, void *dst, const void *src, size_t n, bool to_host, void **done)
{
    *done = NULL;
    cudaStream_t s = NULL;
    void *now = NULL;
    zl_status st = copy_stream(index, &s);
    if (!st && !after) st = record(index, 0, &now);
    if (st) return st;
    /* the wait takes the event's state now: it may be destroyed right after */
    cudaError_t e = cudaStreamWaitEvent(s, after ? after : now, 0);
    if (now) cudaEventDestroy(now);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, n, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return zli_cuda_fail("queueing a copy on the copy stream", index, e);
    /* The device buffer, freed before the copy is done, waits for it. */
    zli_cuda_record_use(index, to_host ? src : dst, s);
    return record(index, s, done);
}

static zl_status wait(int index, void *ev, bool host)
{
    if (!ev) return ZL_OK;
    if (zli_cuda_use(index)) return zli_last_code();
    cudaError_t e = host ? cudaEventSynchronize(ev) : cudaStreamWaitEvent(0, ev, 0);
    if (e == cudaSuccess) return ZL_OK;
    return zli_cuda_fail(host ? "waiting for a copy" : "ordering the compute after a copy", index, e);
}

static void drop(void *ev)
{
    if (ev) zli_cuda_released("cudaEventDestroy", (int)cudaEventDestroy(ev));
}

const zli_copy_stream zli_cuda_streams = {.mark = mark, .start = start, .wait = wait, .drop = drop};
