/* The CUDA caching allocator's bookkeeping (engine/cuda/block_pool.c) over a
 * stand-in backend: host memory for segments, with a byte budget to run out
 * of, and streams as counters of queued and finished work, so an event has
 * passed when its stream's finished count reaches the count at its making. */
#include <stdlib.h>
#include "harness.h"
#include "cuda/block_pool.h"

typedef struct fake_stream {
    int queued, finished;
} fake_stream;

typedef struct fake_event {
    fake_stream *s;
    int at;
} fake_event;

typedef struct fake_backend {
    size_t budget, used;
    int allocs, frees, events_live;
} fake_backend;

static void *fb_alloc(size_t n, void *user)
{
    fake_backend *f = user;
    if (f->used + n > f->budget) return NULL;
    void *p = malloc(n);
    if (p) {
        f->used += n;
        f->allocs++;
    }
    return p;
}

static void fb_free(void *p, size_t n, void *user)
{
    fake_backend *f = user;
    f->used -= n;
    f->frees++;
    free(p);
}

static void *fb_record(void *stream, void *user)
{
    fake_backend *f = user;
    fake_event *e = malloc(sizeof *e);
    e->s = stream;
    e->at = e->s->queued;
    f->events_live++;
    return e;
}

static bool fb_done(void *event, void *user)
{
    (void)user;
    fake_event *e = event;
    return e->s->finished >= e->at;
}

static void fb_drop(void *event, void *user)
{
    fake_backend *f = user;
    f->events_live--;
    free(event);
}

static zli_pool *pool_over(fake_backend *f, size_t budget)
{
    *f = (fake_backend){.budget = budget};
    zli_pool_backend b = {fb_alloc, fb_free, fb_record, fb_done, fb_drop, f};
    return zli_pool_new(&b);
}

#define MiB ((size_t)1 << 20)

TEST(small_blocks_share_a_segment_and_come_back)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 64 * MiB);
    fake_stream s = {0};
    size_t sa, sb;
    char *a = zli_pool_take(p, 1000, &s, &sa), *b = zli_pool_take(p, 3000, &s, &sb);
    CHECK(a && b && sa == 1024 && sb == 3072);
    CHECK(f.allocs == 1 && zli_pool_stats_of(p).reserved == (int64_t)ZLI_POOL_SMALL_SEGMENT);
    CHECK(b == a + 1024);   /* split from the same segment, in address order */
    CHECK(zli_pool_stats_of(p).in_use == 4096);
    CHECK(zli_pool_give(p, a));
    size_t sc;
    char *c = zli_pool_take(p, 900, &s, &sc);
    CHECK(c == a && sc == 1024 && f.allocs == 1);
    CHECK(!zli_pool_give(p, a + 512));   /* not a pointer it gave out */
    CHECK(zli_pool_give(p, c) && zli_pool_give(p, b));
    CHECK(zli_pool_stats_of(p).in_use == 0);
    CHECK(zli_pool_release(p) == (int64_t)ZLI_POOL_SMALL_SEGMENT && f.frees == 1 && f.used == 0);
    zli_pool_delete(p);
}

/* Freed neighbours merge: three blocks of one segment given back in any
 * order leave one free block the size of the segment. */
TEST(freed_neighbours_merge)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 64 * MiB);
    fake_stream s = {0};
    size_t n;
    char *a = zli_pool_take(p, 4096, &s, &n), *b = zli_pool_take(p, 4096, &s, &n), *c = zli_pool_take(p, 4096, &s, &n);
    CHECK(b == a + 4096 && c == b + 4096);
    CHECK(zli_pool_give(p, b) && zli_pool_give(p, a));
    char *ab = zli_pool_take(p, 8192, &s, &n);
    CHECK(ab == a && n == 8192 && f.allocs == 1);   /* a and b merged */
    CHECK(zli_pool_give(p, c) && zli_pool_give(p, ab));
    char *whole = zli_pool_take(p, ZLI_POOL_SMALL, &s, &n);
    CHECK(whole == a && f.allocs == 1);
    CHECK(zli_pool_give(p, whole));
    CHECK(zli_pool_release(p) == (int64_t)ZLI_POOL_SMALL_SEGMENT);
    zli_pool_delete(p);
}

/* A large request has a segment of its own (20 MiB below 10 MiB); a later
 * smaller one splits the cached block, and a block in use keeps its segment
 * from going back. */
TEST(large_blocks_split_and_release_whole_segments)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 256 * MiB);
    fake_stream s = {0};
    size_t n;
    char *a = zli_pool_take(p, 3 * MiB, &s, &n);
    CHECK(a && n == 3 * MiB && zli_pool_stats_of(p).reserved == (int64_t)ZLI_POOL_MID_SEGMENT);
    char *b = zli_pool_take(p, 5 * MiB, &s, &n);
    CHECK(b == a + 3 * MiB && f.allocs == 1);   /* from the rest of the same segment */
    char *big = zli_pool_take(p, 40 * MiB + 1, &s, &n);
    CHECK(big && n == 40 * MiB + 512 && f.allocs == 2 && zli_pool_stats_of(p).reserved == (int64_t)(60 * MiB + 2 * MiB));
    CHECK(zli_pool_give(p, a));
    CHECK(zli_pool_release(p) == 0);   /* b is still in use in that segment */
    CHECK(zli_pool_give(p, big));
    CHECK(zli_pool_release(p) == (int64_t)(42 * MiB) && f.allocs - f.frees == 1);
    CHECK(zli_pool_give(p, b));
    CHECK(zli_pool_release(p) == (int64_t)ZLI_POOL_MID_SEGMENT && f.used == 0);
    zli_pool_delete(p);
}

/* Blocks are cached for the stream that took them: another stream's request
 * does not get them. */
TEST(blocks_stay_with_their_stream)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 64 * MiB);
    fake_stream s1 = {0}, s2 = {0};
    size_t n;
    char *a = zli_pool_take(p, 4096, &s1, &n);
    CHECK(zli_pool_give(p, a));
    char *b = zli_pool_take(p, 4096, &s2, &n);
    CHECK(b && (b < a || b >= a + ZLI_POOL_SMALL_SEGMENT) && f.allocs == 2);
    CHECK(zli_pool_take(p, 4096, &s1, &n) == a);
    zli_pool_delete(p);
    CHECK(f.used == 0 && f.frees == f.allocs);
}

/* A block used on a second stream (recorded by an address inside it) waits,
 * once given back, for that stream's work queued until then; the work queued
 * after does not hold it. */
TEST(a_block_used_on_another_stream_waits_for_it)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 64 * MiB);
    fake_stream comp = {0}, copy = {0};
    size_t n;
    char *a = zli_pool_take(p, 8192, &comp, &n);
    CHECK(zli_pool_record_stream(p, a + 100, &copy));
    CHECK(!zli_pool_record_stream(p, (char *)&n, &copy));   /* no block holds it */
    copy.queued = 3;   /* the copy stream has work queued on the block */
    CHECK(zli_pool_give(p, a));
    CHECK(zli_pool_stats_of(p).pending == 8192 && f.events_live == 1);
    copy.queued = 7;   /* later work: not the block's */
    char *b = zli_pool_take(p, 8192, &comp, &n);
    CHECK(b != a);
    CHECK(zli_pool_give(p, b));
    copy.finished = 3;
    char *c = zli_pool_take(p, 16384, &comp, &n);
    CHECK(c == a && zli_pool_stats_of(p).pending == 0 && f.events_live == 0);   /* a and b merged again */
    CHECK(zli_pool_give(p, c));
    /* Used on its own stream only: back at once. */
    char *d = zli_pool_take(p, 512, &comp, &n);
    CHECK(zli_pool_record_stream(p, d, &comp) && zli_pool_give(p, d) && zli_pool_stats_of(p).pending == 0);
    zli_pool_delete(p);
    CHECK(f.used == 0 && f.events_live == 0);
}

/* The backend out of memory: the pool gives back its cached whole segments
 * and asks again, and says NULL only when that is not enough. */
TEST(out_of_memory_gives_the_cache_back_first)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 40 * MiB);
    fake_stream s = {0};
    size_t n;
    char *a = zli_pool_take(p, 12 * MiB, &s, &n), *b = zli_pool_take(p, 16 * MiB, &s, &n);
    CHECK(a && b && f.used == 28 * MiB);
    CHECK(zli_pool_give(p, b));   /* cached: a whole 16 MiB segment, too small for what follows */
    char *c = zli_pool_take(p, 20 * MiB, &s, &n);
    CHECK(c && f.frees == 1 && f.used == 32 * MiB);
    CHECK(zli_pool_take(p, 30 * MiB, &s, &n) == NULL);
    CHECK(zli_pool_give(p, a) && zli_pool_give(p, c));
    CHECK(zli_pool_take(p, 30 * MiB, &s, &n) != NULL);
    zli_pool_delete(p);
    CHECK(f.used == 0);
}

/* Deleting the pool gives back every segment, with blocks in use, cached
 * or pending. */
TEST(delete_gives_every_segment_back)
{
    fake_backend f;
    zli_pool *p = pool_over(&f, 256 * MiB);
    fake_stream s = {0}, t = {0};
    size_t n;
    void *keep[6];
    for (int i = 0; i < 6; i++) keep[i] = zli_pool_take(p, (size_t)(i + 1) * 700 * 1024, &s, &n);
    CHECK(zli_pool_give(p, keep[1]) && zli_pool_give(p, keep[4]));
    CHECK(zli_pool_record_stream(p, keep[5], &t));
    t.queued = 1;
    CHECK(zli_pool_give(p, keep[5]));
    zli_pool_delete(p);
    CHECK(f.used == 0 && f.frees == f.allocs && f.events_live == 0);
}

