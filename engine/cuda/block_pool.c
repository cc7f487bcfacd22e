/* The caching allocator's bookkeeping (block_pool.h): segments split into
 * blocks that know their neighbours, so a freed block merges with free ones
 * beside it; free blocks in two lists (small and large requests) ordered by
 * stream and size, so the first fit is the best; blocks in use found by
 * address in a hash table; a block used on other streams waits, when given
 * back, for events on them before it joins the free list. */
#include <stdlib.h>
#include <string.h>
#include "block_pool.h"

typedef struct pblock {
    char *ptr;
    size_t size;
    void *stream;
    bool in_use, small;
    size_t segment;                 /* the segment's size, on its first block */
    struct pblock *prev, *next;     /* neighbours in the segment, by address */
    struct pblock *fprev, *fnext;   /* the free list, or the pending list */
    void **uses;                    /* other streams the block was used on */
    int nuses, cap_uses;
    void **events;                  /* pending: one per use */
    int nevents;
} pblock;

struct zli_pool {
    zli_pool_backend be;
    pblock *free_small, *free_large, *pending;
    pblock **map;                   /* blocks in use, by pointer; open addressing */
    size_t map_cap, map_n;
    zli_pool_stats st;
};

static pblock *const TOMB = (pblock *)1;

static size_t hash_ptr(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 9) * 0x9E3779B97F4A7C15u) & (cap - 1); }

static bool map_grow(zli_pool *p)
{
    size_t cap = p->map_cap ? p->map_cap * 2 : 256;
    pblock **m = calloc(cap, sizeof *m);
    if (!m) return false;
    for (size_t i = 0; i < p->map_cap; i++) {
        pblock *b = p->map[i];
        if (!b || b == TOMB) continue;
        size_t h = hash_ptr(b->ptr, cap);
        while (m[h]) h = (h + 1) & (cap - 1);
        m[h] = b;
    }
    free(p->map);
    p->map = m;
    p->map_cap = cap;
    return true;
}

static bool map_put(zli_pool *p, pblock *b)
{
    if ((p->map_n + 1) * 2 > p->map_cap && !map_grow(p)) return false;
    size_t h = hash_ptr(b->ptr, p->map_cap);
    while (p->map[h] && p->map[h] != TOMB) h = (h + 1) & (p->map_cap - 1);
    p->map[h] = b;
    p->map_n++;
    return true;
}

/* The block in use at exactly ptr, taken out of the table when `take`. */
static pblock *map_find(zli_pool *p, const void *ptr, bool take)
{
    if (!p->map_cap) return NULL;
    for (size_t h = hash_ptr(ptr, p->map_cap), n = 0; p->map[h] && n < p->map_cap; h = (h + 1) & (p->map_cap - 1), n++) {
        pblock *b = p->map[h];
        if (b != TOMB && b->ptr == ptr) {
            if (take) {
                p->map[h] = TOMB;
                p->map_n--;
            }
            return b;
        }
    }
    return NULL;
}

static pblock **list_of(zli_pool *p, const pblock *b) { return b->small ? &p->free_small : &p->free_large; }

/* Ordered by stream, then size, then address. */
static bool before(const pblock *a, const pblock *b)
{
    if (a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream;
    if (a->size != b->size) return a->size < b->size;
    return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
}

static void unlink_free(pblock **head, pblock *b)
{
    if (b->fprev) b->fprev->fnext = b->fnext;
    else *head = b->fnext;
    if (b->fnext) b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

static void insert_free(zli_pool *p, pblock *b)
{
    pblock **head = list_of(p, b), *prev = NULL, *at = *head;
    while (at && before(at, b)) {
        prev = at;
        at = at->fnext;
    }
    b->fprev = prev;
    b->fnext = at;
    if (prev) prev->fnext = b;
    else *head = b;
    if (at) at->fprev = b;
}

static void drop_block(pblock *b)
{
    free(b->uses);
    free(b->events);
    free(b);
}

static bool is_free(const pblock *b) { return b && !b->in_use && !b->events; }

/* a takes in b, its next neighbour (in no list by now), which is dropped. */
static pblock *merge(pblock *a, pblock *b)
{
    a->size += b->size;
    a->next = b->next;
    if (b->next) b->next->prev = a;
    drop_block(b);
    return a;
}

/* b (not in use, in no list) joins its free neighbours and the free list. */
static void release_block(zli_pool *p, pblock *b)
{
    b->in_use = false;
    b->nuses = 0;
    pblock **head = list_of(p, b);
    if (is_free(b->next)) {
        unlink_free(head, b->next);
        merge(b, b->next);
    }
    if (is_free(b->prev)) {
        unlink_free(head, b->prev);
        b = merge(b->prev, b);
    }
    insert_free(p, b);
}

/* Pending blocks whose every event has passed become free. */
static void collect_pending(zli_pool *p)
{
    pblock *b = p->pending;
    while (b) {
        pblock *next = b->fnext;
        bool all = true;
        for (int i = 0; i < b->nevents && all; i++) all = p->be.done(b->events[i], p->be.user);
        if (all) {
            for (int i = 0; i < b->nevents; i++) p->be.drop(b->events[i], p->be.user);
            free(b->events);
            b->events = NULL;
            b->nevents = 0;
            unlink_free(&p->pending, b);
            p->st.pending -= (int64_t)b->size;
            release_block(p, b);
        }
        b = next;
    }
}

zli_pool *zli_pool_new(const zli_pool_backend *backend)
{
    zli_pool *p = calloc(1, sizeof *p);
    if (p) p->be = *backend;
    return p;
}

void zli_pool_delete(zli_pool *p)
{
    if (!p) return;
    /* Each block is in one place (a free list, the pending list or the
     * table); the first block of each segment, which carries its size, is
     * gathered into one list through fnext. */
    pblock *firsts = NULL;
    pblock *lists[3] = {p->free_small, p->free_large, p->pending};
    for (int l = 0; l < 3; l++)
        for (pblock *b = lists[l], *next; b; b = next) {
            next = b->fnext;
            if (!b->prev) {
                b->fnext = firsts;
                firsts = b;
            }
        }
    for (size_t i = 0; i < p->map_cap; i++) {
        pblock *b = p->map[i];
        if (b && b != TOMB && !b->prev) {
            b->fnext = firsts;
            firsts = b;
        }
    }
    for (pblock *b = firsts; b; b = b->fnext) p->be.free(b->ptr, b->segment, p->be.user);
    /* Then the block records: walk each segment by its neighbours. */
    for (pblock *b = firsts, *nf; b; b = nf) {
        nf = b->fnext;
        for (pblock *c = b, *n; c; c = n) {
            n = c->next;
            for (int i = 0; i < c->nevents; i++) p->be.drop(c->events[i], p->be.user);
            drop_block(c);
        }
    }
    free(p->map);
    free(p);
}

static size_t segment_for(size_t n)
{
    if (n <= ZLI_POOL_SMALL) return ZLI_POOL_SMALL_SEGMENT;
    if (n < ZLI_POOL_MID) return ZLI_POOL_MID_SEGMENT;
    return (n + ZLI_POOL_SMALL_SEGMENT - 1) / ZLI_POOL_SMALL_SEGMENT * ZLI_POOL_SMALL_SEGMENT;
}

/* The first free block of `stream` of at least n bytes (the smallest such). */
static pblock *best_fit(pblock *head, void *stream, size_t n)
{
    for (pblock *b = head; b; b = b->fnext)
        if (b->stream == stream && b->size >= n) return b;
    return NULL;
}

void *zli_pool_take(zli_pool *p, size_t n, void *stream, size_t *size)
{
    if (n == 0) n = 1;
    if (n > SIZE_MAX - ZLI_POOL_SMALL_SEGMENT) return NULL;
    n = (n + ZLI_POOL_ROUND - 1) / ZLI_POOL_ROUND * ZLI_POOL_ROUND;
    bool small = n <= ZLI_POOL_SMALL;
    if (p->pending) collect_pending(p);
    pblock **head = small ? &p->free_small : &p->free_large;
    pblock *b = best_fit(*head, stream, n);
    if (b) {
        unlink_free(head, b);
    } else {
        size_t seg = segment_for(n);
        void *mem = p->be.alloc(seg, p->be.user);
        if (!mem) {
            zli_pool_release(p);
            mem = p->be.alloc(seg, p->be.user);
        }
        if (!mem) return NULL;
        b = calloc(1, sizeof *b);
        if (!b) {
            p->be.free(mem, seg, p->be.user);
            return NULL;
        }
        b->ptr = mem;
        b->size = b->segment = seg;
        b->stream = stream;
        b->small = small;
        p->st.reserved += (int64_t)seg;
        p->st.segments++;
    }
    /* Split off what the request leaves when it is worth a block of its own. */
    size_t rest = b->size - n;
    if (small ? rest >= ZLI_POOL_ROUND : rest > ZLI_POOL_SMALL) {
        pblock *r = calloc(1, sizeof *r);
        if (r) {
            r->ptr = b->ptr + n;
            r->size = rest;
            r->stream = stream;
            r->small = small;
            r->prev = b;
            r->next = b->next;
            if (b->next) b->next->prev = r;
            b->next = r;
            b->size = n;
            insert_free(p, r);
        }
    }
    b->in_use = true;
    if (!map_put(p, b)) {
        release_block(p, b);
        return NULL;
    }
    p->st.in_use += (int64_t)b->size;
    *size = b->size;
    return b->ptr;
}

bool zli_pool_record_stream(zli_pool *p, const void *at, void *stream)
{
    pblock *b = map_find(p, at, false);
    for (size_t i = 0; !b && i < p->map_cap; i++) {
        pblock *c = p->map[i];
        if (c && c != TOMB && (const char *)at >= c->ptr && (const char *)at < c->ptr + c->size) b = c;
    }
    if (!b) return false;
    if (stream == b->stream) return true;
    for (int i = 0; i < b->nuses; i++)
        if (b->uses[i] == stream) return true;
    if (b->nuses == b->cap_uses) {
        int cap = b->cap_uses ? 2 * b->cap_uses : 2;
        void **u = realloc(b->uses, (size_t)cap * sizeof *u);
        if (!u) return false;
        b->uses = u;
        b->cap_uses = cap;
    }
    b->uses[b->nuses++] = stream;
    return true;
}

bool zli_pool_give(zli_pool *p, void *ptr)
{
    pblock *b = map_find(p, ptr, true);
    if (!b) return false;
    p->st.in_use -= (int64_t)b->size;
    if (b->nuses > 0) {
        void **ev = malloc((size_t)b->nuses * sizeof *ev);
        int k = 0;
        for (int i = 0; i < b->nuses; i++) {
            /* Without room to note the events, wait for the streams at once. */
            void *e = p->be.record(b->uses[i], p->be.user);
            if (e && ev) ev[k++] = e;
            else if (e) {
                while (!p->be.done(e, p->be.user)) {}
                p->be.drop(e, p->be.user);
            }
        }
        b->nuses = 0;
        if (k > 0) {
            b->in_use = false;
            b->events = ev;
            b->nevents = k;
            b->fprev = NULL;
            b->fnext = p->pending;
            if (p->pending) p->pending->fprev = b;
            p->pending = b;
            p->st.pending += (int64_t)b->size;
            return true;
        }
        free(ev);
    }
    release_block(p, b);
    return true;
}

int64_t zli_pool_release(zli_pool *p)
{
    if (p->pending) collect_pending(p);
    int64_t before = p->st.reserved;
    pblock **heads[2] = {&p->free_small, &p->free_large};
    for (int l = 0; l < 2; l++)
        for (pblock *b = *heads[l], *next; b; b = next) {
            next = b->fnext;
            if (b->prev || b->next) continue;
            unlink_free(heads[l], b);
            p->be.free(b->ptr, b->segment, p->be.user);
            p->st.reserved -= (int64_t)b->segment;
            p->st.segments--;
            drop_block(b);
        }
    return before - p->st.reserved;
}

zli_pool_stats zli_pool_stats_of(const zli_pool *p) { return p->st; }
