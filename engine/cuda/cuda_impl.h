/* Private to the CUDA module (libzlua_cuda.so): what its files ask of each
 * other. libzlua reaches the module only through the backend table its
 * entry returns (backend.c, core/backend.h). */
#ifndef ZL_CUDA_IMPL_H
#define ZL_CUDA_IMPL_H

#include <stdio.h>
#include "../core/backend.h"
#include "../math/index_fault.h"

/* Device indices the allocator keeps figures for; a higher one is refused. */
#define ZLI_CUDA_MAX_DEVICES 64

typedef enum zli_copy_dir { ZLI_H2D, ZLI_D2H, ZLI_D2D } zli_copy_dir;

/* Visible devices; 0 with the reason in zl_last_error() when there are none. */
ZLI_HIDDEN int zli_cuda_count(void);
/* ZL_OK when device `index` can be used (and makes it the thread's current
 * device); ZL_EDEVICE or ZL_EINVAL with a message otherwise. */
ZLI_HIDDEN zl_status zli_cuda_use(int index);
/* An uninitialised contiguous tensor in device memory from the caching allocator. */
ZLI_HIDDEN zl_tensor *zli_cuda_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index);
/* n bytes between host and device, or within a device, on device `index`;
 * returns when the copy is done. A copy to the host then reads the
 * device's index-fault note (faults.c): the host is about to act on what the
 * device computed. */
ZLI_HIDDEN zl_status zli_cuda_copy(void *dst, const void *src, size_t n, zli_copy_dir dir, int index);
/* A copy from device `from` to device `to`, contiguous blocks. */
ZLI_HIDDEN zl_status zli_cuda_copy_peer(void *dst, int to, const void *src, int from, size_t n);
ZLI_HIDDEN zl_status zli_cuda_memset0(void *p, size_t n, int index);
ZLI_HIDDEN zl_mem_stats zli_cuda_stats(int index, zl_mem_category cat);
/* Bytes charged to tensors on every device together. */
ZLI_HIDDEN int64_t zli_cuda_in_use(void);
/* The device block holding `at` is used on `stream` too (the copy stream):
 * freed, it is not handed out again before that stream's work queued until
 * then is done. False when no block of the allocator holds `at`. */
ZLI_HIDDEN bool zli_cuda_record_use(int index, const void *at, void *stream);
ZLI_HIDDEN int64_t zli_cuda_reserved(int index);
ZLI_HIDDEN zl_status zli_cuda_empty_cache(int index);
ZLI_HIDDEN zl_status zli_cuda_synchronize(int index);
/* The device's index-fault note (faults.c), made on first use; NULL when it
 * cannot be (the op then checks its indices on the host). */
ZLI_HIDDEN zlm_index_fault *zli_cuda_index_faults(int index);
/* After the device's queued work: the fault noted since the last read as
 * the op's error (the note cleared), ZL_OK when none. */
ZLI_HIDDEN zl_status zli_cuda_check_faults(int index);
/* ZL_EDEVICE with "cuda:<index>: <what> failed: <name> (<text>)" for the
 * runtime's error code e (a cudaError_t). */
ZLI_HIDDEN zl_status zli_cuda_fail(const char *what, int index, int e);
/* A release (cudaFree, cudaFreeHost, an event's or stream's end) that failed:
 * nobody waits on it to report, so the first one of the process is said on
 * stderr; it means the device's context broke earlier. */
ZLI_HIDDEN void zli_cuda_released(const char *what, int e);
/* The end of a kernel launch on device `index`: the launch's error, or with
 * ZLUA_CUDA_SYNC set the kernel's (waited for); ZL_EDEVICE naming `what`. */
ZLI_HIDDEN zl_status zli_cuda_done(int index, const char *what, int launched);

/* Core's primitives on the device (prims.c), for the allocator's table. */
ZLI_HIDDEN zl_status zli_cuda_copy_into(zl_tensor *dst, const zl_tensor *src);
ZLI_HIDDEN zl_status zli_cuda_fill(zl_tensor *t, double v);
ZLI_HIDDEN zl_status zli_cuda_add(zl_tensor *dst, const zl_tensor *src, double alpha);
ZLI_HIDDEN zl_status zli_cuda_from_host(zl_tensor *dst, const zl_tensor *src);
ZLI_HIDDEN zl_status zli_cuda_to_host(void *dst, const zl_tensor *src);
ZLI_HIDDEN zl_status zli_cuda_rand(zl_tensor *t, bool normal, double a, double b, uint64_t seed, uint64_t offset);
/* cuBLASLt's GEMMs, row-major (blas.c): f32, one and `batch` of them with
 * strides between operands, alpha and beta, and bf16/f16 operands into f32
 * (ops/device_kernels.h's gemm, gemm_batched and gemm_half). */
ZLI_HIDDEN zl_status zli_cuda_gemm(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                                   int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc);
ZLI_HIDDEN zl_status zli_cuda_gemm_batched(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                           const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb,
                                           int64_t sb, float beta, float *C, int64_t ldc, int64_t sc, int64_t batch);
ZLI_HIDDEN zl_status zli_cuda_gemm_half(int index, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                        float alpha, const void *A, int64_t lda, int64_t sa, const void *B,
                                        int64_t ldb, int64_t sb, float beta, float *C, int64_t ldc, int64_t sc,
                                        int64_t batch);
/* linear's forward with half-precision operands: the output in their dtype,
 * the bias in the GEMM's epilogue (ops/device_kernels.h's linear_half). */
ZLI_HIDDEN zl_status zli_cuda_linear_half(int index, int dt, int64_t M, int64_t N, int64_t K, const void *A,
                                          int64_t lda, const void *B, int64_t ldb, const float *bias, void *D,
                                          int64_t ldd, bool *done);
/* For the GPU tests: every cuBLASLt plan answered NOT_SUPPORTED while on (so
 * the fallback runs), and the GEMMs that ran on the fallback so far. */
ZLI_HIDDEN void zli_cuda_blas_refuse_plans(bool on);
ZLI_HIDDEN int64_t zli_cuda_blas_fallbacks(void);
/* The ops layer's kernels on CUDA (ops.c), as an opaque table for core. */
ZLI_HIDDEN extern const struct zli_dev_kernels zli_cuda_kernels;
/* Page-locked host memory (pinned.c) and the device table it names (alloc.c). */
ZLI_HIDDEN zl_tensor *zli_cuda_alloc_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                           int index);
ZLI_HIDDEN void zli_cuda_free_pinned(zl_storage *s);
ZLI_HIDDEN const zli_device_ops *zli_cuda_ops(void);
/* The copy stream and its events (stream.c), for the allocator's table. */
ZLI_HIDDEN extern const zli_copy_stream zli_cuda_streams;
/* The optim layer's table on CUDA (optim.c), as opaque to core. */
ZLI_HIDDEN extern const struct zli_dev_optim zli_cuda_optim;

/* The nccl communicator backend (nccl.c), given the communicator's functions. */
ZLI_HIDDEN const void *zli_cuda_comm(const void *comm_api);
/* core's table, for core_link.c's forwarders. */
ZLI_HIDDEN void zli_cuda_link_core(const zli_core_api *api);

#endif
