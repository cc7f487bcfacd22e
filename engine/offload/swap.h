/* Private to the engine (engine/zero, and the tests): the one NVMe swapper
 * behind offload_optimizer's sub-groups, offload_param's chunks and zero.Init's
 * store — a slot cache over one file, through the zl_aio engine — and its folder. */
#ifndef ZL_OFFLOAD_SWAP_H
#define ZL_OFFLOAD_SWAP_H

#include "../core/tensor_impl.h"

/* Design: the file is a row of slots, each on a 4096-byte boundary, laid out
 * in the order they are added. buffer_count aligned buffers (allocated on
 * first need) cache slots: a slot is resident while a buffer holds it, pinned
 * while acquired. I/O runs only on unpinned buffers: a read started by a
 * prefetch, a write started by a dirty release (write-behind: the buffer stays
 * a valid copy, so the slot is served from it, never read back while its
 * write is in flight). A buffer for a slot that is not resident is, in this
 * order: one holding nothing; the least recently used unpinned one with no I/O
 * in flight; the least recently used unpinned one whose write is in flight,
 * after waiting for it; with write_back, the least recently used unpinned one
 * holding changes not yet written, after writing them; for an acquire only,
 * when there is none of those, the prefetched slot not yet acquired that was
 * prefetched last (the one needed last: it is read again when acquired). A
 * pinned slot is never evicted, nor is a prefetched one for another prefetch.
 * One thread drives a swapper. */

typedef struct zli_swap zli_swap;

typedef struct zli_swap_config {
    const char *path;          /* the swap file: created empty by open, removed by close */
    zl_dtype dtype;            /* element type of the slots */
    int64_t buffer_elems;      /* the largest slot, in elements (buffers round it up to whole 4096-byte blocks) */
    int buffer_count;          /* buffers in memory, at least 1 (DeepSpeed's buffer_count) */
    zl_mem_category cat;       /* what the buffers are charged to */
    const char *what;          /* the config block, for messages ("offload_optimizer", "offload_param", ...) */
    /* A dirty release keeps the changes in the buffer; they are written when
     * the buffer is taken for another slot (started early for all but the
     * last used, whenever a slot is brought in) or by flush: for slots
     * changed many times before they are read (gradients added bucket after
     * bucket). Otherwise the last dirty release starts the write. */
    bool write_back;
} zli_swap_config;

typedef struct zli_swap_stats {
    int64_t bytes_read;        /* slot bytes (elements x dtype size) read from the file */
    int64_t bytes_written;     /* and written to it */
    double wait_seconds;       /* spent waiting for reads and writes */
    int64_t buffer_bytes;      /* buffers allocated so far */
    int64_t file_bytes;        /* the file's layout: every slot's region */
    int64_t ahead_dropped;     /* prefetched slots given up to an acquire that found no other buffer */
} zli_swap_stats;

/* A swapper over cfg->path, creating (or truncating) the file. `aio` is
 * borrowed and must outlive the swapper; several swappers may share one.
 * ZL_EINVAL naming the field for a bad config, ZL_EIO naming the file. */
ZLI_HIDDEN zl_status zli_swap_open(zl_aio *aio, const zli_swap_config *cfg, zli_swap **out);
/* Waits for the I/O in flight (its errors are dropped: flush first to see
 * them), frees the buffers and removes the file. NULL is a no-op. */
ZLI_HIDDEN void zli_swap_close(zli_swap *s);

/* A new slot of `elems` elements at the file's next 4096-byte boundary: its
 * id (0, 1, ... in order), or -1 with ZL_EINVAL when elems is negative or
 * larger than buffer_elems. A slot never written reads as zeros. */
ZLI_HIDDEN int zli_swap_add_slot(zli_swap *s, int64_t elems);

/* Start reading the slot into a buffer, so a later acquire need not wait for
 * it. *started is true when the slot is now resident or being read (it is
 * then kept until acquired, until a flush, or until an acquire finds no
 * other buffer), false (ZL_OK) when no buffer
 * can be had: all pinned or prefetched, or, unless may_wait, only ones whose
 * write is in flight. With may_wait the oldest such write is waited for, and
 * its error returned. */
ZLI_HIDDEN zl_status zli_swap_prefetch(zli_swap *s, int slot, bool may_wait, bool *started);

/* The slot's elements in memory, pinned until released: read first (waiting)
 * unless resident; any I/O in flight on its buffer is waited for, so the
 * caller may change the elements. *buf is borrowed: a 1-d tensor of exactly
 * the slot's elements, valid until the slot's last release. Acquiring a pinned
 * slot pins it again. Errors: ZL_ESTATE "<what>: ran out of swap buffers (<n>
 * in use) reading slot <id>; increase <what>.buffer_count" when every buffer
 * is pinned; ZL_EIO "<what>:
 * reading slot <id>: " and the aio engine's message, naming the file (the slot
 * is then not resident); ZL_EIO "<what>: slot <id> was lost: its last write
 * to <file> failed" until acquire_new and a dirty release rewrite it. */
ZLI_HIDDEN zl_status zli_swap_acquire(zli_swap *s, int slot, zl_tensor **buf);
/* As acquire, for a slot the caller is about to overwrite whole: nothing is
 * read. Released clean, the slot keeps its old contents. */
ZLI_HIDDEN zl_status zli_swap_acquire_new(zli_swap *s, int slot, zl_tensor **buf);
/* Unpin one acquire. `dirty`: the elements changed; the last release then
 * starts writing them (asynchronously: a later call that needs the buffer, or
 * flush, waits and returns the write's error). The buffer stays a valid copy.
 * ZL_ESTATE for a slot that is not acquired. */
ZLI_HIDDEN zl_status zli_swap_release(zli_swap *s, int slot, bool dirty);
/* Write what write-back holds, and wait for every read and write in flight;
 * the first error. Prefetched slots become ordinary cached ones (evictable). */
ZLI_HIDDEN zl_status zli_swap_flush(zli_swap *s);
/* The slot's contents will not be read again: a buffer holding it is free
 * for reuse without writing it (a write in flight is waited for, its outcome
 * ignored), and the slot reads as zeros until written again. ZL_ESTATE while
 * it is acquired. */
ZLI_HIDDEN zl_status zli_swap_drop(zli_swap *s, int slot);

/* Uncached, for slots written once and read back rarely (zero.Init's
 * chunks): the slot straight from or into a tensor of its elements and dtype,
 * waited for. A slot never written reads as zeros. Such a swapper may be
 * opened with buffer_elems as large as its largest slot could be: buffers
 * are allocated only by acquire and prefetch. */
ZLI_HIDDEN zl_status zli_swap_read(zli_swap *s, int slot, zl_tensor *dst);
ZLI_HIDDEN zl_status zli_swap_write(zli_swap *s, int slot, zl_tensor *src);

ZLI_HIDDEN zli_swap_stats zli_swap_stats_of(const zli_swap *s);

/* Make <nvme_path>/zlua_swap/<sub> exist and be empty for this run, and write
 * it into out (n bytes). Every folder this makes gets a marker file
 * (.zlua_swap); a folder found non-empty is emptied only when it has the
 * marker, and is otherwise refused (ZL_EIO naming it): this never empties a
 * folder someone else made. `sub` is relative, without "..". Errors name
 * `what` (the config block) and the folder. */
ZLI_HIDDEN zl_status zli_swap_folder(const char *nvme_path, const char *sub, const char *what, char *out,
                                     size_t n);

#endif
