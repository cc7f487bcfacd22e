/* The aio engine (engine/offload/aio.c): round trips of many sizes through
 * aligned, plain and unaligned tensors under every knob of the aio block,
 * offsets, many requests in flight, the buffered fallback, and each error's
 * message naming its file. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

enum { BUF_ALIGNED, BUF_PLAIN, BUF_UNALIGNED };

static zl_aio *engine(int64_t block, int qd, int par, bool single, bool overlap)
{
    zl_aio_config c = {.block_size = block, .queue_depth = qd, .intra_op_parallelism = par,
                       .single_submit = single, .overlap_events = overlap};
    zl_aio *a = NULL;
    CHECK(zl_aio_open(&c, &a) == ZL_OK && a);
    return a;
}

static unsigned char byte_at(int64_t i, unsigned seed) { return (unsigned char)((i * 131 + seed * 7 + (i >> 12)) & 255); }

/* n bytes in a tensor of the given kind: from zl_aio_buffer, a plain tensor,
 * or a view one byte into a plain one (never 4096-aligned). */
static zl_tensor *bytes(int64_t n, int kind)
{
    if (kind == BUF_ALIGNED) return zl_aio_buffer(ZL_DTYPE_U8, n, ZL_MEM_OTHER);
    int64_t shape[1] = {kind == BUF_UNALIGNED ? n + 2 : n};
    zl_tensor *base = zl_tensor_new(ZL_DTYPE_U8, 1, shape, ZL_MEM_OTHER);
    if (!base || kind == BUF_PLAIN) return base;
    memset(zl_tensor_data(base), 0xEE, (size_t)n + 2);
    zl_tensor *v = zl_tensor_narrow(base, 0, 1, n);
    zl_tensor_release(base);
    return v;
}

static void fill(zl_tensor *t, unsigned seed)
{
    unsigned char *p = zl_tensor_data(t);
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) p[i] = byte_at(i, seed);
}

static int64_t mismatches(zl_tensor *t, unsigned seed)
{
    const unsigned char *p = zl_tensor_data(t);
    int64_t bad = 0;
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) bad += p[i] != byte_at(i, seed);
    return bad;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static const int64_t sizes[] = {1, 3, 4095, 4096, 4097, 65543, (1 << 20) + 13, 3 * (1 << 20) + 1000};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

/* Write then read back the first nsizes sizes at offset 0 of a file each, in each kind of tensor. */
static void round_trips(zl_aio *a, const char *tag, const int *kinds, int nkinds, int nsizes)
{
    char path[512], name[96];
    for (int k = 0; k < nkinds; k++)
        for (int s = 0; s < nsizes; s++) {
            int64_t n = sizes[s];
            unsigned seed = (unsigned)(s * 3 + k);
            snprintf(name, sizeof name, "%s_%d_%d.swp", tag, k, s);
            zt_tmp_path(path, sizeof path, name);
            zl_tensor *w = bytes(n, kinds[k]), *r = bytes(n, kinds[k]);
            CHECK(w && r);
            if (!w || !r) { zl_tensor_release(w); zl_tensor_release(r); return; }
            fill(w, seed);
            memset(zl_tensor_data(r), 0, (size_t)n);
            CHECK(zl_aio_wait(zl_aio_write(a, path, w, 0)) == ZL_OK);
            CHECK(file_size(path) == (n + 4095) / 4096 * 4096);
            CHECK(zl_aio_wait(zl_aio_read(a, path, r, 0)) == ZL_OK);
            int64_t bad = mismatches(r, seed);
            if (bad) zt_fail(__FILE__, __LINE__, "%s kind %d: %lld of %lld bytes differ", tag, kinds[k],
                             (long long)bad, (long long)n);
            if (kinds[k] == BUF_UNALIGNED) {
                /* Nothing around the view was touched by the read. */
                const unsigned char *p = (const unsigned char *)zl_tensor_data(r);
                CHECK(p[-1] == 0xEE && p[n] == 0xEE);
            }
            zl_tensor_release(w);
            zl_tensor_release(r);
        }
}

TEST(round_trip_every_knob)
{
    static const int kinds[] = {BUF_ALIGNED, BUF_UNALIGNED};
    char tag[64];
    for (int par = 1; par <= 3; par += 2)
        for (int qd = 1; qd <= 32; qd += 31)
            for (int single = 0; single < 2; single++)
                for (int overlap = 0; overlap < 2; overlap++) {
                    zl_aio *a = engine(16384, qd, par, single, overlap);
                    if (!a) return;
                    snprintf(tag, sizeof tag, "p%d_q%d_s%d_o%d", par, qd, single, overlap);
                    round_trips(a, tag, kinds, 2, NSIZES - 1);   /* the several-MiB one below */
                    CHECK(zl_aio_is_direct(a));
                    zl_aio_close(a);
                }
    zt_tmp_reset();
}

TEST(round_trip_defaults_plain_tensors)
{
    static const int kinds[] = {BUF_ALIGNED, BUF_PLAIN, BUF_UNALIGNED};
    zl_aio *a = NULL;
    CHECK(zl_aio_open(NULL, &a) == ZL_OK);
    if (!a) return;
    round_trips(a, "defaults", kinds, 3, NSIZES);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(defaults_are_deepspeeds)
{
    zl_aio_config c = zl_aio_defaults();
    CHECK(c.block_size == 1048576 && c.queue_depth == 8 && c.intra_op_parallelism == 1);
    CHECK(!c.single_submit && c.overlap_events);
}

TEST(offsets_and_zero_tail)
{
    char path[512];
    zt_tmp_path(path, sizeof path, "offsets.swp");
    zl_aio *a = engine(8192, 4, 2, false, true);
    if (!a) return;
    zl_tensor *x = bytes(5000, BUF_ALIGNED), *y = bytes(10000, BUF_UNALIGNED), *z = bytes(20000, BUF_PLAIN);
    fill(x, 1);
    fill(y, 2);
    fill(z, 3);
    zl_aio_request *r1 = zl_aio_write(a, path, x, 0);
    zl_aio_request *r2 = zl_aio_write(a, path, y, 8192);
    zl_aio_request *r3 = zl_aio_write(a, path, z, 65536);
    CHECK(zl_aio_wait(r1) == ZL_OK && zl_aio_wait(r2) == ZL_OK && zl_aio_wait(r3) == ZL_OK);
    CHECK(file_size(path) == 65536 + 20480);
    /* The rounding of x (5000 -> 8192) is zeros on disk. */
    int fd = open(path, O_RDONLY);
    unsigned char tail[3192];
    CHECK(fd >= 0 && pread(fd, tail, sizeof tail, 5000) == (ssize_t)sizeof tail);
    int nonzero = 0;
    for (size_t i = 0; i < sizeof tail; i++) nonzero += tail[i] != 0;
    CHECK(nonzero == 0);
    if (fd >= 0) close(fd);
    zl_tensor *rx = bytes(5000, BUF_PLAIN), *ry = bytes(10000, BUF_ALIGNED), *rz = bytes(20000, BUF_UNALIGNED);
    r3 = zl_aio_read(a, path, rz, 65536);
    r2 = zl_aio_read(a, path, ry, 8192);
    r1 = zl_aio_read(a, path, rx, 0);
    CHECK(zl_aio_wait(r1) == ZL_OK && zl_aio_wait(r2) == ZL_OK && zl_aio_wait(r3) == ZL_OK);
    CHECK(mismatches(rx, 1) == 0 && mismatches(ry, 2) == 0 && mismatches(rz, 3) == 0);
    zl_tensor *ts[] = {x, y, z, rx, ry, rz};
    for (int i = 0; i < 6; i++) zl_tensor_release(ts[i]);
    zl_aio_close(a);
}

TEST(sixteen_in_flight_waited_in_reverse)
{
    enum { N = 16 };
    char path[512];
    zt_tmp_path(path, sizeof path, "many.swp");
    zl_aio *a = engine(65536, 8, 2, false, true);
    if (!a) return;
    zl_tensor *w[N], *r[N];
    zl_aio_request *q[N];
    const int64_t n = 300000;            /* each at its own 4096-aligned slot of one file */
    const int64_t slot = (n + 4095) / 4096 * 4096;
    for (int i = 0; i < N; i++) {
        w[i] = bytes(n, i % 2 ? BUF_ALIGNED : BUF_UNALIGNED);
        r[i] = bytes(n, i % 3 ? BUF_ALIGNED : BUF_UNALIGNED);
        fill(w[i], (unsigned)i + 10);
        /* The writes' tensors go at once: the requests keep them alive. */
        q[i] = zl_aio_write(a, path, w[i], i * slot);
        zl_tensor_release(w[i]);
        CHECK(q[i]);
    }
    for (int i = N - 1; i >= 0; i--) CHECK(zl_aio_wait(q[i]) == ZL_OK);
    for (int i = 0; i < N; i++) q[i] = zl_aio_read(a, path, r[i], i * slot);
    for (int i = N - 1; i >= 0; i--) CHECK(zl_aio_wait(q[i]) == ZL_OK);
    for (int i = 0; i < N; i++) {
        CHECK(mismatches(r[i], (unsigned)i + 10) == 0);
        zl_tensor_release(r[i]);
    }
    zl_aio_close(a);
}

TEST(dtypes_and_empty)
{
    char path[512];
    zt_tmp_path(path, sizeof path, "f32.swp");
    zl_aio *a = engine(4096, 2, 1, false, false);
    if (!a) return;
    zl_tensor *x = zt_randn(SHAPE(3, 1001));
    zl_tensor *y = zl_aio_buffer(ZL_DTYPE_F32, 3003, ZL_MEM_OPTIMIZER);
    CHECK(zl_aio_wait(zl_aio_write(a, path, x, 4096)) == ZL_OK);
    CHECK(zl_aio_wait(zl_aio_read(a, path, y, 4096)) == ZL_OK);
    CHECK(memcmp(zl_tensor_data(x), zl_tensor_data(y), 3003 * 4) == 0);
    /* An empty tensor: the file is made, nothing moves. */
    zl_tensor *e = zl_aio_buffer(ZL_DTYPE_F32, 0, ZL_MEM_OTHER);
    zt_tmp_path(path, sizeof path, "empty.swp");
    CHECK(zl_aio_wait(zl_aio_write(a, path, e, 0)) == ZL_OK);
    CHECK(file_size(path) == 0);
    CHECK(zl_aio_wait(zl_aio_read(a, path, e, 0)) == ZL_OK);
    zl_tensor_release(x);
    zl_tensor_release(y);
    zl_tensor_release(e);
    zl_aio_close(a);
}

TEST(buffer_is_aligned_and_accounted)
{
    zl_mem_stats before = zl_mem_stats_of(ZL_MEM_OPTIMIZER);
    zl_tensor *t = zl_aio_buffer(ZL_DTYPE_BF16, 5000, ZL_MEM_OPTIMIZER);
    CHECK(t && zl_tensor_numel(t) == 5000 && zl_tensor_dtype(t) == ZL_DTYPE_BF16);
    CHECK((uintptr_t)zl_tensor_data(t) % 4096 == 0);
    CHECK(zl_mem_stats_of(ZL_MEM_OPTIMIZER).current - before.current == 12288);
    zl_tensor_release(t);
    CHECK(zl_mem_stats_of(ZL_MEM_OPTIMIZER).current == before.current);
    CHECK_ERR(zl_aio_buffer(ZL_DTYPE_F32, -1, ZL_MEM_OTHER), "numel -1 is negative");
    zl_mem_fail_after(1);
    CHECK_ERR(zl_aio_buffer(ZL_DTYPE_F32, 10, ZL_MEM_OTHER), "out of memory");
    zl_mem_fail_after(0);
}

/* The forced fallback (ZLUA_AIO_BUFFERED=1) is the path a filesystem without
 * O_DIRECT takes: same files, same rounding. */
TEST(buffered_fallback_round_trips)
{
    static const int kinds[] = {BUF_ALIGNED, BUF_UNALIGNED};
    setenv("ZLUA_AIO_BUFFERED", "1", 1);
    zl_aio *a = engine(16384, 4, 3, false, true);
    unsetenv("ZLUA_AIO_BUFFERED");
    if (!a) return;
    CHECK(!zl_aio_is_direct(a));
    round_trips(a, "buffered", kinds, 2, NSIZES);
    zl_aio_close(a);
    /* A file written buffered reads back direct. */
    char path[512];
    zt_tmp_path(path, sizeof path, "buffered_1_6.swp");
    a = engine(65536, 8, 1, false, true);
    zl_tensor *r = bytes(sizes[6], BUF_ALIGNED);
    CHECK(zl_aio_wait(zl_aio_read(a, path, r, 0)) == ZL_OK);
    CHECK(mismatches(r, 6 * 3 + 1) == 0);
    zl_tensor_release(r);
    zl_aio_close(a);
    zt_tmp_reset();
}

TEST(tmpfs)
{
    struct stat st;
    if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) {
        zt_skip("no /dev/shm here");
        return;
    }
    char dir[] = "/dev/shm/zlua_aio_XXXXXX";
    if (!mkdtemp(dir)) {
        zt_skip("cannot make a folder under /dev/shm");
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/x.swp", dir);
    zl_aio *a = engine(65536, 8, 2, false, true);
    if (a) {
        zl_tensor *w = bytes(200001, BUF_UNALIGNED), *r = bytes(200001, BUF_ALIGNED);
        fill(w, 5);
        CHECK(zl_aio_wait(zl_aio_write(a, path, w, 0)) == ZL_OK);
        CHECK(zl_aio_wait(zl_aio_read(a, path, r, 0)) == ZL_OK);
        CHECK(mismatches(r, 5) == 0);
        /* Older kernels refuse O_DIRECT on tmpfs (the fallback), 6.6 and later take it. */
        printf("note: /dev/shm %s\n", zl_aio_is_direct(a) ? "takes O_DIRECT" : "fell back to buffered I/O");
        zl_tensor_release(w);
        zl_tensor_release(r);
        zl_aio_close(a);
    }
    unlink(path);
    rmdir(dir);
}

/* stderr into a file while fn runs; returns what was written (static). */
static const char *capture_stderr(void (*fn)(void *), void *arg)
{
    static char text[4096];
    char path[512];
    zt_tmp_path(path, sizeof path, "stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    text[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    return text;
}

typedef struct full_writes {
    zl_aio *a;
    zl_status st[2];
    char msg[2][512];
} full_writes;

static void write_dev_full_twice(void *arg)
{
    full_writes *f = arg;
    zl_tensor *t = bytes(10000, BUF_ALIGNED);
    for (int i = 0; i < 2; i++) {
        f->st[i] = zl_aio_wait(zl_aio_write(f->a, "/dev/full", t, 0));
        snprintf(f->msg[i], sizeof f->msg[i], "%s", zl_last_error());
    }
    zl_tensor_release(t);
}

TEST(enospc_names_the_file_and_warns_once)
{
    if (access("/dev/full", W_OK) != 0) {
        zt_skip("no writable /dev/full");
        return;
    }
    full_writes f = {.a = engine(4096, 4, 2, false, true)};
    if (!f.a) return;
    const char *err = capture_stderr(write_dev_full_twice, &f);
    for (int i = 0; i < 2; i++) {
        /* Either worker's share may fail first: the offset varies. */
        CHECK(f.st[i] == ZL_EIO);
        if (!strstr(f.msg[i], "/dev/full: write failed at offset ") || !strstr(f.msg[i], ": No space left on device"))
            zt_fail(__FILE__, __LINE__, "unexpected message: %s", f.msg[i]);
    }
    const char *warning = "zlua: aio: /dev does not support O_DIRECT; using buffered I/O\n";
    const char *at = strstr(err, warning);
    if (!at || strstr(at + 1, warning))
        zt_fail(__FILE__, __LINE__, "expected the warning once on stderr, got:\n%s", err);
    CHECK(!zl_aio_is_direct(f.a));
    zl_aio_close(f.a);
}

TEST(read_errors_name_the_file)
{
    char path[512], dir[600], msg[1024];
    zl_aio *a = engine(4096, 4, 3, false, true);
    if (!a) return;
    zl_tensor *t = bytes(6000, BUF_ALIGNED), *u = bytes(6000, BUF_UNALIGNED);

    zt_tmp_path(path, sizeof path, "missing.swp");
    snprintf(msg, sizeof msg, "%s: cannot open for reading: No such file or directory", path);
    CHECK_ERR(zl_aio_wait(zl_aio_read(a, path, t, 0)), msg);

    /* 5000 bytes on disk, 6000 wanted: short, direct and through bounce blocks. */
    zt_tmp_path(path, sizeof path, "short.swp");
    unsigned char data[5000] = {0};
    zt_write_file(path, data, sizeof data);
    snprintf(msg, sizeof msg, "%s: read 5000 of 6000 bytes at offset 0 (file too short)", path);
    CHECK_ERR(zl_aio_wait(zl_aio_read(a, path, t, 0)), msg);
    CHECK_ERR(zl_aio_wait(zl_aio_read(a, path, u, 0)), msg);
    snprintf(msg, sizeof msg, "%s: read 0 of 6000 bytes at offset 8192 (file too short)", path);
    CHECK_ERR(zl_aio_wait(zl_aio_read(a, path, t, 8192)), msg);

    /* A path under a regular file (root ignores permission bits, not this). */
    snprintf(dir, sizeof dir, "%s/x.swp", path);
    snprintf(msg, sizeof msg, "%s: cannot open for writing: Not a directory", dir);
    CHECK_ERR(zl_aio_wait(zl_aio_write(a, dir, t, 0)), msg);
    snprintf(msg, sizeof msg, "%s: cannot open for reading: Not a directory", dir);
    CHECK_ERR(zl_aio_wait(zl_aio_read(a, dir, t, 0)), msg);

    /* The engine goes on working after its errors. */
    zt_tmp_path(path, sizeof path, "after.swp");
    fill(t, 9);
    CHECK(zl_aio_wait(zl_aio_write(a, path, t, 0)) == ZL_OK);
    CHECK(zl_aio_wait(zl_aio_read(a, path, u, 0)) == ZL_OK);
    CHECK(mismatches(u, 9) == 0);
    zl_tensor_release(t);
    zl_tensor_release(u);
    zl_aio_close(a);
}

TEST(bad_config_and_arguments)
{
    zl_aio *a = NULL;
    zl_aio_config c = zl_aio_defaults();
    c.block_size = 1000;
    CHECK_ERR(zl_aio_open(&c, &a), "aio: block_size must be a positive multiple of 4096");
    c.block_size = 0;
    CHECK_ERR(zl_aio_open(&c, &a), "got 0");
    c = zl_aio_defaults();
    c.queue_depth = 0;
    CHECK_ERR(zl_aio_open(&c, &a), "aio: queue_depth must be between 1 and 65536, got 0");
    c = zl_aio_defaults();
    c.intra_op_parallelism = -2;
    CHECK_ERR(zl_aio_open(&c, &a), "aio: intra_op_parallelism must be between 1 and 1024, got -2");
    CHECK(a == NULL);
    CHECK_ERR(zl_aio_open(NULL, NULL), "output pointer is NULL");
    zl_aio_close(NULL);

    a = engine(4096, 2, 1, false, true);
    if (!a) return;
    char path[512];
    zt_tmp_path(path, sizeof path, "args.swp");
    zl_tensor *t = bytes(100, BUF_ALIGNED);
    CHECK_ERR(zl_aio_write(a, path, t, 100), "aio write: offset 100 into");
    CHECK_ERR(zl_aio_read(a, path, t, -4096), "aio read: offset -4096 into");
    CHECK_ERR(zl_aio_write(a, path, NULL, 0), "aio write: tensor is NULL");
    CHECK_ERR(zl_aio_write(a, "", t, 0), "aio write: the path is empty");
    CHECK_ERR(zl_aio_write(NULL, path, t, 0), "aio write: the engine is NULL");
    zl_tensor *m = zt_randn(SHAPE(3, 4));
    zl_tensor *mt = zl_tensor_transpose(m, 0, 1);
    CHECK_ERR(zl_aio_write(a, path, mt, 0), "is not contiguous");
    CHECK_ERR(zl_aio_wait(NULL), "aio wait: the request is NULL");
    zl_tensor_release(mt);
    zl_tensor_release(m);
    zl_tensor_release(t);
    zl_aio_close(a);
}

/* close waits for what is in flight; the requests stay valid to wait on. */
TEST(close_before_wait)
{
    char path[512];
    zt_tmp_path(path, sizeof path, "close.swp");
    zl_aio *a = engine(65536, 4, 2, false, true);
    if (!a) return;
    zl_tensor *w = bytes(1 << 20, BUF_ALIGNED), *r = bytes(1 << 20, BUF_UNALIGNED);
    fill(w, 4);
    zl_aio_request *q = zl_aio_write(a, path, w, 0);
    zl_aio_close(a);
    CHECK(zl_aio_wait(q) == ZL_OK);
    a = engine(65536, 4, 2, false, true);
    q = zl_aio_read(a, path, r, 0);
    zl_aio_close(a);
    CHECK(zl_aio_wait(q) == ZL_OK);
    CHECK(mismatches(r, 4) == 0);
    zl_tensor_release(w);
    zl_tensor_release(r);
}
