/* Private to the engine: the one swapper behind every NVMe offload (optimizer
 * sub-groups, stage-3 parameter chunks, zero.Init's store). One file of
 * slots, each a region at a 4096-byte boundary, cached in buffer_count
 * aligned buffers moved through the zl_aio engine. Never installed. */
#ifndef ZL_SWAP_H
#define ZL_SWAP_H

#include "zlua/zlua.h"

typedef struct zli_swap zli_swap;

typedef struct zli_swap_config {
    const char *path;          /* the swap file: created empty, removed by zli_swap_close */
    zl_dtype dtype;            /* element type of the slots */
    int64_t buffer_elems;      /* elements per buffer: the largest slot (0: no buffers, direct reads/writes only) */
    int buffer_count;          /* buffers in memory (0 with buffer_elems 0) */
    zl_mem_category cat;       /* what the buffers are charged to */
    const char *what;          /* the config block, for messages ("offload_optimizer") */
} zli_swap_config;

typedef struct zli_swap_figures {
    int64_t read_bytes, write_bytes;   /* moved to and from the file so far */
    int64_t buffer_bytes;              /* buffers allocated */
    int64_t file_bytes;                /* the file's slots */
    double io_seconds;                 /* waited on I/O */
} zli_swap_figures;

zl_status zli_swap_open(zl_aio *aio, const zli_swap_config *cfg, zli_swap **out);
/* Waits for I/O in flight, frees the buffers, removes the file. NULL is a no-op. */
void zli_swap_close(zli_swap *s);
/* A new slot of elems elements at the next 4096-byte boundary: its id, or -1
 * with an error (larger than a buffer). */
int zli_swap_add_slot(zli_swap *s, int64_t elems);

/* Start reading a slot into a buffer, unless it is in one already; false
 * (no error) when no buffer is free without waiting. */
bool zli_swap_prefetch(zli_swap *s, int slot);
/* The slot's elements in memory, read (waiting) when needed and pinned until
 * zli_swap_release: *buf is the whole buffer (borrowed), the slot in its first
 * elements. Every buffer pinned is an error naming <what>.buffer_count. */
zl_status zli_swap_acquire(zli_swap *s, int slot, zl_tensor **buf);
/* The same for a slot about to be overwritten whole: no read. */
zl_status zli_swap_acquire_new(zli_swap *s, int slot, zl_tensor **buf);
/* Unpin; dirty starts writing the slot back. The buffer keeps serving the
 * slot until it is needed for another. */
zl_status zli_swap_release(zli_swap *s, int slot, bool dirty);
/* Wait for every read and write in flight; the first error. */
zl_status zli_swap_flush(zli_swap *s);

/* Uncached: a slot straight from or into a tensor of its elements (zero.Init's chunks). */
zl_status zli_swap_read(zli_swap *s, int slot, zl_tensor *dst);
zl_status zli_swap_write(zli_swap *s, int slot, zl_tensor *src);

void zli_swap_figures_of(const zli_swap *s, zli_swap_figures *out);

/* <nvme_path>/zlua_swap/<sub> made, and emptied, for this run; out receives
 * it. A folder is only ever emptied when it carries the marker this function
 * leaves in the folders it makes: anything else there is refused, named. */
zl_status zli_swap_folder(const char *nvme_path, const char *sub, const char *what, char *out, size_t n);

#endif
