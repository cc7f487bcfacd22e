/* The swapper (engine/offload/swap.c) and its folder (swap_folder.c): values
 * through few buffers, prefetch, write-behind, eviction order, every error's
 * message, the buffered path, memory accounting and the folder's marker rules. */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "../../engine/offload/swap.h"

static zl_aio *engine(int par)
{
    zl_aio_config c = zl_aio_defaults();
    c.block_size = 8192;
    c.intra_op_parallelism = par;
    zl_aio *a = NULL;
    CHECK(zl_aio_open(&c, &a) == ZL_OK && a);
    return a;
}

static zli_swap *swapper(zl_aio *a, const char *name, int64_t elems, int count, const char *what)
{
    char path[512];
    zli_swap_config c = {.path = zt_tmp_path(path, sizeof path, name), .dtype = ZL_DTYPE_F32,
                         .buffer_elems = elems, .buffer_count = count, .cat = ZL_MEM_OPTIMIZER, .what = what};
    zli_swap *s = NULL;
    CHECK(zli_swap_open(a, &c, &s) == ZL_OK && s);
    return s;
}

static float value(int slot, int64_t i, int gen) { return (float)(slot * 100003 + i * 7 + gen * 1000003); }

static void fill(zl_tensor *t, int slot, int gen)
{
    float *p = zl_tensor_data(t);
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) p[i] = value(slot, i, gen);
}

static int64_t mismatches(zl_tensor *t, int slot, int gen)
{
    const float *p = zl_tensor_data(t);
    int64_t bad = 0;
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) bad += p[i] != value(slot, i, gen);
    return bad;
}

/* Write generation gen of a slot whole. */
static void put(zli_swap *s, int slot, int gen)
{
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire_new(s, slot, &t) == ZL_OK && t);
    if (!t) return;
    fill(t, slot, gen);
    CHECK(zli_swap_release(s, slot, true) == ZL_OK);
}

/* Read a slot back and check it holds generation gen of n elements. */
static void expect(zli_swap *s, int slot, int64_t n, int gen)
{
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire(s, slot, &t) == ZL_OK && t);
    if (!t) return;
    CHECK(zl_tensor_numel(t) == n);
    CHECK(mismatches(t, slot, gen) == 0);
    CHECK(zli_swap_release(s, slot, false) == ZL_OK);
}

/* Acquire and release a slot unchanged. */
static void touch_slot(zli_swap *s, int slot)
{
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire(s, slot, &t) == ZL_OK && t);
    CHECK(zli_swap_release(s, slot, false) == ZL_OK);
}

static int64_t slot_elems(int i) { return i % 5 == 0 ? 3000 : 1 + (int64_t)i * 97 % 2999; }

/* 24 slots of odd sizes through 3 buffers: written, read in two orders,
 * changed in place, read again. */
static void many_slots(zl_aio *a, const char *name)
{
    enum { N = 24 };
    zli_swap *s = swapper(a, name, 3000, 3, "offload_optimizer");
    if (!s) return;
    int64_t bytes = 0;
    for (int i = 0; i < N; i++) {
        CHECK(zli_swap_add_slot(s, slot_elems(i)) == i);
        bytes += (slot_elems(i) * 4 + 4095) / 4096 * 4096;
    }
    CHECK(zli_swap_stats_of(s).file_bytes == bytes);
    for (int i = 0; i < N; i++) put(s, i, 0);
    for (int i = 0; i < N; i++) expect(s, i, slot_elems(i), 0);
    for (int k = 0; k < N; k++) expect(s, k * 7 % N, slot_elems(k * 7 % N), 0);
    for (int i = N - 1; i >= 0; i--) {
        zl_tensor *t = NULL;
        CHECK(zli_swap_acquire(s, i, &t) == ZL_OK && t);
        if (!t) break;
        float *p = zl_tensor_data(t);
        for (int64_t j = 0; j < zl_tensor_numel(t); j++) p[j] += 1000003;
        CHECK(zli_swap_release(s, i, true) == ZL_OK);
    }
    CHECK(zli_swap_flush(s) == ZL_OK);
    for (int i = 0; i < N; i++) expect(s, i, slot_elems(i), 1);
    zli_swap_stats st = zli_swap_stats_of(s);
    CHECK(st.bytes_read > 0 && st.bytes_written > 0);
    CHECK(st.buffer_bytes == 3 * 12288);
    zli_swap_close(s);
}

TEST(round_trip_many_slots_through_few_buffers)
{
    zl_aio *a = engine(1);
    many_slots(a, "one.swp");
    zl_aio_close(a);
    a = engine(3);
    many_slots(a, "three.swp");
    zl_aio_close(a);
    zt_tmp_reset();
}

/* Write-back (the gradient partition's swap): a slot changed many times is
 * written once, when its buffer is needed or at flush; a dropped slot is
 * never written and reads as zeros. */
TEST(write_back_writes_once_and_drop_writes_nothing)
{
    enum { N = 8, E = 1000 };
    zl_aio *a = engine(1);
    char path[512];
    zli_swap_config c = {.path = zt_tmp_path(path, sizeof path, "wb.swp"), .dtype = ZL_DTYPE_F32,
                         .buffer_elems = E, .buffer_count = 3, .cat = ZL_MEM_GRADS, .what = "offload_optimizer",
                         .write_back = true};
    zli_swap *s = NULL;
    CHECK(zli_swap_open(a, &c, &s) == ZL_OK && s);
    if (!s) return;
    for (int i = 0; i < N; i++) CHECK(zli_swap_add_slot(s, E) == i);
    /* generation 0 put, then each slot changed four more times in a row, as
     * buckets add into a sub-group's gradients */
    for (int i = 0; i < N; i++) {
        put(s, i, 0);
        for (int k = 0; k < 4; k++) {
            zl_tensor *t = NULL;
            CHECK(zli_swap_acquire(s, i, &t) == ZL_OK && t);
            if (!t) return;
            float *p = zl_tensor_data(t);
            for (int64_t j = 0; j < E; j++) p[j] += 1000003.0f / 4;
            CHECK(zli_swap_release(s, i, true) == ZL_OK);
        }
        /* the slot just filled and the one before it stay in memory, unwritten */
        CHECK(zli_swap_stats_of(s).bytes_written == (int64_t)(i >= 2 ? i - 1 : 0) * E * 4);
    }
    CHECK(zli_swap_flush(s) == ZL_OK);
    CHECK(zli_swap_stats_of(s).bytes_written == (int64_t)N * E * 4);
    for (int i = 0; i < N; i++) expect(s, i, E, 1);
    /* changed, then dropped: nothing written, zeros read back */
    int64_t before = zli_swap_stats_of(s).bytes_written;
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire(s, 5, &t) == ZL_OK && t);
    CHECK_ERR(zli_swap_drop(s, 5), "drop of slot 5, which is acquired");
    CHECK(zli_swap_release(s, 5, true) == ZL_OK);
    for (int i = 0; i < N; i++) CHECK(zli_swap_drop(s, i) == ZL_OK);
    CHECK(zli_swap_flush(s) == ZL_OK);
    CHECK(zli_swap_stats_of(s).bytes_written == before);
    CHECK(zli_swap_acquire(s, 5, &t) == ZL_OK && t);
    if (t) {
        int64_t nonzero = 0;
        for (int64_t j = 0; j < E; j++) nonzero += ((float *)zl_tensor_data(t))[j] != 0;
        CHECK(nonzero == 0);
    }
    CHECK(zli_swap_release(s, 5, false) == ZL_OK);
    zli_swap_close(s);
    /* one buffer: a changed slot read ahead again, then taken by a demand
     * read of another slot, is written first, not lost */
    c.buffer_count = 1;
    c.path = zt_tmp_path(path, sizeof path, "wb1.swp");
    CHECK(zli_swap_open(a, &c, &s) == ZL_OK && s);
    if (!s) return;
    for (int i = 0; i < 2; i++) CHECK(zli_swap_add_slot(s, E) == i);
    put(s, 0, 0);
    bool started = false;
    CHECK(zli_swap_prefetch(s, 0, false, &started) == ZL_OK && started);
    touch_slot(s, 1);
    expect(s, 0, E, 0);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(buffered_path)
{
    setenv("ZLUA_AIO_BUFFERED", "1", 1);
    zl_aio *a = engine(2);
    unsetenv("ZLUA_AIO_BUFFERED");
    if (!a) return;
    many_slots(a, "buffered.swp");
    CHECK(!zl_aio_is_direct(a));
    zl_aio_close(a);
    zt_tmp_reset();
}

/* A slot never written reads as zeros, without touching the file. */
TEST(unwritten_slot_reads_zeros)
{
    zl_aio *a = engine(1);
    zli_swap *s = swapper(a, "zeros.swp", 100, 1, "offload_param");
    CHECK(zli_swap_add_slot(s, 100) == 0);
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire(s, 0, &t) == ZL_OK && t);
    if (t) {
        const float *p = zl_tensor_data(t);
        int nonzero = 0;
        for (int i = 0; i < 100; i++) nonzero += p[i] != 0;
        CHECK(nonzero == 0);
    }
    CHECK(zli_swap_release(s, 0, false) == ZL_OK);
    CHECK(zli_swap_stats_of(s).bytes_read == 0);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* The optimizer's pattern: the next slot read while this one is updated, the
 * last one written meanwhile. */
TEST(prefetch_and_acquire_pipeline)
{
    enum { N = 9 };
    zl_aio *a = engine(2);
    zli_swap *s = swapper(a, "pipe.swp", 5000, 3, "offload_optimizer");
    for (int i = 0; i < N; i++) zli_swap_add_slot(s, 5000 - i);
    for (int i = 0; i < N; i++) put(s, i, 0);
    CHECK(zli_swap_flush(s) == ZL_OK);
    for (int step = 0; step < 3; step++) {
        bool started = false;
        CHECK(zli_swap_prefetch(s, 0, true, &started) == ZL_OK && started);
        for (int i = 0; i < N; i++) {
            if (i + 1 < N) {
                CHECK(zli_swap_prefetch(s, i + 1, true, &started) == ZL_OK);
                CHECK(started);
            }
            zl_tensor *t = NULL;
            CHECK(zli_swap_acquire(s, i, &t) == ZL_OK && t);
            if (!t) break;
            CHECK(mismatches(t, i, step) == 0);
            float *p = zl_tensor_data(t);
            for (int64_t j = 0; j < zl_tensor_numel(t); j++) p[j] += 1000003;
            CHECK(zli_swap_release(s, i, true) == ZL_OK);
        }
    }
    CHECK(zli_swap_flush(s) == ZL_OK);
    for (int i = 0; i < N; i++) expect(s, i, 5000 - i, 3);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* An offload_param swapper of `count` buffers whose `nslots` slots of `elems`
 * elements hold generation 0 on disk. */
static zli_swap *written(zl_aio *a, const char *name, int64_t elems, int count, int nslots)
{
    zli_swap *s = swapper(a, name, elems, count, "offload_param");
    for (int i = 0; i < nslots; i++) zli_swap_add_slot(s, elems);
    for (int i = 0; i < nslots; i++) put(s, i, 0);
    CHECK(zli_swap_flush(s) == ZL_OK);
    return s;
}

TEST(prefetch_without_a_free_buffer)
{
    zl_aio *a = engine(1);
    zli_swap *s = written(a, "full.swp", 1024, 3, 5);
    zl_tensor *t0 = NULL, *t1 = NULL;
    bool started = false;
    CHECK(zli_swap_acquire(s, 0, &t0) == ZL_OK);
    CHECK(zli_swap_acquire(s, 1, &t1) == ZL_OK);
    CHECK(zli_swap_prefetch(s, 2, false, &started) == ZL_OK && started);
    /* Every buffer pinned or prefetched: no buffer, and no error. */
    zl_clear_error();
    CHECK(zli_swap_prefetch(s, 3, true, &started) == ZL_OK && !started);
    CHECK(zl_last_error()[0] == '\0');
    /* A write in flight is waited for only when allowed. */
    CHECK(zli_swap_release(s, 0, true) == ZL_OK);
    CHECK(zli_swap_prefetch(s, 3, false, &started) == ZL_OK && !started);
    CHECK(zli_swap_prefetch(s, 3, true, &started) == ZL_OK && started);
    /* A resident slot is prefetched without I/O. */
    int64_t read = zli_swap_stats_of(s).bytes_read;
    CHECK(zli_swap_prefetch(s, 1, false, &started) == ZL_OK && started);
    CHECK(zli_swap_stats_of(s).bytes_read == read);
    CHECK(zli_swap_release(s, 1, false) == ZL_OK);
    expect(s, 1, 1024, 0);
    expect(s, 2, 1024, 0);
    expect(s, 3, 1024, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == read);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* A slot released dirty is served from its buffer, never read back. */
TEST(write_behind_then_reacquire_reads_nothing)
{
    zl_aio *a = engine(1);
    zli_swap *s = swapper(a, "behind.swp", 300000, 2, "zero.Init");
    zli_swap_add_slot(s, 300000);
    zli_swap_add_slot(s, 10);
    put(s, 0, 0);
    expect(s, 0, 300000, 0);
    put(s, 0, 1);
    put(s, 1, 0);
    expect(s, 0, 300000, 1);
    CHECK(zli_swap_flush(s) == ZL_OK);
    expect(s, 0, 300000, 1);
    zli_swap_stats st = zli_swap_stats_of(s);
    CHECK(st.bytes_read == 0);
    CHECK(st.bytes_written == 2 * 300000 * 4 + 10 * 4);
    CHECK(st.wait_seconds >= 0);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* Empty buffers first, then the least recently used; a prefetched slot stays. */
TEST(eviction_order)
{
    zl_aio *a = engine(1);
    zli_swap *s = swapper(a, "lru.swp", 1000, 3, "offload_param");
    for (int i = 0; i < 6; i++) zli_swap_add_slot(s, 1000);
    for (int i = 0; i < 3; i++) put(s, i, 0);
    CHECK(zli_swap_flush(s) == ZL_OK);
    expect(s, 0, 1000, 0);                  /* 1 is now the least recently used */
    put(s, 3, 0);                           /* evicts 1 */
    int64_t r0 = zli_swap_stats_of(s).bytes_read;
    CHECK(r0 == 0);
    expect(s, 0, 1000, 0);
    expect(s, 2, 1000, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == 0);
    /* A clean copy goes before one whose write is in flight: 1 evicts 0, not 3. */
    expect(s, 1, 1000, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == 4000);
    bool started = false;
    CHECK(zli_swap_prefetch(s, 0, true, &started) == ZL_OK && started);  /* evicts 2 */
    CHECK(zli_swap_stats_of(s).bytes_read == 8000);
    touch_slot(s, 4);                       /* evicts 1, never the prefetched 0 */
    touch_slot(s, 5);                       /* evicts 4 */
    expect(s, 0, 1000, 0);
    expect(s, 3, 1000, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == 8000);
    expect(s, 2, 1000, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == 12000);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* Reads ahead never make the read needed now fail: an acquire with every
 * unpinned buffer prefetched takes the one prefetched last, which is read
 * again when its turn comes. */
TEST(an_acquire_takes_the_last_read_ahead)
{
    zl_aio *a = engine(1);
    zli_swap *s = written(a, "ahead.swp", 1000, 3, 4);
    zl_tensor *t0 = NULL;
    bool started = false;
    CHECK(zli_swap_acquire(s, 0, &t0) == ZL_OK);
    CHECK(zli_swap_prefetch(s, 1, true, &started) == ZL_OK && started);
    CHECK(zli_swap_prefetch(s, 2, true, &started) == ZL_OK && started);
    /* Another prefetch never takes a read ahead. */
    CHECK(zli_swap_prefetch(s, 3, true, &started) == ZL_OK && !started);
    int64_t read = zli_swap_stats_of(s).bytes_read;
    expect(s, 3, 1000, 0);                  /* takes 2's buffer, not 1's */
    CHECK(zli_swap_stats_of(s).ahead_dropped == 1);
    expect(s, 1, 1000, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == read + 4000);
    expect(s, 2, 1000, 0);
    CHECK(zli_swap_stats_of(s).bytes_read == read + 8000);
    /* With every buffer pinned there is still no buffer to have. */
    zl_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL;
    CHECK(zli_swap_acquire(s, 1, &t1) == ZL_OK && zli_swap_acquire(s, 2, &t2) == ZL_OK);
    CHECK_ERR(zli_swap_acquire(s, 3, &t3), "ran out of swap buffers (3 in use) reading slot 3");
    for (int i = 0; i < 3; i++) CHECK(zli_swap_release(s, i, false) == ZL_OK);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(out_of_buffers)
{
    zl_aio *a = engine(1);
    zli_swap *s = swapper(a, "few.swp", 64, 2, "offload_param");
    for (int i = 0; i < 3; i++) zli_swap_add_slot(s, 64);
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire(s, 0, &t) == ZL_OK);
    CHECK(zli_swap_acquire(s, 1, &t) == ZL_OK);
    CHECK_ERR(zli_swap_acquire(s, 2, &t),
              "offload_param: ran out of swap buffers (2 in use) reading slot 2; increase offload_param.buffer_count");
    CHECK(t == NULL);
    CHECK_ERR(zli_swap_acquire_new(s, 2, &t), "ran out of swap buffers (2 in use) writing slot 2");
    /* The same slot pins again. */
    CHECK(zli_swap_acquire(s, 1, &t) == ZL_OK);
    CHECK(zli_swap_release(s, 1, false) == ZL_OK);
    CHECK(zli_swap_release(s, 1, false) == ZL_OK);
    CHECK_ERR(zli_swap_release(s, 1, false), "offload_param: release of slot 1, which is not acquired");
    CHECK(zli_swap_acquire(s, 2, &t) == ZL_OK);
    CHECK_ERR(zli_swap_acquire(s, 3, &t), "offload_param: acquire of slot 3, which does not exist (3 slots)");
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(bad_config_and_slots)
{
    zl_aio *a = engine(1);
    zli_swap *s = swapper(a, "cfg.swp", 1000, 1, "offload_optimizer");
    CHECK(zli_swap_add_slot(s, 1000) == 0);
    CHECK(zli_swap_add_slot(s, 1001) == -1);
    CHECK_ERR(zli_swap_add_slot(s, 1001),
              "offload_optimizer: a slot of 1001 elements does not fit the swap buffers of 1000 elements");
    CHECK_ERR(zli_swap_add_slot(s, -1), "a slot of -1 elements");
    CHECK(zli_swap_add_slot(s, 0) == 1);
    expect(s, 1, 0, 0);
    zli_swap_close(s);
    char path[512];
    zli_swap_config c = {.path = zt_tmp_path(path, sizeof path, "bad.swp"), .dtype = ZL_DTYPE_F32,
                         .buffer_elems = 10, .buffer_count = 0, .cat = ZL_MEM_PARAMS, .what = "offload_param"};
    CHECK_ERR(zli_swap_open(a, &c, &s), "offload_param.buffer_count must be at least 1, got 0");
    c.buffer_count = 1;
    c.buffer_elems = 0;
    CHECK_ERR(zli_swap_open(a, &c, &s), "offload_param: swap buffers of 0 elements");
    c.buffer_elems = 10;
    c.path = "/nonexistent-zlua-folder/x.swp";
    CHECK_ERR(zli_swap_open(a, &c, &s), "offload_param: cannot create the swap file /nonexistent-zlua-folder/x.swp");
    CHECK(s == NULL);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* Two slots through one buffer, so slot 0 is on disk only. */
static zli_swap *on_disk(zl_aio *a, const char *name, char *path, size_t n)
{
    zli_swap *s = swapper(a, name, 3000, 1, "offload_optimizer");
    zt_tmp_path(path, n, name);
    zli_swap_add_slot(s, 3000);
    zli_swap_add_slot(s, 3000);
    put(s, 0, 0);
    put(s, 1, 0);
    CHECK(zli_swap_flush(s) == ZL_OK);
    return s;
}

TEST(deleted_swap_file)
{
    char path[512], want[600];
    zl_aio *a = engine(1);
    zli_swap *s = on_disk(a, "gone.swp", path, sizeof path);
    CHECK(unlink(path) == 0);
    zl_tensor *t = NULL;
    snprintf(want, sizeof want, "offload_optimizer: reading slot 0: %s: cannot open for reading", path);
    CHECK_ERR(zli_swap_acquire(s, 0, &t), want);
    CHECK(t == NULL);
    /* Not resident after the error: the next acquire tries again. */
    CHECK_ERR(zli_swap_acquire(s, 0, &t), want);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(truncated_swap_file)
{
    char path[512], want[600];
    zl_aio *a = engine(2);
    zli_swap *s = on_disk(a, "short.swp", path, sizeof path);
    CHECK(truncate(path, 5000) == 0);
    bool started = false;
    CHECK(zli_swap_prefetch(s, 0, true, &started) == ZL_OK && started);
    zl_tensor *t = NULL;
    snprintf(want, sizeof want, "offload_optimizer: reading slot 0: %s: read", path);
    CHECK_ERR(zli_swap_acquire(s, 0, &t), want);
    CHECK_ERR(zli_swap_acquire(s, 0, &t), "(file too short)");
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* A failed write is reported by the call that waits for it; the slot is then
 * lost until rewritten whole. */
TEST(failed_write_loses_the_slot)
{
    char dir[512], path[600], want[700];
    zt_tmp_path(dir, sizeof dir, "vanishing");
    CHECK(mkdir(dir, 0777) == 0);
    snprintf(path, sizeof path, "%s/x.swp", dir);
    zl_aio *a = engine(1);
    zli_swap_config c = {.path = path, .dtype = ZL_DTYPE_BF16, .buffer_elems = 100, .buffer_count = 2,
                         .cat = ZL_MEM_PARAMS, .what = "offload_param"};
    zli_swap *s = NULL;
    CHECK(zli_swap_open(a, &c, &s) == ZL_OK);
    zli_swap_add_slot(s, 100);
    CHECK(unlink(path) == 0 && rmdir(dir) == 0);
    zl_tensor *t = NULL;
    CHECK(zli_swap_acquire_new(s, 0, &t) == ZL_OK);
    CHECK(zli_swap_release(s, 0, true) == ZL_OK);
    snprintf(want, sizeof want, "offload_param: writing slot 0: %s: cannot open for writing", path);
    CHECK_ERR(zli_swap_flush(s), want);
    CHECK_ERR(zli_swap_acquire(s, 0, &t), "offload_param: slot 0 was lost: its last write to");
    CHECK(mkdir(dir, 0777) == 0);
    CHECK(zli_swap_acquire_new(s, 0, &t) == ZL_OK);
    CHECK(zli_swap_release(s, 0, true) == ZL_OK);
    CHECK(zli_swap_flush(s) == ZL_OK);
    CHECK(zli_swap_acquire(s, 0, &t) == ZL_OK);
    CHECK(zli_swap_release(s, 0, false) == ZL_OK);
    zli_swap_close(s);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(buffers_are_charged_lazily_and_freed)
{
    zl_aio *a = engine(1);
    int64_t before = zl_mem_stats_of(ZL_MEM_OPTIMIZER).current;
    zli_swap *s = swapper(a, "mem.swp", 5000, 4, "offload_optimizer");   /* 20000 bytes -> 20480 */
    for (int i = 0; i < 6; i++) zli_swap_add_slot(s, 5000);
    CHECK(zl_mem_stats_of(ZL_MEM_OPTIMIZER).current == before);
    CHECK(zli_swap_stats_of(s).buffer_bytes == 0);
    put(s, 0, 0);
    put(s, 1, 0);
    CHECK(zli_swap_stats_of(s).buffer_bytes == 2 * 20480);
    CHECK(zl_mem_stats_of(ZL_MEM_OPTIMIZER).current - before == 2 * 20480);
    for (int i = 0; i < 6; i++) put(s, i, 1);
    CHECK(zli_swap_stats_of(s).buffer_bytes == 4 * 20480);
    CHECK(zl_mem_stats_of(ZL_MEM_OPTIMIZER).current - before == 4 * 20480);
    zli_swap_close(s);
    CHECK(zl_mem_stats_of(ZL_MEM_OPTIMIZER).current == before);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(close_removes_the_file)
{
    char path[512];
    zl_aio *a = engine(1);
    zli_swap *s = swapper(a, "bye.swp", 10, 1, "zero.Init");
    zt_tmp_path(path, sizeof path, "bye.swp");
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 0);
    zli_swap_add_slot(s, 10);
    put(s, 0, 0);
    zli_swap_close(s);
    CHECK(stat(path, &st) != 0);
    zli_swap_close(NULL);
    zl_aio_close(a);
    zt_tmp_reset();
}

/* ---- the folder ---- */

static bool exists(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void touch(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    zt_write_file(p, "x", 1);
}

TEST(swap_folder_marks_and_empties_its_own)
{
    char nvme[512], out[1024], want[1100];
    zt_tmp_path(nvme, sizeof nvme, "nvme/deep");
    CHECK(zli_swap_folder(nvme, "optimizer/rank0", "offload_optimizer", out, sizeof out) == ZL_OK);
    snprintf(want, sizeof want, "%s/zlua_swap/optimizer/rank0", nvme);
    CHECK(strcmp(out, want) == 0);
    CHECK(exists(out, ".zlua_swap"));
    snprintf(want, sizeof want, "%s/zlua_swap", nvme);
    CHECK(exists(want, ".zlua_swap") && exists(want, "optimizer/.zlua_swap"));
    touch(out, "group1.swp");
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/nested", out);
    CHECK(mkdir(sub, 0777) == 0);
    touch(sub, "deeper.swp");
    CHECK(zli_swap_folder(nvme, "optimizer/rank0", "offload_optimizer", out, sizeof out) == ZL_OK);
    CHECK(!exists(out, "group1.swp") && !exists(out, "nested"));
    CHECK(exists(out, ".zlua_swap"));
    /* A second rank beside it leaves the first alone. */
    touch(out, "group1.swp");
    CHECK(zli_swap_folder(nvme, "optimizer/rank1", "offload_optimizer", want, sizeof want) == ZL_OK);
    CHECK(exists(out, "group1.swp"));
    zt_tmp_reset();
}

TEST(swap_folder_refuses_a_folder_it_did_not_make)
{
    char nvme[512], dir[1024], out[1024], want[1200];
    zt_tmp_path(nvme, sizeof nvme, "nvme");
    snprintf(dir, sizeof dir, "%s/zlua_swap/params/rank0", nvme);
    CHECK(zl_fs_mkdirs(dir) == ZL_OK);
    /* Empty: used as it is. */
    CHECK(zli_swap_folder(nvme, "params/rank0", "offload_param", out, sizeof out) == ZL_OK);
    CHECK(strcmp(out, dir) == 0);
    touch(dir, "precious.txt");
    snprintf(want, sizeof want, "offload_param: the swap folder %s is not empty and zlua did not make it", dir);
    CHECK_ERR(zli_swap_folder(nvme, "params/rank0", "offload_param", out, sizeof out), want);
    CHECK(exists(dir, "precious.txt"));
    CHECK(out[0] == '\0');
    zt_tmp_reset();
}

TEST(swap_folder_bad_arguments)
{
    char nvme[512], out[1024];
    zt_tmp_path(nvme, sizeof nvme, "nvme");
    CHECK_ERR(zli_swap_folder("", "init/rank0", "zero.Init", out, sizeof out), "zero.Init.nvme_path is empty");
    CHECK_ERR(zli_swap_folder(nvme, "", "zero.Init", out, sizeof out), "must be a relative path without '..'");
    CHECK_ERR(zli_swap_folder(nvme, "..", "zero.Init", out, sizeof out), "zero.Init: swap folder '..' under");
    CHECK_ERR(zli_swap_folder(nvme, "a/../../b", "zero.Init", out, sizeof out), "without '..'");
    CHECK_ERR(zli_swap_folder(nvme, "a/..", "zero.Init", out, sizeof out), "without '..'");
    CHECK_ERR(zli_swap_folder(nvme, "/etc", "zero.Init", out, sizeof out), "without '..'");
    CHECK_ERR(zli_swap_folder(nvme, "init", "zero.Init", out, 8), "path too long");
    CHECK(zli_swap_folder(nvme, "..init/rank0", "zero.Init", out, sizeof out) == ZL_OK);
    char file[600];
    snprintf(file, sizeof file, "%s/zlua_swap/plain", nvme);
    zt_write_file(file, "x", 1);
    CHECK_ERR(zli_swap_folder(nvme, "plain", "zero.Init", out, sizeof out), "it exists and is not a folder");
    zt_tmp_reset();
}
