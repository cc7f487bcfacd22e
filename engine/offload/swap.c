/* The one swapper (swap.h): slots of one file cached in a few aligned
 * buffers. A buffer serves one slot at a time; it is read into on acquire or
 * ahead of it (prefetch), written back from on a dirty release, and keeps the
 * slot until another slot needs it, chosen least recently used among those
 * with nothing pinned or being read. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "swap.h"

#define SWAP_BLOCK 4096
#define SWAP_MARKER ".zlua_swap"

enum { IO_NONE = 0, IO_READ = 1, IO_WRITE = 2 };

typedef struct swap_slot {
    int64_t off, elems;
    int buf;                   /* the buffer holding it, or -1 */
} swap_slot;

typedef struct swap_buf {
    zl_tensor *t;              /* allocated on first use */
    int slot;                  /* -1: free */
    int pins;
    int io;
    zl_aio_request *req;
    uint64_t used;             /* the tick of its last release, for LRU */
} swap_buf;

struct zli_swap {
    zl_aio *aio;
    char *path, *what;
    zl_dtype dt;
    size_t es;
    int64_t belems;
    zl_mem_category cat;
    swap_buf *bufs;
    int nbuf;
    swap_slot *slots;
    int nslots, cap;
    int64_t next_off;
    uint64_t tick;
    zli_swap_figures fig;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zl_status zli_swap_open(zl_aio *aio, const zli_swap_config *cfg, zli_swap **out)
{
    const char *what = cfg && cfg->what ? cfg->what : "swap";
    if (!aio || !cfg || !cfg->path || !out) return zl_error(ZL_EINVAL, "%s: swap file without engine or path", what);
    if (cfg->buffer_count < 0 || cfg->buffer_elems < 0 || (cfg->buffer_count > 0) != (cfg->buffer_elems > 0))
        return zl_error(ZL_EINVAL, "%s: %d swap buffers of %lld elements", what, cfg->buffer_count,
                        (long long)cfg->buffer_elems);
    zli_swap *s = calloc(1, sizeof *s);
    if (!s) return zl_error(ZL_ENOMEM, "%s: out of memory", what);
    s->aio = aio;
    s->path = strdup(cfg->path);
    s->what = strdup(what);
    s->dt = cfg->dtype;
    s->es = zl_dtype_size(cfg->dtype);
    s->belems = cfg->buffer_elems;
    s->cat = cfg->cat;
    s->nbuf = cfg->buffer_count;
    s->bufs = calloc((size_t)(s->nbuf > 0 ? s->nbuf : 1), sizeof *s->bufs);
    if (!s->path || !s->what || !s->bufs) {
        zli_swap_close(s);
        return zl_error(ZL_ENOMEM, "%s: out of memory", what);
    }
    for (int i = 0; i < s->nbuf; i++) s->bufs[i].slot = -1;
    /* A file left by an earlier run would be read as if it held this run's slots. */
    if (unlink(s->path) != 0 && errno != ENOENT) {
        zl_status st = zl_error(ZL_EIO, "%s: cannot replace %s: %s", what, s->path, strerror(errno));
        zli_swap_close(s);
        return st;
    }
    *out = s;
    return ZL_OK;
}

/* Wait for a buffer's I/O; a failed read leaves it serving no slot. */
static zl_status settle(zli_swap *s, swap_buf *b)
{
    if (!b->req) return ZL_OK;
    double t0 = now();
    zl_status st = zl_aio_wait(b->req);
    s->fig.io_seconds += now() - t0;
    b->req = NULL;
    if (st && b->io == IO_READ && b->slot >= 0) {
        s->slots[b->slot].buf = -1;
        b->slot = -1;
    }
    b->io = IO_NONE;
    return st;
}

zl_status zli_swap_flush(zli_swap *s)
{
    zl_status first = ZL_OK;
    char msg[1024] = "";
    for (int i = 0; s && i < s->nbuf; i++) {
        zl_status st = settle(s, &s->bufs[i]);
        if (st && !first) {
            first = st;
            snprintf(msg, sizeof msg, "%s", zl_last_error());
        }
    }
    return first ? zl_error(first, "%s", msg) : ZL_OK;
}

void zli_swap_close(zli_swap *s)
{
    if (!s) return;
    zli_swap_flush(s);
    for (int i = 0; i < s->nbuf; i++) zl_tensor_release(s->bufs[i].t);
    if (s->path) unlink(s->path);
    free(s->bufs);
    free(s->slots);
    free(s->path);
    free(s->what);
    free(s);
}

int zli_swap_add_slot(zli_swap *s, int64_t elems)
{
    if (elems < 0 || (s->nbuf > 0 && elems > s->belems)) {
        zl_error(ZL_EINVAL, "%s: a slot of %lld elements does not fit buffers of %lld", s->what, (long long)elems,
                 (long long)s->belems);
        return -1;
    }
    if (s->nslots == s->cap) {
        int nc = s->cap ? 2 * s->cap : 64;
        swap_slot *ns = realloc(s->slots, (size_t)nc * sizeof *ns);
        if (!ns) {
            zl_error(ZL_ENOMEM, "%s: out of memory adding a slot", s->what);
            return -1;
        }
        s->slots = ns;
        s->cap = nc;
    }
    int64_t bytes = (elems * (int64_t)s->es + SWAP_BLOCK - 1) / SWAP_BLOCK * SWAP_BLOCK;
    s->slots[s->nslots] = (swap_slot){.off = s->next_off, .elems = elems, .buf = -1};
    s->next_off += bytes;
    s->fig.file_bytes = s->next_off;
    return s->nslots++;
}

static zl_status check_slot(const zli_swap *s, int slot)
{
    if (slot < 0 || slot >= s->nslots)
        return zl_error(ZL_EINVAL, "%s: slot %d is outside 0..%d", s->what, slot, s->nslots - 1);
    return ZL_OK;
}

/* A buffer for another slot: a free one, else the least recently used idle
 * one; with wait, else the least recently used one whose write is in flight,
 * else one being read ahead (a slot needed now goes before one read on
 * speculation). */
static int pick(zli_swap *s, bool wait)
{
    int best = -1;
    for (int i = 0; i < s->nbuf; i++) {
        swap_buf *b = &s->bufs[i];
        if (b->slot < 0 && b->io == IO_NONE) return i;
        if (b->pins == 0 && b->io == IO_NONE && (best < 0 || b->used < s->bufs[best].used)) best = i;
    }
    for (int io = IO_WRITE; wait && best < 0 && io >= IO_READ; io--)
        for (int i = 0; i < s->nbuf; i++) {
            swap_buf *b = &s->bufs[i];
            if (b->pins == 0 && b->io == io && (best < 0 || b->used < s->bufs[best].used)) best = i;
        }
    return best;
}

/* Give buffer i to slot (evicting what it held, waiting for its write). */
static zl_status attach(zli_swap *s, int i, int slot)
{
    swap_buf *b = &s->bufs[i];
    zl_status st = settle(s, b);
    if (b->slot >= 0) s->slots[b->slot].buf = -1;
    b->slot = -1;
    if (st) return st;
    if (!b->t) {
        if (!(b->t = zl_aio_buffer(s->dt, s->belems, s->cat)))
            return zl_error(ZL_ENOMEM, "%s: out of memory for a swap buffer of %lld elements", s->what,
                            (long long)s->belems);
        s->fig.buffer_bytes += (s->belems * (int64_t)s->es + SWAP_BLOCK - 1) / SWAP_BLOCK * SWAP_BLOCK;
    }
    b->slot = slot;
    s->slots[slot].buf = i;
    return ZL_OK;
}

/* Start moving slot's elements between its buffer and the file. */
static zl_status start(zli_swap *s, int slot, bool write)
{
    swap_slot *sl = &s->slots[slot];
    swap_buf *b = &s->bufs[sl->buf];
    zl_tensor *view = zl_tensor_narrow(b->t, 0, 0, sl->elems);
    if (!view) return ZL_ENOMEM;
    b->req = write ? zl_aio_write(s->aio, s->path, view, sl->off) : zl_aio_read(s->aio, s->path, view, sl->off);
    zl_tensor_release(view);
    if (!b->req) return zl_error(ZL_EIO, "%s: %s", s->what, zl_last_error());
    b->io = write ? IO_WRITE : IO_READ;
    if (write) s->fig.write_bytes += sl->elems * (int64_t)s->es;
    else s->fig.read_bytes += sl->elems * (int64_t)s->es;
    return ZL_OK;
}

bool zli_swap_prefetch(zli_swap *s, int slot)
{
    if (check_slot(s, slot)) return false;
    if (s->slots[slot].buf >= 0) return true;
    int i = pick(s, false);
    if (i < 0 || attach(s, i, slot)) return false;
    if (start(s, slot, false)) {
        s->slots[slot].buf = -1;
        s->bufs[i].slot = -1;
        return false;
    }
    return true;
}

static zl_status acquire(zli_swap *s, int slot, bool fresh, zl_tensor **buf)
{
    zl_status st = check_slot(s, slot);
    if (st) return st;
    if (s->nbuf == 0) return zl_error(ZL_ESTATE, "%s: this swap file has no buffers", s->what);
    int i = s->slots[slot].buf;
    if (i >= 0) {
        if ((st = settle(s, &s->bufs[i]))) return st;
        i = s->slots[slot].buf;   /* a failed read gave the buffer up */
    }
    if (i < 0) {
        i = pick(s, true);
        if (i < 0) {
            int pinned = 0;
            for (int j = 0; j < s->nbuf; j++) pinned += s->bufs[j].pins > 0;
            return zl_error(ZL_ESTATE, "%s: ran out of swap buffers (%d of %d in use) reading slot %d; increase "
                            "%s.buffer_count", s->what, pinned, s->nbuf, slot, s->what);
        }
        if ((st = attach(s, i, slot))) return st;
        if (!fresh && ((st = start(s, slot, false)) || (st = settle(s, &s->bufs[i])))) {
            if (s->slots[slot].buf >= 0) {
                s->slots[slot].buf = -1;
                s->bufs[i].slot = -1;
            }
            return st;
        }
    }
    s->bufs[i].pins++;
    *buf = s->bufs[i].t;
    return ZL_OK;
}

zl_status zli_swap_acquire(zli_swap *s, int slot, zl_tensor **buf) { return acquire(s, slot, false, buf); }
zl_status zli_swap_acquire_new(zli_swap *s, int slot, zl_tensor **buf) { return acquire(s, slot, true, buf); }

zl_status zli_swap_release(zli_swap *s, int slot, bool dirty)
{
    zl_status st = check_slot(s, slot);
    if (st) return st;
    int i = s->slots[slot].buf;
    if (i < 0 || s->bufs[i].pins == 0) return zl_error(ZL_ESTATE, "%s: slot %d released but not acquired", s->what, slot);
    swap_buf *b = &s->bufs[i];
    b->pins--;
    b->used = ++s->tick;
    if (!dirty) return ZL_OK;
    /* A write already in flight carries older bytes: it must land first. */
    if ((st = settle(s, b))) return st;
    return start(s, slot, true);
}

static zl_status direct(zli_swap *s, int slot, zl_tensor *t, bool write)
{
    zl_status st = check_slot(s, slot);
    if (st) return st;
    swap_slot *sl = &s->slots[slot];
    if (zl_tensor_numel(t) != sl->elems || zl_tensor_dtype(t) != s->dt)
        return zl_error(ZL_EINVAL, "%s: slot %d holds %lld %s elements, the tensor %lld %s", s->what, slot,
                        (long long)sl->elems, zl_dtype_name(s->dt), (long long)zl_tensor_numel(t),
                        zl_dtype_name(zl_tensor_dtype(t)));
    double t0 = now();
    zl_aio_request *r = write ? zl_aio_write(s->aio, s->path, t, sl->off) : zl_aio_read(s->aio, s->path, t, sl->off);
    st = r ? zl_aio_wait(r) : ZL_EIO;
    s->fig.io_seconds += now() - t0;
    if (!st) {
        if (write) s->fig.write_bytes += sl->elems * (int64_t)s->es;
        else s->fig.read_bytes += sl->elems * (int64_t)s->es;
    }
    return st;
}

zl_status zli_swap_read(zli_swap *s, int slot, zl_tensor *dst) { return direct(s, slot, dst, false); }
zl_status zli_swap_write(zli_swap *s, int slot, zl_tensor *src) { return direct(s, slot, src, true); }

void zli_swap_figures_of(const zli_swap *s, zli_swap_figures *out)
{
    memset(out, 0, sizeof *out);
    if (s) *out = s->fig;
}

/* ---- the swap folder ---- */

/* 1 when dir holds anything but the marker, 0 when empty or only marked, -1 when unreadable. */
static int foreign_content(const char *dir, bool *marked)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int foreign = 0;
    *marked = false;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!strcmp(e->d_name, SWAP_MARKER)) *marked = true;
        else foreign = 1;
    }
    closedir(d);
    return foreign;
}

zl_status zli_swap_folder(const char *nvme_path, const char *sub, const char *what, char *out, size_t n)
{
    if (!nvme_path || !*nvme_path) return zl_error(ZL_EINVAL, "%s: nvme_path is empty", what);
    if (!sub || !*sub || sub[0] == '/' || strstr(sub, ".."))
        return zl_error(ZL_EINVAL, "%s: bad swap sub-folder '%s'", what, sub ? sub : "(null)");
    int len = snprintf(out, n, "%s/zlua_swap/%s", nvme_path, sub);
    if (len < 0 || (size_t)len >= n) return zl_error(ZL_EINVAL, "%s: nvme_path is too long: %s", what, nvme_path);
    struct stat stt;
    if (stat(out, &stt) == 0) {
        bool marked = false;
        int foreign = S_ISDIR(stt.st_mode) ? foreign_content(out, &marked) : 1;
        if (foreign != 0 && !marked)
            return zl_error(ZL_EINVAL, "%s: the swap folder %s exists and was not made by zlua (no %s in it): "
                            "refusing to empty it; point nvme_path elsewhere or remove it", what, out, SWAP_MARKER);
        if (zl_fs_remove_tree(out))
            return zl_error(ZL_EIO, "%s: cannot prepare the swap folder %s under nvme_path: %s", what, out,
                            zl_last_error());
    }
    char marker[4200];
    snprintf(marker, sizeof marker, "%s/%s", out, SWAP_MARKER);
    if (zl_fs_mkdirs(out)) {
        char why[512];
        snprintf(why, sizeof why, "%s", zl_last_error());
        return zl_error(ZL_EIO, "%s: cannot prepare the swap folder %s under nvme_path: %s", what, out, why);
    }
    FILE *f = fopen(marker, "w");
    if (!f)
        return zl_error(ZL_EIO, "%s: cannot prepare the swap folder %s under nvme_path: %s: %s", what, out, marker,
                        strerror(errno));
    fputs("made by zlua for swap files; the folder is emptied at the next run\n", f);
    fclose(f);
    return ZL_OK;
}
