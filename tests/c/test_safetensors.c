/* .safetensors files and atomic writes: the exact bytes written, round trips
 * of every dtype bit for bit (0-d, empty, metadata with escapes), files written
 * by hand the way other tools write them, ranges, the streaming writer, every
 * corrupt-file message, and the old file surviving a failed or killed write. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>
#include "harness.h"

static unsigned char *read_whole(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    if (len > 0 && fread(b, 1, (size_t)len, f) != (size_t)len) len = 0;
    *n = (size_t)len;
    fclose(f);
    return b;
}

/* A file of an 8-byte length, `header` exactly as given (no padding), then `data`. */
static void write_st(const char *path, const char *header, const void *data, size_t ndata)
{
    size_t h = strlen(header), n = 8 + h + ndata;
    unsigned char *b = malloc(n);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(b + 8, header, h);
    if (ndata) memcpy(b + 8 + h, data, ndata);
    zt_write_file(path, b, n);
    free(b);
}

/* Files in the temporary directory whose name contains `part`. */
static int count_files(const char *part)
{
    DIR *d = opendir(zt_tmp_dir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A tensor of random bits (every pattern, NaNs and infinities included; 0/1 for bool). */
static zl_tensor *random_bits(zl_dtype dt, int ndim, const int64_t *shape)
{
    zl_tensor *t = zl_tensor_new(dt, ndim, shape, ZL_MEM_OTHER);
    if (!t) return NULL;
    unsigned char *p = zl_tensor_data(t);
    size_t n = (size_t)zl_tensor_numel(t) * zl_dtype_size(dt);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(dt == ZL_DTYPE_BOOL ? next_u64() & 1 : next_u64() >> 56);
    return t;
}

static bool same_bits(const zl_tensor *a, const zl_tensor *b)
{
    if (!a || !b || zl_tensor_dtype(a) != zl_tensor_dtype(b) || zl_tensor_ndim(a) != zl_tensor_ndim(b)) return false;
    for (int d = 0; d < zl_tensor_ndim(a); d++)
        if (zl_tensor_size(a, d) != zl_tensor_size(b, d)) return false;
    size_t n = (size_t)zl_tensor_numel(a) * zl_dtype_size(zl_tensor_dtype(a));
    return n == 0 || memcmp(zl_tensor_data(a), zl_tensor_data(b), n) == 0;
}

/* ---- the format ---- */

/* The bytes of a small file, against the format written out by hand. */
TEST(exact_bytes)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "exact.safetensors");
    zl_tensor *a = zl_tensor_from_data(ZL_DTYPE_F32, SHAPE(2), (float[]){1.0f, -2.0f});
    zl_tensor *b = zl_tensor_from_data(ZL_DTYPE_I64, 0, NULL, (int64_t[]){7});
    const char *names[] = {"w\"q", "b"};
    zl_tensor *ts[] = {a, b};
    zl_safetensors_meta meta[] = {{"format", "pt"}, {"note", "tab\there"}};
    CHECK(zl_safetensors_save(p, 2, names, ts, 2, meta) == ZL_OK);
    const char *header = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"tab\\u0009here\"},"
                         "\"w\\\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
    size_t h = strlen(header), padded = (h + 7) / 8 * 8;
    size_t n;
    unsigned char *got = read_whole(p, &n);
    CHECK(n == 8 + padded + 16);
    if (got && n == 8 + padded + 16) {
        uint64_t len = 0;
        for (int k = 7; k >= 0; k--) len = len << 8 | got[k];
        CHECK(len == padded);
        CHECK(memcmp(got + 8, header, h) == 0);
        for (size_t i = h; i < padded; i++) CHECK(got[8 + i] == ' ');
        float f[2];
        int64_t i64;
        memcpy(f, got + 8 + padded, 8);
        memcpy(&i64, got + 8 + padded + 8, 8);
        CHECK(f[0] == 1.0f && f[1] == -2.0f && i64 == 7);
    }
    free(got);
    zl_tensor_release(a);
    zl_tensor_release(b);
}

/* Every dtype, random bits, random shapes with 0-d and empty ones, through
 * save, the listing and reads by name. */
TEST(round_trip_every_dtype)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "all.safetensors");
    enum { N = 7 * 4 };
    zl_tensor *ts[N];
    char names[N][32];
    const char *np[N];
    for (int i = 0; i < N; i++) {
        zl_dtype dt = (zl_dtype)(i % 7);
        int kind = i / 7;   /* 0: 0-d, 1: empty, 2 and 3: random shapes */
        int64_t shape[4] = {1, 1, 1, 1};
        int ndim = kind == 0 ? 0 : 1 + (int)(next_u64() % 4);
        for (int d = 0; d < ndim; d++) shape[d] = 1 + (int64_t)(next_u64() % 5);
        if (kind == 1) shape[next_u64() % (uint64_t)ndim] = 0;
        ts[i] = random_bits(dt, ndim, shape);
        snprintf(names[i], sizeof names[i], "layer.%d.%s", i, zl_dtype_name(dt));
        np[i] = names[i];
    }
    zl_safetensors_meta meta[] = {{"format", "pt"},
                                  {"quote \" back \\ nl \n", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"},
                                  {"empty", ""}};
    CHECK(zl_safetensors_save(p, N, np, ts, 3, meta) == ZL_OK);
    zl_safetensors *f = zl_safetensors_open(p);
    CHECK(f);
    if (!f) return;
    CHECK(zl_safetensors_count(f) == N);
    CHECK(zl_safetensors_metadata_count(f) == 3);
    CHECK(strcmp(zl_safetensors_metadata_get(f, "quote \" back \\ nl \n"), meta[1].value) == 0);
    CHECK(strcmp(zl_safetensors_metadata_get(f, "empty"), "") == 0);
    CHECK(zl_safetensors_metadata_get(f, "absent") == NULL);
    int64_t data_start = zl_safetensors_entry_at(f, 0)->offset;
    CHECK(data_start % 8 == 0);
    for (int i = 0; i < N; i++) {
        const zl_safetensors_entry *e = zl_safetensors_entry_at(f, i);
        /* Data in the order given; empty tensors tie at an offset, in header order. */
        CHECK(e && strcmp(e->name, names[i]) == 0);
        if (!e) continue;
        CHECK(e->dtype == zl_tensor_dtype(ts[i]) && e->ndim == zl_tensor_ndim(ts[i]));
        CHECK(e->numel == zl_tensor_numel(ts[i]));
        CHECK(e->nbytes == e->numel * (int64_t)zl_dtype_size(e->dtype));
        CHECK(zl_safetensors_find(f, names[i]) == e);
        zl_tensor *r = zl_safetensors_read(f, names[i], ZL_MEM_PARAMS);
        CHECK(same_bits(r, ts[i]));
        CHECK(r && zl_tensor_category(r) == ZL_MEM_PARAMS);
        zl_tensor_release(r);
    }
    CHECK(zl_safetensors_find(f, "nope") == NULL);
    zl_safetensors_close(f);
    for (int i = 0; i < N; i++) zl_tensor_release(ts[i]);

    /* No tensors, no metadata: still a file other tools read. */
    CHECK(zl_safetensors_save(p, 0, NULL, NULL, 0, NULL) == ZL_OK);
    f = zl_safetensors_open(p);
    CHECK(f && zl_safetensors_count(f) == 0 && zl_safetensors_metadata_count(f) == 0);
    zl_safetensors_close(f);
    CHECK(count_files(".tmp.") == 0);
}

/* A view that is not contiguous is written in logical order. */
TEST(non_contiguous_source)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "view.safetensors");
    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_F32, 6);
    zl_tensor *m = zl_tensor_view(a, SHAPE(2, 3));
    zl_tensor *t = zl_tensor_transpose(m, 0, 1);
    const char *names[] = {"t"};
    CHECK(zl_safetensors_save(p, 1, names, &t, 0, NULL) == ZL_OK);
    zl_safetensors *f = zl_safetensors_open(p);
    zl_tensor *r = zl_safetensors_read(f, "t", ZL_MEM_OTHER);
    CHECK(r && zl_tensor_size(r, 0) == 3 && zl_tensor_size(r, 1) == 2);
    if (r) {
        const float *v = zl_tensor_data(r);
        const float want[] = {0, 3, 1, 4, 2, 5};
        for (int i = 0; i < 6; i++) CHECK(v[i] == want[i]);
    }
    zl_tensor_release(r);
    zl_safetensors_close(f);
    zl_tensor_release(t);
    zl_tensor_release(m);
    zl_tensor_release(a);
}

/* A header as other writers lay it out: whitespace, keys in another order,
 * escapes and surrogate pairs, data not in header order, metadata last, and a
 * dtype zlua lacks (listed, not readable). */
TEST(foreign_header)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "foreign.safetensors");
    const char *header =
        "{ \"z\\u00e9\\ud83d\\ude00\" : { \"data_offsets\" : [ 8 , 12 ] , \"shape\" : [ 2 ] , \"dtype\" : \"BF16\" } ,\n"
        "  \"d\" : {\"shape\":[1],\"dtype\":\"F64\",\"data_offsets\":[0,8]},\r\n"
        "  \"__metadata__\" : { \"a\\/b\" : \"x\\\\y\" } }   ";
    unsigned char data[12] = {0};
    double d = 2.5;
    memcpy(data, &d, 8);
    uint16_t bf[2] = {zl_f32_to_bf16(1.5f), zl_f32_to_bf16(-3.0f)};
    memcpy(data + 8, bf, 4);
    write_st(p, header, data, sizeof data);
    zl_safetensors *f = zl_safetensors_open(p);
    CHECK(f);
    if (!f) return;
    CHECK(zl_safetensors_count(f) == 2);
    const zl_safetensors_entry *e0 = zl_safetensors_entry_at(f, 0), *e1 = zl_safetensors_entry_at(f, 1);
    CHECK(strcmp(e0->name, "d") == 0 && e0->dtype == ZL_DTYPE_COUNT && strcmp(e0->dtype_name, "F64") == 0);
    CHECK(strcmp(e1->name, "z\xc3\xa9\xf0\x9f\x98\x80") == 0 && e1->dtype == ZL_DTYPE_BF16);
    CHECK(e1->offset == 8 + (int64_t)strlen(header) + 8);
    CHECK(strcmp(zl_safetensors_metadata_get(f, "a/b"), "x\\y") == 0);
    zl_clear_error();
    CHECK(zl_safetensors_entry_at(f, 2) == NULL &&
          strstr(zl_last_error(), "entry_at: index 2 is out of range (2 tensors)"));
    zl_clear_error();
    CHECK(zl_safetensors_entry_at(f, -1) == NULL && strstr(zl_last_error(), "entry_at: index -1 is out of range"));
    zl_clear_error();
    CHECK(zl_safetensors_metadata_at(f, zl_safetensors_metadata_count(f)) == NULL &&
          strstr(zl_last_error(), "metadata_at: index 1 is out of range (1 metadata pairs)"));
    zl_tensor *t = zl_safetensors_read(f, e1->name, ZL_MEM_OTHER);
    CHECK(t && zl_tensor_get(t, 0) == 1.5 && zl_tensor_get(t, 1) == -3.0);
    zl_tensor_release(t);
    char want[1200];
    snprintf(want, sizeof want, "%s: tensor 'd' has dtype F64, which zlua does not have", p);
    CHECK_ERR(t = zl_safetensors_read(f, "d", ZL_MEM_OTHER), want);
    CHECK(t == NULL);
    snprintf(want, sizeof want, "%s: no tensor named 'q'", p);
    CHECK_ERR(zl_safetensors_read(f, "q", ZL_MEM_OTHER), want);
    zl_safetensors_close(f);
}

/* Element ranges: a rank reading its slice of someone else's shard. */
TEST(read_into_ranges)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "range.safetensors");
    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_F32, 10);
    zl_tensor *b = zl_tensor_arange(ZL_DTYPE_I64, 5);
    const char *names[] = {"flat", "ids"};
    zl_tensor *ts[] = {a, b};
    CHECK(zl_safetensors_save(p, 2, names, ts, 0, NULL) == ZL_OK);
    zl_safetensors *f = zl_safetensors_open(p);
    zl_tensor *dst = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2, 2));
    CHECK(zl_safetensors_read_into(f, "flat", 6, dst) == ZL_OK);
    for (int i = 0; i < 4; i++) CHECK(zl_tensor_get(dst, i) == 6 + i);
    char want[1200];
    snprintf(want, sizeof want, "%s: elements [7, 11) are out of range for tensor 'flat' of 10 elements", p);
    CHECK_ERR(zl_safetensors_read_into(f, "flat", 7, dst), want);
    CHECK_ERR(zl_safetensors_read_into(f, "flat", -1, dst), "elements [-1, 3) are out of range");
    snprintf(want, sizeof want, "%s: tensor 'ids' is I64, the destination is f32", p);
    CHECK_ERR(zl_safetensors_read_into(f, "ids", 0, dst), want);
    zl_tensor *tr = zl_tensor_transpose(dst, 0, 1);
    CHECK_ERR(zl_safetensors_read_into(f, "flat", 0, tr), "reading tensor 'flat' needs a contiguous CPU destination");
    zl_tensor *empty = zl_tensor_new(ZL_DTYPE_F32, SHAPE(0), ZL_MEM_OTHER);
    CHECK(zl_safetensors_read_into(f, "flat", 10, empty) == ZL_OK);
    zl_tensor_release(empty);
    zl_tensor_release(tr);
    zl_tensor_release(dst);
    zl_safetensors_close(f);
    zl_tensor_release(a);
    zl_tensor_release(b);
}

/* The streaming writer: pieces that cross tensor boundaries, and its errors. */
TEST(writer_streaming)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "stream.safetensors");
    zl_safetensors_entry e[] = {
        {.name = "a", .dtype = ZL_DTYPE_F32, .ndim = 2, .shape = {2, 3}},
        {.name = "empty", .dtype = ZL_DTYPE_F32, .ndim = 1, .shape = {0}},
        {.name = "b", .dtype = ZL_DTYPE_F32, .ndim = 1, .shape = {4}},
        {.name = "c", .dtype = ZL_DTYPE_I32, .ndim = 0},
    };
    zl_safetensors_writer *w = zl_safetensors_writer_open(p, 4, e, 0, NULL);
    CHECK(w);
    if (!w) return;
    zl_tensor *all = zl_tensor_arange(ZL_DTYPE_F32, 10);
    zl_tensor *p1 = zl_tensor_narrow(all, 0, 0, 4), *p2 = zl_tensor_narrow(all, 0, 4, 5), *p3 = zl_tensor_narrow(all, 0, 9, 1);
    zl_tensor *i1 = zl_tensor_scalar(ZL_DTYPE_I32, 42), *i2 = zl_tensor_arange(ZL_DTYPE_I32, 2);
    char want[1200];
    snprintf(want, sizeof want, "cannot write '%s': tensor 'a' is F32, the appended elements are I32", p);
    CHECK_ERR(zl_safetensors_writer_append(w, i1), want);
    CHECK(zl_safetensors_writer_append(w, p1) == ZL_OK);
    CHECK(zl_safetensors_writer_append(w, p2) == ZL_OK);   /* finishes 'a', skips 'empty', starts 'b' */
    snprintf(want, sizeof want, "cannot write '%s': tensor 'c' is I32, the appended elements are F32", p);
    CHECK_ERR(zl_safetensors_writer_append(w, p2), want);   /* 'b' has 1 left, then 'c' is I32: nothing written */
    CHECK(zl_safetensors_writer_append(w, p3) == ZL_OK);
    snprintf(want, sizeof want, "cannot write '%s': 2 elements appended, 1 more than the tensors declared hold", p);
    CHECK_ERR(zl_safetensors_writer_append(w, i2), want);
    CHECK(zl_safetensors_writer_append(w, i1) == ZL_OK);
    CHECK(zl_safetensors_writer_commit(w) == ZL_OK);
    zl_safetensors *f = zl_safetensors_open(p);
    zl_tensor *a = zl_safetensors_read(f, "a", ZL_MEM_OTHER), *b = zl_safetensors_read(f, "b", ZL_MEM_OTHER);
    zl_tensor *c = zl_safetensors_read(f, "c", ZL_MEM_OTHER), *em = zl_safetensors_read(f, "empty", ZL_MEM_OTHER);
    for (int i = 0; i < 6; i++) CHECK(a && zl_tensor_get(a, i) == i);
    for (int i = 0; i < 4; i++) CHECK(b && zl_tensor_get(b, i) == 6 + i);
    CHECK(c && zl_tensor_ndim(c) == 0 && zl_tensor_get(c, 0) == 42);
    CHECK(em && zl_tensor_numel(em) == 0);
    zl_tensor_release(a);
    zl_tensor_release(b);
    zl_tensor_release(c);
    zl_tensor_release(em);
    zl_safetensors_close(f);

    /* A commit before every element is there fails and leaves the old file. */
    size_t n0, n1;
    unsigned char *before = read_whole(p, &n0);
    w = zl_safetensors_writer_open(p, 4, e, 0, NULL);
    CHECK(zl_safetensors_writer_append(w, p1) == ZL_OK);
    snprintf(want, sizeof want, "cannot write '%s': tensor 'a' has 4 of its 6 elements (the file was not written; '%s' is unchanged)", p, p);
    CHECK_ERR(zl_safetensors_writer_commit(w), want);
    unsigned char *after = read_whole(p, &n1);
    CHECK(n0 == n1 && n0 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    w = zl_safetensors_writer_open(p, 4, e, 0, NULL);
    zl_safetensors_writer_abort(w);
    zl_safetensors_writer_abort(NULL);
    CHECK(count_files(".tmp.") == 0);
    zl_tensor_release(p1);
    zl_tensor_release(p2);
    zl_tensor_release(p3);
    zl_tensor_release(i1);
    zl_tensor_release(i2);
    zl_tensor_release(all);
}

/* Bad arguments to the writer name the file and the entry. */
TEST(writer_bad_entries)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "bad_entries.safetensors");
    zl_safetensors_entry e[] = {
        {.name = "x", .dtype = ZL_DTYPE_F32, .ndim = 1, .shape = {2}},
        {.name = "x", .dtype = ZL_DTYPE_F32, .ndim = 1, .shape = {2}},
    };
    char want[1200];
    snprintf(want, sizeof want, "cannot write '%s': tensor name 'x' is given twice", p);
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 0, NULL), want);
    e[1].name = "__metadata__";
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 0, NULL), "tensor 1: the name '__metadata__' is reserved for metadata");
    e[1].name = "bad\xff";
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 0, NULL), "the name of tensor 1 is not valid UTF-8");
    e[1].name = "y";
    e[1].shape[0] = -1;
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 0, NULL), "tensor 'y' has shape [-1]");
    e[1].shape[0] = 2;
    e[1].dtype = ZL_DTYPE_COUNT;
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 0, NULL), "tensor 'y' has an invalid dtype 7");
    e[1].dtype = ZL_DTYPE_U8;
    zl_safetensors_meta m[] = {{"k", "v"}, {"k", "w"}};
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 2, m), "metadata key 'k' is given twice");
    m[1].key = NULL;
    CHECK_ERR(zl_safetensors_writer_open(p, 2, e, 2, m), "metadata pair 1 has a NULL key");
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1));
    const char *names[] = {"a", "b"};
    zl_tensor *ts[] = {t, NULL};
    CHECK_ERR(zl_safetensors_save(p, 2, names, ts, 0, NULL), "tensor 1 ('b') is NULL");
    CHECK_ERR(zl_safetensors_save(NULL, 1, names, ts, 0, NULL), "the path is NULL");
    zl_tensor_release(t);
    CHECK(access(p, F_OK) != 0);
    CHECK(count_files(".tmp.") == 0);
}

/* ---- corrupt files: each one's message ---- */

/* Opening `header` + `data` must fail with a message that starts "<path>: "
 * and contains want. */
static void check_corrupt(const char *header, const void *data, size_t n, const char *want, int line)
{
    char p[512], prefix[600];
    zt_tmp_path(p, sizeof p, "corrupt.safetensors");
    write_st(p, header, data, n);
    snprintf(prefix, sizeof prefix, "%s: ", p);
    zl_clear_error();
    zl_safetensors *f = zl_safetensors_open(p);
    const char *msg = zl_last_error();
    if (f || strncmp(msg, prefix, strlen(prefix)) != 0 || !strstr(msg, want))
        zt_fail(__FILE__, line, "header %s: expected an error \"%s...%s\", got \"%s\"", header, prefix, want, msg);
    zl_safetensors_close(f);
}
#define CORRUPT(header, n, want) check_corrupt(header, data, n, want, __LINE__)

TEST(corrupt_json)
{
    unsigned char data[64] = {0};
    CORRUPT("", 8, "bad header at offset 8: the header must start with '{'");
    CORRUPT(" {}", 0, "bad header at offset 8: the header must start with '{'");
    CORRUPT("{\"a\" {}}", 0, "bad header at offset 13: expected ':', found '{'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "expected a tensor name (a string), found '}'");
    CORRUPT("{\"a", 0, "bad header at offset 11: unterminated string");
    CORRUPT("{\"a\tb\":{}}", 0, "bad header at offset 11: control character 0x09 inside a string (it must be escaped)");
    CORRUPT("{\"a\\x\":{}}", 0, "bad header at offset 12: invalid escape: a backslash followed by 'x'");
    CORRUPT("{\"a\\u12g4\":{}}", 0, "bad header at offset 12: \\u must be followed by 4 hex digits");
    CORRUPT("{\"a\\u0000\":{}}", 0, "\\u0000 (a NUL character) is not allowed");
    CORRUPT("{\"a\\udc00\":{}}", 0, "lone low surrogate \\udc00");
    CORRUPT("{\"a\\ud800x\":{}}", 0, "bad header at offset 17: high surrogate \\ud800 is not followed by a low one");
    CORRUPT("{\"a\xc0\xaf\":{}}", 0, "bad header at offset 11: invalid UTF-8 byte 0xc0 inside a string");
    CORRUPT("{\"a\xed\xa0\x80\":{}}", 0, "invalid UTF-8 byte 0xed");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "bad header at offset 37: size 1 of the shape has a leading zero: '02'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "size 1 of the shape must be a non-negative integer, got '-2'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "size 1 of the shape must be a non-negative integer, got '2.0'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e0]}}", 8, "the end of data_offsets must be a non-negative integer, got '8e0'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
            "size 1 of the shape is too large: '99999999999999999999'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
            "expected size 1 of the shape (a non-negative integer), found '\"'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "tensor 'a' has more than 8 dimensions");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, "expected ']' (data_offsets is [begin, end]), found ','");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1}}", 8,
            "tensor 'a' has an unknown key 'extra' (expected dtype, shape, data_offsets)");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "tensor 'a' has no 'shape'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a' has 'dtype' twice");
    CORRUPT("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a' has an unknown dtype 'Q4'");
    CORRUPT("{\"a\":[]}", 0, "expected '{' opening the tensor's entry, found '['");
    CORRUPT("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value of 'k' must be a string");
    CORRUPT("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "'__metadata__' appears twice");
    CORRUPT("{} x", 0, "bad header at offset 11: 'x' after the header's closing '}'");
    CORRUPT("{}\x01", 0, "byte 0x01 after the header's closing '}'");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "bad header at offset 61: expected ',' or '}', found the end of the header");
}

TEST(corrupt_layout)
{
    unsigned char data[64] = {0};
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a' has data_offsets [0, 8] (8 bytes), but F32 [2, 2] needs 16 bytes");
    CORRUPT("{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a' has data_offsets [0, 8] (8 bytes), but BF16 [3] needs 6 bytes");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
            "tensor 'a' has data_offsets [8, 0], which end before they begin");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
            "tensor 'a' has data_offsets [0, 16], out of range: the data holds 8 bytes");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a' has shape [4611686018427387904], too large to address");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16,
            "tensor 'b' (data_offsets [8, 16]) overlaps tensor 'a' (data_offsets [0, 16])");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 16,
            "tensor 'e' (data_offsets [4, 4]) overlaps tensor 'a' (data_offsets [0, 16])");
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
            "4 bytes at file offset 120 belong to no tensor (a gap before tensor 'b')");   /* 8 + 108 + 4 */
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12,
            "8 bytes at file offset 66, after the last tensor, belong to no tensor");   /* 8 + 54 + 4 */
    CORRUPT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
            "tensor 'a' appears twice in the header (at offsets 9 and 62)");
    CORRUPT("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "__metadata__ key 'k' appears twice");
}

TEST(corrupt_length_and_data)
{
    char p[512], want[1200];
    zt_tmp_path(p, sizeof p, "short.safetensors");
    zt_write_file(p, "\x10\0\0", 3);
    snprintf(want, sizeof want, "%s: 3 bytes is too short for a safetensors file", p);
    CHECK_ERR(zl_safetensors_open(p), want);

    /* A good file cut inside its header, then inside its data. */
    zl_tensor *t = zl_tensor_arange(ZL_DTYPE_F32, 16);
    const char *names[] = {"t"};
    CHECK(zl_safetensors_save(p, 1, names, &t, 0, NULL) == ZL_OK);
    zl_tensor_release(t);
    size_t n;
    unsigned char *whole = read_whole(p, &n);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | whole[k];
    zt_write_file(p, whole, 8 + hlen / 2);
    snprintf(want, sizeof want, "%s: the header length at offset 0 is %llu, larger than the rest of the file (%llu bytes)", p,
             (unsigned long long)hlen, (unsigned long long)(hlen / 2));
    CHECK_ERR(zl_safetensors_open(p), want);
    zt_write_file(p, whole, n - 10);
    snprintf(want, sizeof want, "%s: tensor 't' has data_offsets [0, 64], out of range: the data holds 54 bytes", p);
    CHECK_ERR(zl_safetensors_open(p), want);
    /* A length of 2^63 + 16 in an otherwise good file. */
    whole[7] = 0x80;
    zt_write_file(p, whole, n);
    CHECK_ERR(zl_safetensors_open(p), "the header length at offset 0 is 9223372036854775");
    free(whole);

    /* A length above the 100 MB limit in a sparse file large enough to hold it. */
    int fd = open(p, O_WRONLY | O_TRUNC);
    unsigned char len[8] = {0};
    uint64_t big = 150000000;
    for (int k = 0; k < 8; k++) len[k] = (unsigned char)(big >> (8 * k));
    CHECK(fd >= 0 && write(fd, len, 8) == 8 && ftruncate(fd, 200000000) == 0);
    if (fd >= 0) close(fd);
    snprintf(want, sizeof want, "%s: the header length at offset 0 is 150000000, above the limit of 100000000 bytes", p);
    CHECK_ERR(zl_safetensors_open(p), want);

    /* BOOL bytes other than 0 and 1 are rejected when read, naming the offset. */
    const char *header = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    write_st(p, header, "\1\0\2", 3);
    zl_safetensors *f = zl_safetensors_open(p);
    CHECK(f);
    snprintf(want, sizeof want, "%s: tensor 'm' holds 2 at file offset %d, which is not a BOOL (0 or 1)", p,
             (int)(8 + strlen(header) + 2));
    CHECK_ERR(zl_safetensors_read(f, "m", ZL_MEM_OTHER), want);
    zl_tensor *one = zl_tensor_new(ZL_DTYPE_BOOL, SHAPE(2), ZL_MEM_OTHER);
    CHECK(zl_safetensors_read_into(f, "m", 0, one) == ZL_OK);
    CHECK_ERR(zl_safetensors_read_into(f, "m", 1, one), want);
    zl_tensor_release(one);
    /* The file shrinks while open: the read names the offset where it ends. */
    CHECK(truncate(p, 8 + (off_t)strlen(header) + 1) == 0);
    snprintf(want, sizeof want, "%s: the file ends at offset %d, inside tensor 'm'", p, (int)(8 + strlen(header) + 1));
    CHECK_ERR(zl_safetensors_read(f, "m", ZL_MEM_OTHER), want);
    zl_safetensors_close(f);

    zt_tmp_path(p, sizeof p, "missing.safetensors");
    snprintf(want, sizeof want, "cannot open '%s': No such file or directory", p);
    CHECK_ERR(zl_safetensors_open(p), want);
    snprintf(want, sizeof want, "cannot read '%s': it is a folder, not a regular file", zt_tmp_dir());
    CHECK_ERR(zl_safetensors_open(zt_tmp_dir()), want);
    CHECK_ERR(zl_safetensors_open(NULL), "path is NULL");
    zl_safetensors_close(NULL);
}

/* ---- atomic writes ---- */

TEST(write_atomic_small_files)
{
    char p[512], want[1200];
    zt_tmp_path(p, sizeof p, "latest");
    CHECK(zl_file_write_atomic(p, "global_step50", 13) == ZL_OK);
    CHECK(zl_file_write_atomic(p, "global_step100\n", 15) == ZL_OK);
    size_t n;
    unsigned char *b = read_whole(p, &n);
    CHECK(n == 15 && b && memcmp(b, "global_step100\n", 15) == 0);
    free(b);
    struct stat sb;
    mode_t mask = umask(022);
    umask(mask);
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~mask));
    CHECK(zl_file_write_atomic(p, NULL, 0) == ZL_OK);
    CHECK(stat(p, &sb) == 0 && sb.st_size == 0);
    CHECK(count_files(".tmp.") == 0);

    zt_tmp_path(p, sizeof p, "no_such_dir/latest");
    snprintf(want, sizeof want, "cannot write '%s': cannot create the temporary file '%s.tmp.", p, p);
    CHECK_ERR(zl_file_write_atomic(p, "x", 1), want);
    CHECK(strstr(zl_last_error(), "': No such file or directory"));
    CHECK_ERR(zl_file_write_atomic("", "x", 1), "the path is empty");
}

/* The old file, byte for byte, and a model to overwrite it with. */
static unsigned char *old_bytes;
static size_t old_n;

static void write_old(const char *p)
{
    zl_tensor *t = zl_tensor_arange(ZL_DTYPE_F32, 100);
    const char *names[] = {"old"};
    CHECK(zl_safetensors_save(p, 1, names, &t, 0, NULL) == ZL_OK);
    zl_tensor_release(t);
    free(old_bytes);
    old_bytes = read_whole(p, &old_n);
}

static bool old_intact(const char *p)
{
    size_t n;
    unsigned char *b = read_whole(p, &n);
    bool same = b && n == old_n && memcmp(b, old_bytes, n) == 0;
    free(b);
    zl_safetensors *f = zl_safetensors_open(p);
    zl_tensor *t = f ? zl_safetensors_read(f, "old", ZL_MEM_OTHER) : NULL;
    same = same && t && zl_tensor_numel(t) == 100 && zl_tensor_get(t, 99) == 99;
    zl_tensor_release(t);
    zl_safetensors_close(f);
    return same;
}

static zl_status save_big(const char *p, int64_t numel)
{
    zl_tensor *t = zl_tensor_full(ZL_DTYPE_F32, SHAPE(numel), 1.0);
    const char *names[] = {"big"};
    zl_status st = zl_safetensors_save(p, 1, names, &t, 0, NULL);
    zl_tensor_release(t);
    return st;
}

/* A write the kernel refuses (file size limit: EFBIG, as a full disk gives
 * ENOSPC) removes the temporary and leaves the old file. */
TEST(failed_write_keeps_old_file)
{
    char p[512], want[1200];
    zt_tmp_path(p, sizeof p, "model.safetensors");
    write_old(p);
    struct rlimit old_lim, lim;
    getrlimit(RLIMIT_FSIZE, &old_lim);
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old_lim;
    lim.rlim_cur = 4096;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    zl_status st = save_big(p, 1 << 16);
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_sig);
    CHECK(st == ZL_EIO);
    snprintf(want, sizeof want, "cannot write '%s': File too large at byte 4096 of the temporary '%s.tmp.", p, p);
    CHECK(strstr(zl_last_error(), want));
    snprintf(want, sizeof want, "(removed; '%s' is unchanged)", p);
    CHECK(strstr(zl_last_error(), want));
    CHECK(old_intact(p));
    CHECK(count_files(".tmp.") == 0);

    /* Ctrl-C during a write: interrupted, the old file stays. */
    zl_interrupt_set(1);
    st = save_big(p, 1 << 10);
    zl_interrupt_set(0);
    CHECK(st == ZL_EINTERRUPT && strstr(zl_last_error(), "interrupted"));
    CHECK(old_intact(p));
    CHECK(count_files(".tmp.") == 0);
}

/* A full filesystem: a 256 KiB tmpfs mounted in a private mount namespace of
 * a child process. Skipped (with a note) where mounting is not permitted. */
TEST(full_disk_keeps_old_file)
{
    char dir[512], p[600];
    zt_tmp_path(dir, sizeof dir, "tmpfs");
    if (mkdir(dir, 0700) != 0) { zt_fail(__FILE__, __LINE__, "cannot create %s", dir); return; }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", dir, "tmpfs", 0, "size=256k") != 0)
            _exit(77);
        write_old(p);
        zl_status st = save_big(p, 1 << 17);   /* 512 KiB */
        char want[1200];
        snprintf(want, sizeof want, "cannot write '%s': No space left on device at byte ", p);
        bool ok = st == ZL_EIO && strstr(zl_last_error(), want) && old_intact(p);
        DIR *d = opendir(dir);
        int files = 0;
        for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
        if (d) closedir(d);
        if (!ok || files != 1) fprintf(stderr, "  full disk: status %d, %d files, error: %s\n", st, files, zl_last_error());
        _exit(ok && files == 1 ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        zt_skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        return;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* SIGKILL in the middle of a write, at a known point (half the data written)
 * and at a random one (a child saving in a loop): the file always loads, as
 * the old version or a complete new one. */
TEST(sigkill_mid_write)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "ckpt.safetensors");
    write_old(p);
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        zl_safetensors_entry e = {.name = "big", .dtype = ZL_DTYPE_F32, .ndim = 1, .shape = {1 << 20}};
        zl_safetensors_writer *w = zl_safetensors_writer_open(p, 1, &e, 0, NULL);
        zl_tensor *half = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1 << 19), 3.0);
        if (!w || zl_safetensors_writer_append(w, half)) _exit(1);
        if (write(fds[1], "x", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c;
    CHECK(pid > 0 && read(fds[0], &c, 1) == 1);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(fds[0]);
    close(fds[1]);
    CHECK(old_intact(p));
    CHECK(count_files(".tmp.") == 1);   /* a crash leaves its temporary behind */
    zt_tmp_reset();

    zt_tmp_path(p, sizeof p, "ckpt.safetensors");
    write_old(p);
    fflush(NULL);
    pid = fork();
    if (pid == 0)
        for (int64_t k = 0;; k++) save_big(p, (1 << 18) + k);
    usleep(150000);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    zl_safetensors *f = zl_safetensors_open(p);
    CHECK(f);
    const zl_safetensors_entry *e = f ? zl_safetensors_entry_at(f, 0) : NULL;
    CHECK(e && (strcmp(e->name, "old") == 0 || strcmp(e->name, "big") == 0));
    zl_tensor *t = e ? zl_safetensors_read(f, e->name, ZL_MEM_OTHER) : NULL;
    CHECK(t && zl_tensor_get(t, zl_tensor_numel(t) - 1) == (strcmp(e->name, "old") == 0 ? 99 : 1));
    zl_tensor_release(t);
    zl_safetensors_close(f);
    free(old_bytes);
    old_bytes = NULL;
}
