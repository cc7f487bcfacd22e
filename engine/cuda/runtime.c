/* The CUDA runtime as the engine sees it: whether there is a device at all
 * (probed once, with the reason when there is none), choosing a device, and
 * copies. The caching allocator is alloc.c. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "cuda_impl.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_count;
static char g_why[768];

/* The runtime's own answer for a machine without a driver is "CUDA driver
 * version is insufficient", which sends users looking for the wrong thing, so
 * the message also says what was looked for and found. */
static void probe(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) { g_count = n; return; }
    g_count = 0;
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (drv) dlclose(drv);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char answer[256];
    if (e != cudaSuccess)
        snprintf(answer, sizeof answer, "cudaGetDeviceCount failed with %s (%s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
    else
        snprintf(answer, sizeof answer, "the CUDA runtime sees 0 devices");
    snprintf(g_why, sizeof g_why,
             "no CUDA device: %s; looked for the NVIDIA driver (libcuda.so.1: %s, /dev/nvidiactl: %s) "
             "and devices under CUDA_VISIBLE_DEVICES=%s",
             answer, drv ? "found" : "not found", access("/dev/nvidiactl", F_OK) == 0 ? "present" : "absent",
             vis ? vis : "(unset)");
    cudaGetLastError();   /* the probe's failure is not the next call's */
}

int zli_cuda_count(void)
{
    pthread_once(&g_once, probe);
    if (!g_count) zl_error(ZL_EDEVICE, "%s", g_why);
    return g_count;
}

zl_status zli_cuda_use(int index)
{
    int n = zli_cuda_count();
    if (!n) return ZL_EDEVICE;
    if (index < 0 || index >= n || index >= ZLI_CUDA_MAX_DEVICES)
        return zl_error(ZL_EINVAL, "cuda:%d: no such device (%d visible)", index, n);
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess)
        return zl_error(ZL_EDEVICE, "cuda:%d: cannot be used: %s (%s)", index, cudaGetErrorName(e),
                        cudaGetErrorString(e));
    return ZL_OK;
}

zl_status zli_cuda_fail(const char *what, int index, int e)
{
    return zl_error(ZL_EDEVICE, "cuda:%d: %s failed: %s (%s)", index, what, cudaGetErrorName((cudaError_t)e),
                    cudaGetErrorString((cudaError_t)e));
}

void zli_cuda_released(const char *what, int e)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (e == cudaSuccess || atomic_flag_test_and_set(&said)) return;
    fprintf(stderr, "zlua: warning: cuda: %s failed: %s (%s); the device's context is broken, and later failures to "
            "release memory are not reported\n", what, cudaGetErrorName((cudaError_t)e),
            cudaGetErrorString((cudaError_t)e));
}

zl_status zli_cuda_copy(void *dst, const void *src, size_t n, zli_copy_dir dir, int index)
{
    if (!n) return ZL_OK;
    if (zli_cuda_use(index)) return zli_last_code();
    enum cudaMemcpyKind k = dir == ZLI_H2D ? cudaMemcpyHostToDevice
                          : dir == ZLI_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpy(dst, src, n, k);
    if (e != cudaSuccess) return zli_cuda_fail("copy", index, e);
    return dir == ZLI_D2H ? zli_cuda_check_faults(index) : ZL_OK;
}

zl_status zli_cuda_copy_peer(void *dst, int to, const void *src, int from, size_t n)
{
    if (!n) return ZL_OK;
    if (zli_cuda_use(to) || zli_cuda_use(from)) return zli_last_code();
    cudaError_t e = cudaMemcpyPeer(dst, to, src, from, n);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return e == cudaSuccess ? ZL_OK : zli_cuda_fail("copy between devices", from, e);
}

zl_status zli_cuda_memset0(void *p, size_t n, int index)
{
    if (zli_cuda_use(index)) return zli_last_code();
    cudaError_t e = cudaMemset(p, 0, n);
    return e == cudaSuccess ? ZL_OK : zli_cuda_fail("memset", index, e);
}

static pthread_once_t g_sync_once = PTHREAD_ONCE_INIT;
static bool g_sync_each;

static void read_sync_env(void)
{
    const char *v = getenv("ZLUA_CUDA_SYNC");
    g_sync_each = v && *v && strcmp(v, "0") != 0;
}

/* Every launch goes to the default stream, which runs kernels in launch order
 * and is waited for by every copy to the host, so an op need not wait for its
 * kernel: a fault shows at the next copy back (as in PyTorch). ZLUA_CUDA_SYNC=1
 * waits after each launch instead, so the failing op names itself. */
zl_status zli_cuda_done(int index, const char *what, int launched)
{
    pthread_once(&g_sync_once, read_sync_env);
    int e = launched ? launched : g_sync_each ? (int)cudaDeviceSynchronize() : 0;
    return e ? zli_cuda_fail(what, index, e) : ZL_OK;
}

zl_status zli_cuda_synchronize(int index)
{
    if (zli_cuda_use(index)) return zli_last_code();
    cudaError_t e = cudaDeviceSynchronize();
    return e != cudaSuccess ? zli_cuda_fail("synchronize", index, e) : zli_cuda_check_faults(index);
}
