/* zlua/aio.h — asynchronous file I/O for offload, on libaio: files opened
 * with O_DIRECT (a buffered fallback, with a one-line warning, where the
 * filesystem refuses it), each request split into block_size pieces with up
 * to queue_depth of them in flight per thread, intra_op_parallelism threads
 * sharing each request. DeepSpeed's "aio" config block, key for key. */
#ifndef ZLUA_AIO_H
#define ZLUA_AIO_H
#include "base.h"
#include "tensor.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct zl_aio zl_aio;
typedef struct zl_aio_request zl_aio_request;

typedef struct zl_aio_config {
    int64_t block_size;         /* bytes per piece; a multiple of 4096 (DeepSpeed: 1 MiB) */
    int queue_depth;            /* pieces in flight per thread (8) */
    int intra_op_parallelism;   /* threads sharing each request (1); DeepSpeed's old name thread_count */
    bool single_submit;         /* one io_submit per piece instead of batches (false) */
    bool overlap_events;        /* refill the queue as pieces complete (true), or reap whole batches */
} zl_aio_config;

/* NULL when this build has libaio; otherwise why not and how to get it
 * (borrowed, static). Without it zl_aio_open, write, read and wait fail with
 * ZL_EINVAL and this message; zl_aio_buffer and the defaults still work. */
ZL_API const char *zl_aio_unavailable(void);

/* DeepSpeed's defaults (above). */
ZL_API zl_aio_config zl_aio_defaults(void);

/* A new engine; ZL_EINVAL naming the key for a bad value. With the
 * environment variable ZLUA_AIO_BUFFERED=1 its files are opened without
 * O_DIRECT, as on a filesystem that refuses it (silently: it was asked for). */
ZL_API zl_status zl_aio_open(const zl_aio_config *cfg, zl_aio **out);
/* Waits for requests still in flight, then frees. NULL is a no-op. */
ZL_API void zl_aio_close(zl_aio *a);

/* Write the bytes of a contiguous CPU tensor into file `path` at byte
 * `offset` (a multiple of 4096), creating the file if needed; or read them
 * back from it. Any tensor works: memory or lengths not aligned for O_DIRECT
 * go through aligned bounce blocks; tensors from zl_aio_buffer go direct.
 * The tensor is retained until the request is waited on and must not be
 * touched before. NULL with zl_last_error() when the arguments are wrong. */
ZL_API zl_aio_request *zl_aio_write(zl_aio *a, const char *path, zl_tensor *t, int64_t offset);
ZL_API zl_aio_request *zl_aio_read(zl_aio *a, const char *path, zl_tensor *t, int64_t offset);

/* Wait for a request and free it (exactly once). Its status: ZL_EIO with a
 * message naming the file and what failed (a short read, ENOSPC, EIO, EACCES,
 * EROFS, a missing file, ...). */
ZL_API zl_status zl_aio_wait(zl_aio_request *r);

/* A contiguous tensor whose storage starts on a 4096-byte boundary and is a
 * whole number of 4096-byte blocks long: swap buffers that go direct. */
ZL_API zl_tensor *zl_aio_buffer(zl_dtype dt, int64_t numel, zl_mem_category cat);

/* False once a file of this engine fell back to buffered I/O. */
ZL_API bool zl_aio_is_direct(const zl_aio *a);

/* Seconds since the engine opened during which at least one request was
 * queued or moving: how long it kept the disk busy, whoever waited. */
ZL_API double zl_aio_busy_seconds(zl_aio *a);

#ifdef __cplusplus
}
#endif
#endif
