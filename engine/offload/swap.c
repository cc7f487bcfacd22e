/* The slot cache of swap.h: slots of one swap file held in buffer_count aligned
 * buffers, read and written through the zl_aio engine, with prefetch,
 * write-behind and least-recently-used eviction. */
#define _GNU_SOURCE
#include "swap.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SWAP_ALIGN 4096       /* O_DIRECT's unit, and the slots' alignment in the file */

typedef struct swap_slot {
    int64_t offset;           /* bytes into the file */
    int64_t elems;
    int buf;                  /* the buffer holding it, or -1 */
    bool written;             /* the file holds it (else it reads as zeros) */
    bool lost;                /* its last write failed: the file holds stale bytes */
} swap_slot;

typedef struct swap_buffer {
    zl_tensor *mem;           /* buffer_elems rounded up; NULL until first needed */
    zl_tensor *view;          /* the slot's elements in mem, while it holds one */
    int slot;                 /* -1: holds nothing */
    int pins;
    bool fresh;               /* prefetched, not acquired since: evicted only by a demand read */
    bool dirty;               /* changed by a pin: written at the last release, or (write_back) when evicted or flushed */
    bool valid;               /* holds the slot's contents (not so after acquire_new, until written) */
    zl_aio_request *req;      /* a read or write in flight; none while pinned */
    bool writing;
    uint64_t used;            /* last release or acquire, for LRU */
    uint64_t ahead;           /* when it was prefetched: the latest is the one needed last */
} swap_buffer;

struct zli_swap {
    zl_aio *aio;
    char *path, *what;
    zl_dtype dtype;
    size_t esize;
    int64_t buffer_elems;     /* as configured: the largest slot */
    int64_t mem_elems;        /* rounded up to whole blocks */
    zl_mem_category cat;
    bool write_back;
    int nbuf;
    swap_buffer *bufs;
    swap_slot *slots;
    int nslots, cap;
    uint64_t tick;
    zli_swap_stats st;
};

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The slot's whole blocks in elements: I/O moves them all, so it goes direct
 * (the padding past the slot belongs to its region). */
static int64_t region_elems(const zli_swap *s, const swap_slot *sl)
{
    return round_up(sl->elems * (int64_t)s->esize, SWAP_ALIGN) / (int64_t)s->esize;
}

static zl_status check_slot(const zli_swap *s, int slot, const char *op)
{
    if (!s) return zl_error(ZL_EINVAL, "swap %s: the swapper is NULL", op);
    if (slot < 0 || slot >= s->nslots)
        return zl_error(ZL_EINVAL, "%s: %s of slot %d, which does not exist (%d slots)", s->what, op, slot,
                        s->nslots);
    return ZL_OK;
}

/* The buffer forgets its slot; its I/O is over. */
static void unbind(zli_swap *s, swap_buffer *b)
{
    if (b->slot >= 0) s->slots[b->slot].buf = -1;
    zl_tensor_release(b->view);
    b->view = NULL;
    b->slot = -1;
    b->pins = 0;
    b->fresh = b->dirty = b->valid = false;
}

/* Wait for the buffer's I/O, if any. A failure drops the slot (a failed write
 * leaves it lost) and returns the aio message, naming the file, prefixed with
 * what and the slot. */
static zl_status wait_io(zli_swap *s, swap_buffer *b)
{
    if (!b->req) return ZL_OK;
    double t0 = now();
    zl_status st = zl_aio_wait(b->req);
    s->st.wait_seconds += now() - t0;
    b->req = NULL;
    if (!st) return ZL_OK;
    char msg[768];
    snprintf(msg, sizeof msg, "%s", zl_last_error());
    int slot = b->slot;
    bool write = b->writing;
    if (write) s->slots[slot].lost = true;
    unbind(s, b);
    return zl_error(st, "%s: %s slot %d: %s", s->what, write ? "writing" : "reading", slot, msg);
}

/* Wait for the buffer's I/O whose outcome no longer matters; the caller's
 * error, if any, outlives it. */
static void quiet_wait(swap_buffer *b)
{
    if (!b->req) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zl_last_error());
    zl_status code = zli_last_code();
    zl_aio_wait(b->req);
    b->req = NULL;
    if (code) zl_error(code, "%s", msg);
    else zl_clear_error();
}

static zl_status start_io(zli_swap *s, swap_buffer *b, bool write)
{
    swap_slot *sl = &s->slots[b->slot];
    int64_t n = region_elems(s, sl), one = 1;
    zl_tensor *v = zli_view_of(b->mem, 1, &n, &one, 0);
    if (!v) return zl_error(ZL_ENOMEM, "%s: out of memory for a view of slot %d", s->what, b->slot);
    b->req = write ? zl_aio_write(s->aio, s->path, v, sl->offset) : zl_aio_read(s->aio, s->path, v, sl->offset);
    zl_tensor_release(v);
    b->writing = write;
    if (!b->req) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", zl_last_error());
        int slot = b->slot;
        if (write) sl->lost = true;
        zl_status st = zli_last_code();
        unbind(s, b);
        return zl_error(st ? st : ZL_EIO, "%s: %s slot %d: %s", s->what, write ? "writing" : "reading", slot, msg);
    }
    int64_t bytes = sl->elems * (int64_t)s->esize;
    if (write) s->st.bytes_written += bytes;
    else s->st.bytes_read += bytes;
    return ZL_OK;
}

/* Write-back: the changes a buffer holds go to the file (the slot's region
 * counts as written from now on; the buffer stays a valid copy). */
static zl_status write_out(zli_swap *s, swap_buffer *b)
{
    b->dirty = false;
    b->valid = true;
    s->slots[b->slot].written = true;
    s->slots[b->slot].lost = false;
    return start_io(s, b, true);
}

/* Pick a buffer for a slot that is not resident (see swap.h for the order),
 * evicting what it holds; *idx = -1 when none can be had. Only a demand read
 * (an acquire) may take a prefetched buffer: a read ahead must not fail the
 * read that is needed now. */
static zl_status pick(zli_swap *s, bool may_wait, bool demand, int *idx)
{
    int empty = -1, clean = -1, writing = -1, unwritten = -1, ahead = -1;
    for (int i = 0; i < s->nbuf; i++) {
        swap_buffer *b = &s->bufs[i];
        if (b->slot < 0) {
            /* An allocated one first, so memory grows only when the cache is full. */
            if (empty < 0 || (b->mem && !s->bufs[empty].mem)) empty = i;
        } else if (!b->pins && b->fresh) {
            if (ahead < 0 || b->ahead > s->bufs[ahead].ahead) ahead = i;
        } else if (!b->pins) {
            int *best = b->req ? &writing : b->dirty ? &unwritten : &clean;
            if (*best < 0 || b->used < s->bufs[*best].used) *best = i;
        }
    }
    *idx = empty >= 0 ? empty : clean >= 0 ? clean : may_wait && writing >= 0 ? writing
         : may_wait && unwritten >= 0 ? unwritten : demand ? ahead : -1;
    if (*idx >= 0 && *idx == ahead) s->st.ahead_dropped++;
    if (*idx < 0) return ZL_OK;
    swap_buffer *b = &s->bufs[*idx];
    /* with write_back, a changed slot read ahead again is in `ahead`, changes and all */
    zl_status st = b->dirty ? write_out(s, b) : ZL_OK;
    if (!st) st = wait_io(s, b);
    if (st) {
        *idx = -1;
        return st;
    }
    unbind(s, b);
    return ZL_OK;
}

/* Write-back, before a slot that is not resident is brought in: the changes
 * of every other unpinned buffer but the last used start going to the file,
 * so that a later eviction finds them written instead of writing and waiting
 * then. The last used one is spared: it is likely to be changed again. */
static zl_status write_behind(zli_swap *s)
{
    int last = -1;
    for (int i = 0; i < s->nbuf; i++)
        if (s->bufs[i].slot >= 0 && (last < 0 || s->bufs[i].used > s->bufs[last].used)) last = i;
    for (int i = 0; i < s->nbuf; i++) {
        swap_buffer *b = &s->bufs[i];
        if (i == last || b->slot < 0 || b->pins || !b->dirty || b->req) continue;
        zl_status st = write_out(s, b);
        if (st) return st;
    }
    return ZL_OK;
}

/* Give the picked buffer to the slot: memory on first use, and the slot's view. */
static zl_status bind(zli_swap *s, int idx, int slot)
{
    swap_buffer *b = &s->bufs[idx];
    if (!b->mem) {
        b->mem = zl_aio_buffer(s->dtype, s->mem_elems, s->cat);
        if (!b->mem)
            return zl_error(ZL_ENOMEM, "%s: out of memory for swap buffer %d of %lld bytes", s->what, idx,
                            (long long)(s->mem_elems * (int64_t)s->esize));
        s->st.buffer_bytes += s->mem_elems * (int64_t)s->esize;
    }
    int64_t n = s->slots[slot].elems, one = 1;
    b->view = zli_view_of(b->mem, 1, &n, &one, 0);
    if (!b->view) return zl_error(ZL_ENOMEM, "%s: out of memory for a view of slot %d", s->what, slot);
    b->slot = slot;
    s->slots[slot].buf = idx;
    return ZL_OK;
}

/* Bring a slot that is not resident into a buffer: a read started (not
 * waited for), zeros for a slot never written, or nothing for acquire_new.
 * *idx = -1 (ZL_OK) when no buffer can be had. */
static zl_status load(zli_swap *s, int slot, bool may_wait, bool demand, bool read, int *idx)
{
    zl_status st = s->write_back ? write_behind(s) : ZL_OK;
    if (!st) st = pick(s, may_wait, demand, idx);
    if (st || *idx < 0) return st;
    if ((st = bind(s, *idx, slot))) return st;
    swap_buffer *b = &s->bufs[*idx];
    swap_slot *sl = &s->slots[slot];
    if (!read) return ZL_OK;
    b->valid = true;
    if (sl->written) return start_io(s, b, false);
    memset(zl_tensor_data(b->mem), 0, (size_t)(region_elems(s, sl) * (int64_t)s->esize));
    return ZL_OK;
}

static zl_status lost_error(const zli_swap *s, int slot)
{
    return zl_error(ZL_EIO, "%s: slot %d was lost: its last write to %s failed", s->what, slot, s->path);
}

static zl_status acquire(zli_swap *s, int slot, bool read, zl_tensor **buf)
{
    const char *op = read ? "acquire" : "acquire_new";
    if (!buf) return zl_error(ZL_EINVAL, "swap %s: the output pointer is NULL", op);
    *buf = NULL;
    zl_status st = check_slot(s, slot, op);
    if (st) return st;
    swap_slot *sl = &s->slots[slot];
    if (read && sl->lost) return lost_error(s, slot);
    int idx = sl->buf;
    if (idx < 0) {
        if ((st = load(s, slot, true, true, read, &idx))) return st;
        if (idx < 0) {
            int held = 0;
            for (int i = 0; i < s->nbuf; i++) held += s->bufs[i].pins > 0;
            return zl_error(ZL_ESTATE, "%s: ran out of swap buffers (%d in use) %s slot %d; increase %s.buffer_count",
                            s->what, held, read ? "reading" : "writing", slot, s->what);
        }
    }
    swap_buffer *b = &s->bufs[idx];
    if ((st = wait_io(s, b))) return st;
    b->pins++;
    b->fresh = false;
    b->used = ++s->tick;
    *buf = b->view;
    return ZL_OK;
}

zl_status zli_swap_acquire(zli_swap *s, int slot, zl_tensor **buf) { return acquire(s, slot, true, buf); }

zl_status zli_swap_acquire_new(zli_swap *s, int slot, zl_tensor **buf) { return acquire(s, slot, false, buf); }

zl_status zli_swap_prefetch(zli_swap *s, int slot, bool may_wait, bool *started)
{
    if (!started) return zl_error(ZL_EINVAL, "swap prefetch: the output pointer is NULL");
    *started = false;
    zl_status st = check_slot(s, slot, "prefetch");
    if (st) return st;
    if (s->slots[slot].lost) return lost_error(s, slot);
    int idx = s->slots[slot].buf;
    if (idx < 0 && ((st = load(s, slot, may_wait, false, true, &idx)) || idx < 0)) return st;
    if (!s->bufs[idx].fresh) s->bufs[idx].ahead = ++s->tick;
    s->bufs[idx].fresh = true;
    *started = true;
    return ZL_OK;
}

zl_status zli_swap_release(zli_swap *s, int slot, bool dirty)
{
    zl_status st = check_slot(s, slot, "release");
    if (st) return st;
    int idx = s->slots[slot].buf;
    if (idx < 0 || s->bufs[idx].pins == 0)
        return zl_error(ZL_ESTATE, "%s: release of slot %d, which is not acquired", s->what, slot);
    swap_buffer *b = &s->bufs[idx];
    b->dirty |= dirty;
    if (--b->pins > 0) return ZL_OK;
    b->used = ++s->tick;
    if (b->dirty && s->write_back) {
        b->valid = true;
        return ZL_OK;
    }
    if (b->dirty) return write_out(s, b);
    if (!b->valid) unbind(s, b);
    return ZL_OK;
}

zl_status zli_swap_drop(zli_swap *s, int slot)
{
    zl_status st = check_slot(s, slot, "drop");
    if (st) return st;
    swap_slot *sl = &s->slots[slot];
    int idx = sl->buf;
    if (idx >= 0) {
        swap_buffer *b = &s->bufs[idx];
        if (b->pins) return zl_error(ZL_ESTATE, "%s: drop of slot %d, which is acquired", s->what, slot);
        /* a write in flight cannot be called back; its error no longer matters */
        quiet_wait(b);
        unbind(s, b);
    }
    sl->written = false;
    sl->lost = false;
    return ZL_OK;
}

zl_status zli_swap_flush(zli_swap *s)
{
    if (!s) return zl_error(ZL_EINVAL, "swap flush: the swapper is NULL");
    zl_status first = ZL_OK;
    char msg[1024] = "";
    for (int i = 0; i < s->nbuf; i++) {
        swap_buffer *b = &s->bufs[i];
        if (b->slot >= 0 && !b->pins && b->dirty && !b->req && write_out(s, b) && !first) {
            first = zli_last_code();
            snprintf(msg, sizeof msg, "%s", zl_last_error());
        }
    }
    for (int i = 0; i < s->nbuf; i++) {
        zl_status st = wait_io(s, &s->bufs[i]);
        if (st && !first) {
            first = st;
            snprintf(msg, sizeof msg, "%s", zl_last_error());
        }
        s->bufs[i].fresh = false;
    }
    return first ? zl_error(first, "%s", msg) : ZL_OK;
}

int zli_swap_add_slot(zli_swap *s, int64_t elems)
{
    if (!s) {
        zl_error(ZL_EINVAL, "swap add_slot: the swapper is NULL");
        return -1;
    }
    if (elems < 0 || elems > s->buffer_elems) {
        zl_error(ZL_EINVAL, "%s: a slot of %lld elements does not fit the swap buffers of %lld elements", s->what,
                 (long long)elems, (long long)s->buffer_elems);
        return -1;
    }
    if (s->nslots == INT_MAX) {
        zl_error(ZL_EINVAL, "%s: too many swap slots", s->what);
        return -1;
    }
    if (s->nslots == s->cap) {
        int cap = s->cap ? (s->cap > INT_MAX / 2 ? INT_MAX : s->cap * 2) : 16;
        swap_slot *p = realloc(s->slots, (size_t)cap * sizeof *p);
        if (!p) {
            zl_error(ZL_ENOMEM, "%s: out of memory for %d swap slots", s->what, cap);
            return -1;
        }
        s->slots = p;
        s->cap = cap;
    }
    swap_slot *sl = &s->slots[s->nslots];
    *sl = (swap_slot){.offset = s->st.file_bytes, .elems = elems, .buf = -1};
    s->st.file_bytes += region_elems(s, sl) * (int64_t)s->esize;
    return s->nslots++;
}

static zl_status direct(zli_swap *s, int slot, zl_tensor *t, bool write)
{
    const char *op = write ? "write" : "read";
    zl_status st = check_slot(s, slot, op);
    if (st) return st;
    swap_slot *sl = &s->slots[slot];
    if (!t || zl_tensor_numel(t) != sl->elems || zl_tensor_dtype(t) != s->dtype || !zl_tensor_is_contiguous(t))
        return zl_error(ZL_EINVAL, "%s: %s of slot %d needs a contiguous tensor of %lld %s elements", s->what, op, slot,
                        (long long)sl->elems, zl_dtype_name(s->dtype));
    if (sl->buf >= 0) return zl_error(ZL_ESTATE, "%s: %s of slot %d, which a buffer holds", s->what, op, slot);
    if (!write && sl->lost) return lost_error(s, slot);
    if (!write && !sl->written) {
        memset(zl_tensor_data(t), 0, (size_t)sl->elems * s->esize);
        return ZL_OK;
    }
    double t0 = now();
    zl_aio_request *r = write ? zl_aio_write(s->aio, s->path, t, sl->offset) : zl_aio_read(s->aio, s->path, t, sl->offset);
    st = r ? zl_aio_wait(r) : zli_last_code();
    s->st.wait_seconds += now() - t0;
    if (st) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", zl_last_error());
        if (write) sl->lost = true;
        return zl_error(st, "%s: %s slot %d: %s", s->what, write ? "writing" : "reading", slot, msg);
    }
    if (write) {
        sl->written = true;
        sl->lost = false;
        s->st.bytes_written += sl->elems * (int64_t)s->esize;
    } else {
        s->st.bytes_read += sl->elems * (int64_t)s->esize;
    }
    return ZL_OK;
}

zl_status zli_swap_read(zli_swap *s, int slot, zl_tensor *dst) { return direct(s, slot, dst, false); }
zl_status zli_swap_write(zli_swap *s, int slot, zl_tensor *src) { return direct(s, slot, src, true); }

zli_swap_stats zli_swap_stats_of(const zli_swap *s)
{
    return s ? s->st : (zli_swap_stats){0};
}

static zl_status check_config(const zli_swap_config *c, const char *what)
{
    if (!c->path || !*c->path) return zl_error(ZL_EINVAL, "%s: the swap file's path is empty", what);
    if ((unsigned)c->dtype >= ZL_DTYPE_COUNT)
        return zl_error(ZL_EINVAL, "%s: swap dtype %d is not a dtype", what, (int)c->dtype);
    if ((unsigned)c->cat >= ZL_MEM_COUNT)
        return zl_error(ZL_EINVAL, "%s: swap memory category %d is not a category", what, (int)c->cat);
    if (c->buffer_elems < 1 || c->buffer_elems > ((int64_t)1 << 50) / (int64_t)zl_dtype_size(c->dtype))
        return zl_error(ZL_EINVAL, "%s: swap buffers of %lld elements: must be between 1 and 2^50 bytes", what,
                        (long long)c->buffer_elems);
    if (c->buffer_count < 1)
        return zl_error(ZL_EINVAL, "%s.buffer_count must be at least 1, got %d", what, c->buffer_count);
    return ZL_OK;
}

zl_status zli_swap_open(zl_aio *aio, const zli_swap_config *cfg, zli_swap **out)
{
    if (!out) return zl_error(ZL_EINVAL, "swap open: the output pointer is NULL");
    *out = NULL;
    if (!aio || !cfg) return zl_error(ZL_EINVAL, "swap open: the %s is NULL", aio ? "config" : "aio engine");
    const char *what = cfg->what && *cfg->what ? cfg->what : "swap";
    if (check_config(cfg, what)) return ZL_EINVAL;
    int fd = open(cfg->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return zl_error(ZL_EIO, "%s: cannot create the swap file %s: %s", what, cfg->path, strerror(errno));
    close(fd);
    zli_swap *s = calloc(1, sizeof *s);
    if (s) {
        s->path = strdup(cfg->path);
        s->what = strdup(what);
        s->bufs = calloc((size_t)cfg->buffer_count, sizeof *s->bufs);
    }
    if (!s || !s->path || !s->what || !s->bufs) {
        unlink(cfg->path);
        if (s) { free(s->path); free(s->what); free(s->bufs); }
        free(s);
        return zl_error(ZL_ENOMEM, "%s: out of memory for a swapper", what);
    }
    s->aio = aio;
    s->dtype = cfg->dtype;
    s->esize = zl_dtype_size(cfg->dtype);
    s->buffer_elems = cfg->buffer_elems;
    s->mem_elems = round_up(cfg->buffer_elems * (int64_t)s->esize, SWAP_ALIGN) / (int64_t)s->esize;
    s->cat = cfg->cat;
    s->write_back = cfg->write_back;
    s->nbuf = cfg->buffer_count;
    for (int i = 0; i < s->nbuf; i++) s->bufs[i].slot = -1;
    *out = s;
    return ZL_OK;
}

void zli_swap_close(zli_swap *s)
{
    if (!s) return;
    for (int i = 0; i < s->nbuf; i++) {
        swap_buffer *b = &s->bufs[i];
        quiet_wait(b);
        zl_tensor_release(b->view);
        zl_tensor_release(b->mem);
    }
    unlink(s->path);
    free(s->bufs);
    free(s->slots);
    free(s->path);
    free(s->what);
    free(s);
}
