/* Dataset readers: idx (every dtype code), CIFAR-10 batches, token files and
 * byte-level text, each written here in its exact format, plain and gzipped,
 * read back value by value; and every bad file's message (file and offset):
 * truncated, trailing, corrupt, cut gzip, missing, directory, empty, garbage. */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>
#include "harness.h"

static void write_gz(const char *path, const void *data, size_t n)
{
    gzFile g = gzopen(path, "wb");
    if (!g || (n && gzwrite(g, data, (unsigned)n) != (int)n)) zt_fail(__FILE__, __LINE__, "cannot write %s", path);
    if (g) gzclose(g);
}

/* The bytes of a file written by write_gz, to damage. */
static unsigned char *read_whole(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* Writes `name` plain and `name`.gz with the same content; paths into p and pg. */
static void write_both(char *p, char *pg, const char *name, const void *data, size_t n)
{
    char gzname[128];
    snprintf(gzname, sizeof gzname, "%s.gz", name);
    zt_tmp_path(p, 512, name);
    zt_tmp_path(pg, 512, gzname);
    zt_write_file(p, data, n);
    write_gz(pg, data, n);
}

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static bool same_shape(const zl_tensor *t, zl_dtype dt, int ndim, const int64_t *shape)
{
    if (!t || zl_tensor_dtype(t) != dt || zl_tensor_ndim(t) != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (zl_tensor_size(t, d) != shape[d]) return false;
    return true;
}

/* Every element of t (read as f64 through the public API) against want. */
static void check_all(const zl_tensor *t, const double *want, int64_t n, int line)
{
    if (!t || zl_tensor_numel(t) != n) {
        zt_fail(__FILE__, line, "no tensor or wrong size; last error: %s", zl_last_error());
        return;
    }
    double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
    zl_tensor_to_f64(t, got);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i] && !(isnan(got[i]) && isnan(want[i]))) {
            if (first < 0) first = i;
            bad++;
        }
    if (bad)
        zt_fail(__FILE__, line, "%lld of %lld values differ; first at %lld: %.17g, expected %.17g", (long long)bad,
                (long long)n, (long long)first, got[first], want[first]);
    free(got);
}

/* ---- idx ---- */

/* An idx header: 00 00 code ndim, then big-endian u32 dims. Returns its length. */
static size_t idx_header(unsigned char *out, int code, int ndim, const uint32_t *dims)
{
    out[0] = out[1] = 0;
    out[2] = (unsigned char)code;
    out[3] = (unsigned char)ndim;
    for (int d = 0; d < ndim; d++)
        for (int b = 0; b < 4; b++) out[4 + 4 * d + b] = (unsigned char)(dims[d] >> (24 - 8 * b));
    return 4 + 4 * (size_t)ndim;
}

static void put_be(unsigned char *p, uint64_t v, int nbytes)
{
    for (int b = 0; b < nbytes; b++) p[b] = (unsigned char)(v >> (8 * (nbytes - 1 - b)));
}

/* MNIST-shaped files of random bytes: labels [N] and images [N, 28, 28]. */
TEST(idx_mnist_u8)
{
    enum { N = 60 };
    unsigned char *buf = malloc(16 + N * 28 * 28);
    double *want = malloc(sizeof(double) * N * 28 * 28);
    char p[512], pg[512];

    size_t h = idx_header(buf, 0x08, 1, (uint32_t[]){N});
    for (int i = 0; i < N; i++) want[i] = buf[h + i] = (unsigned char)(rnd() % 10);
    write_both(p, pg, "labels-idx1-ubyte", buf, h + N);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_U8, 1, (int64_t[]){N}));
        check_all(t, want, N, __LINE__);
        zl_tensor_release(t);
    }

    h = idx_header(buf, 0x08, 3, (uint32_t[]){N, 28, 28});
    CHECK(h == 16);
    for (int i = 0; i < N * 28 * 28; i++) want[i] = buf[h + i] = (unsigned char)rnd();
    write_both(p, pg, "images-idx3-ubyte", buf, h + N * 28 * 28);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_U8, 3, (int64_t[]){N, 28, 28}));
        check_all(t, want, N * 28 * 28, __LINE__);
        zl_tensor_release(t);
    }
    free(buf);
    free(want);
}

/* Every other idx dtype code, with values at the edges of each type. */
TEST(idx_dtypes)
{
    unsigned char buf[512];
    double want[64];
    char p[512], pg[512];

    /* 0x09 signed byte -> i32 */
    size_t h = idx_header(buf, 0x09, 2, (uint32_t[]){2, 3});
    const int8_t i8[6] = {0, 1, -1, 127, -128, -77};
    for (int i = 0; i < 6; i++) { buf[h + i] = (unsigned char)i8[i]; want[i] = i8[i]; }
    write_both(p, pg, "i8.idx", buf, h + 6);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_I32, 2, (int64_t[]){2, 3}));
        check_all(t, want, 6, __LINE__);
        zl_tensor_release(t);
    }

    /* 0x0B i16 -> i32 */
    h = idx_header(buf, 0x0B, 1, (uint32_t[]){5});
    const int16_t i16[5] = {0, -1, 32767, -32768, 258};
    for (int i = 0; i < 5; i++) { put_be(buf + h + 2 * i, (uint16_t)i16[i], 2); want[i] = i16[i]; }
    write_both(p, pg, "i16.idx", buf, h + 10);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_I32, 1, (int64_t[]){5}));
        check_all(t, want, 5, __LINE__);
        zl_tensor_release(t);
    }

    /* 0x0C i32 */
    h = idx_header(buf, 0x0C, 3, (uint32_t[]){1, 2, 3});
    const int32_t i32[6] = {0, -1, INT32_MAX, INT32_MIN, 16909060, -305419896};
    for (int i = 0; i < 6; i++) { put_be(buf + h + 4 * i, (uint32_t)i32[i], 4); want[i] = i32[i]; }
    write_both(p, pg, "i32.idx", buf, h + 24);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_I32, 3, (int64_t[]){1, 2, 3}));
        check_all(t, want, 6, __LINE__);
        zl_tensor_release(t);
    }

    /* 0x0D f32, bit for bit */
    h = idx_header(buf, 0x0D, 1, (uint32_t[]){7});
    const float f32[7] = {0.0f, -0.0f, 1.5f, -3.25e-38f, 3.4028235e38f, 1e-45f, (float)INFINITY};
    for (int i = 0; i < 7; i++) {
        uint32_t u;
        memcpy(&u, &f32[i], 4);
        put_be(buf + h + 4 * i, u, 4);
        want[i] = f32[i];
    }
    write_both(p, pg, "f32.idx", buf, h + 28);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_F32, 1, (int64_t[]){7}));
        check_all(t, want, 7, __LINE__);
        if (t) CHECK(signbit(((float *)zl_tensor_data(t))[1]));
        zl_tensor_release(t);
    }

    /* 0x0E f64 -> f32, rounded to nearest */
    h = idx_header(buf, 0x0E, 2, (uint32_t[]){2, 2});
    const double f64[4] = {0.1, -2.0 / 3.0, 1e300, 123456789.123};
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        memcpy(&u, &f64[i], 8);
        put_be(buf + h + 8 * i, u, 8);
        want[i] = (float)f64[i];
    }
    write_both(p, pg, "f64.idx", buf, h + 32);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_idx(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_F32, 2, (int64_t[]){2, 2}));
        check_all(t, want, 4, __LINE__);
        zl_tensor_release(t);
    }

    /* A zero dim: an empty tensor of that shape, and eight dims, the most a tensor has. */
    h = idx_header(buf, 0x08, 2, (uint32_t[]){0, 28});
    write_both(p, pg, "zero.idx", buf, h);
    zl_tensor *t = zl_read_idx(pg);
    CHECK(same_shape(t, ZL_DTYPE_U8, 2, (int64_t[]){0, 28}));
    zl_tensor_release(t);
    h = idx_header(buf, 0x08, 8, (uint32_t[]){1, 2, 1, 2, 1, 2, 1, 3});
    for (int i = 0; i < 24; i++) want[i] = buf[h + i] = (unsigned char)(200 + i);
    write_both(p, pg, "eight.idx", buf, h + 24);
    t = zl_read_idx(p);
    CHECK(same_shape(t, ZL_DTYPE_U8, 8, (int64_t[]){1, 2, 1, 2, 1, 2, 1, 3}));
    check_all(t, want, 24, __LINE__);
    zl_tensor_release(t);
}

/* Each damaged header field and each wrong data length, plain and gzipped:
 * the offsets count uncompressed bytes, so both give the same message. */
TEST(idx_bad_files)
{
    unsigned char buf[256] = {0};
    char p[512], pg[512], want[700];
    size_t h = idx_header(buf, 0x0C, 2, (uint32_t[]){3, 4});   /* 48 bytes of data */
    const char *name[2] = {p, pg};

    write_both(p, pg, "short.idx", buf, h + 47);
    for (int k = 0; k < 2; k++) {
        snprintf(want, sizeof want, "%s: truncated at offset 59 (expected 48 bytes of data)", name[k]);
        zl_tensor *t;
        CHECK_ERR(t = zl_read_idx(name[k]), want);
        CHECK(t == NULL);
    }
    write_both(p, pg, "long.idx", buf, h + 49);
    for (int k = 0; k < 2; k++) {
        snprintf(want, sizeof want, "%s: trailing data at offset 60 (dims [3, 4] give 48 bytes of data)", name[k]);
        CHECK_ERR(zl_read_idx(name[k]), want);
    }
    write_both(p, pg, "nodata.idx", buf, h);
    snprintf(want, sizeof want, "%s: truncated at offset 12 (expected 48 bytes of data)", pg);
    CHECK_ERR(zl_read_idx(pg), want);
    write_both(p, pg, "cut_dims.idx", buf, 9);
    snprintf(want, sizeof want, "%s: truncated at offset 9 (expected 8 bytes of idx dims)", p);
    CHECK_ERR(zl_read_idx(p), want);
    write_both(p, pg, "cut_magic.idx", buf, 3);
    snprintf(want, sizeof want, "%s: truncated at offset 3 (expected 4 bytes of idx header)", pg);
    CHECK_ERR(zl_read_idx(pg), want);

    unsigned char bad[16];
    memcpy(bad, buf, 16);
    bad[1] = 0x08;
    write_both(p, pg, "magic.idx", bad, 16);
    snprintf(want, sizeof want, "%s: not an idx file: bytes 0x00 0x08 at offset 0, expected 0x00 0x00", p);
    CHECK_ERR(zl_read_idx(p), want);
    memcpy(bad, buf, 16);
    bad[2] = 0x0A;
    write_both(p, pg, "code.idx", bad, 16);
    snprintf(want, sizeof want,
             "%s: unknown idx dtype code 0x0a at offset 2 (expected 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)", pg);
    CHECK_ERR(zl_read_idx(pg), want);
    memcpy(bad, buf, 16);
    bad[3] = 0;
    write_both(p, pg, "ndim0.idx", bad, 16);
    snprintf(want, sizeof want, "%s: idx header gives 0 dims at offset 3, expected 1 to 8", p);
    CHECK_ERR(zl_read_idx(p), want);
    bad[3] = 9;
    zt_write_file(p, bad, 16);
    CHECK_ERR(zl_read_idx(p), "idx header gives 9 dims at offset 3, expected 1 to 8");

    /* Dims whose product overflows, and dims claiming gigabytes that a small
     * file (plain or gzip) does not hold: an error, never a huge allocation. */
    h = idx_header(buf, 0x0E, 3, (uint32_t[]){0xffffffffu, 0xffffffffu, 0xffffffffu});
    write_both(p, pg, "huge.idx", buf, h + 8);
    snprintf(want, sizeof want,
             "%s: idx dims [4294967295, 4294967295, 4294967295] at offset 4 give more data than memory can hold", p);
    CHECK_ERR(zl_read_idx(p), want);
    h = idx_header(buf, 0x08, 2, (uint32_t[]){60000, 60000});
    write_both(p, pg, "big.idx", buf, h + 100);
    for (int k = 0; k < 2; k++) {
        snprintf(want, sizeof want, "%s: truncated at offset 112 (expected 3600000000 bytes of data)", name[k]);
        CHECK_ERR(zl_read_idx(name[k]), want);
    }
}

/* ---- CIFAR-10 ---- */

enum { REC = 3073 };

/* n records with random pixels and labels 0..9. */
static unsigned char *cifar_records(int n)
{
    unsigned char *b = malloc((size_t)n * REC + 200);
    for (int r = 0; r < n; r++) {
        b[(size_t)r * REC] = (unsigned char)(rnd() % 10);
        for (int i = 1; i < REC; i++) b[(size_t)r * REC + i] = (unsigned char)rnd();
    }
    return b;
}

TEST(cifar10_values)
{
    enum { N = 23 };
    unsigned char *recs = cifar_records(N);
    recs[0] = 0;
    recs[REC] = 9;
    double *img_want = malloc(sizeof(double) * N * 3072);
    double lab_want[N];
    /* Record r is label, then planes c, rows y, columns x: image [r, c, y, x]. */
    for (int r = 0; r < N; r++) {
        lab_want[r] = recs[r * REC];
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    img_want[((r * 3 + c) * 32 + y) * 32 + x] = recs[r * REC + 1 + c * 1024 + y * 32 + x];
    }
    char p[512], pg[512];
    write_both(p, pg, "data_batch_1.bin", recs, (size_t)N * REC);
    for (int k = 0; k < 2; k++) {
        zl_tensor *img = NULL, *lab = NULL;
        CHECK(zl_read_cifar10(k ? pg : p, &img, &lab) == ZL_OK);
        CHECK(same_shape(img, ZL_DTYPE_U8, 4, (int64_t[]){N, 3, 32, 32}));
        CHECK(same_shape(lab, ZL_DTYPE_I64, 1, (int64_t[]){N}));
        check_all(img, img_want, N * 3072, __LINE__);
        check_all(lab, lab_want, N, __LINE__);
        zl_tensor_release(img);
        zl_tensor_release(lab);
    }
    free(recs);
    free(img_want);
}

TEST(cifar10_bad_files)
{
    enum { N = 5 };
    unsigned char *recs = cifar_records(N);
    char p[512], pg[512], want[700];
    const char *name[2] = {p, pg};
    zl_tensor *img = (zl_tensor *)1, *lab = (zl_tensor *)1;

    /* A partial sixth record of 100 bytes starts where five whole ones end. */
    write_both(p, pg, "partial.bin", recs, (size_t)N * REC + 100);
    for (int k = 0; k < 2; k++) {
        snprintf(want, sizeof want,
                 "%s: 15465 bytes is not a whole number of 3073-byte CIFAR-10 records: "
                 "a partial record 5 starts at offset 15365", name[k]);
        zl_status st;
        CHECK_ERR(st = zl_read_cifar10(name[k], &img, &lab), want);
        CHECK(st == ZL_EFORMAT && img == NULL && lab == NULL);
    }
    write_both(p, pg, "short.bin", recs, 3000);
    CHECK_ERR(zl_read_cifar10(pg, &img, &lab), "a partial record 0 starts at offset 0");

    recs[3 * REC] = 10;
    write_both(p, pg, "label.bin", recs, (size_t)N * REC);
    for (int k = 0; k < 2; k++) {
        snprintf(want, sizeof want, "%s: record 3 at offset 9219 has label 10, expected 0..9", name[k]);
        CHECK_ERR(zl_read_cifar10(name[k], &img, &lab), want);
        CHECK(img == NULL && lab == NULL);
    }
    write_both(p, pg, "empty.bin", recs, 0);
    for (int k = 0; k < 2; k++) {
        snprintf(want, sizeof want, "%s: the file is empty", name[k]);
        CHECK_ERR(zl_read_cifar10(name[k], &img, &lab), want);
    }
    CHECK_ERR(zl_read_cifar10(p, NULL, &lab), "read_cifar10: images and labels must not be NULL");
    free(recs);
}

/* ---- tokens ---- */

TEST(tokens_u16_u32)
{
    enum { N = 5000 };
    unsigned char *b = malloc(4 * N + 3);
    double *want = malloc(sizeof(double) * N);
    char p[512], pg[512];
    for (int i = 0; i < N; i++) {
        uint32_t v = i == 0 ? 0 : i == 1 ? 65535 : i == 2 ? 50256 : rnd() & 0xffff;
        b[2 * i] = (unsigned char)v;
        b[2 * i + 1] = (unsigned char)(v >> 8);
        want[i] = v;
    }
    write_both(p, pg, "tok16.bin", b, 2 * N);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_tokens(k ? pg : p, 2);
        CHECK(same_shape(t, ZL_DTYPE_I64, 1, (int64_t[]){N}));
        check_all(t, want, N, __LINE__);
        zl_tensor_release(t);
    }
    for (int i = 0; i < N; i++) {
        uint32_t v = i == 0 ? 0xffffffffu : i == 1 ? 0x80000000u : rnd() ^ rnd() << 16;
        for (int j = 0; j < 4; j++) b[4 * i + j] = (unsigned char)(v >> (8 * j));
        want[i] = v;
    }
    write_both(p, pg, "tok32.bin", b, 4 * N);
    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_tokens(k ? pg : p, 4);
        CHECK(same_shape(t, ZL_DTYPE_I64, 1, (int64_t[]){N}));
        check_all(t, want, N, __LINE__);
        zl_tensor_release(t);
    }
    free(b);
    free(want);
}

TEST(tokens_bad_files)
{
    unsigned char b[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    char p[512], pg[512], want[700];
    write_both(p, pg, "odd.bin", b, 11);
    snprintf(want, sizeof want,
             "%s: 11 bytes is not a whole number of 2-byte tokens: a partial token starts at offset 10", p);
    zl_tensor *t;
    CHECK_ERR(t = zl_read_tokens(p, 2), want);
    CHECK(t == NULL);
    snprintf(want, sizeof want,
             "%s: 11 bytes is not a whole number of 4-byte tokens: a partial token starts at offset 8", pg);
    CHECK_ERR(zl_read_tokens(pg, 4), want);
    write_both(p, pg, "empty.bin", b, 0);
    snprintf(want, sizeof want, "%s: the file is empty", pg);
    CHECK_ERR(zl_read_tokens(pg, 2), want);
    CHECK_ERR(zl_read_tokens(p, 3), "read_tokens: bytes_per_token must be 2 (uint16) or 4 (uint32), got 3");
}

/* ---- text ---- */

TEST(text_vocab_encode)
{
    /* ASCII, a UTF-8 letter (two bytes), a NUL and 0xff: bytes, not characters. */
    const unsigned char text[] = "hello, w\xc3\xa9rld!\n\x00\xff zz";
    size_t n = sizeof text - 1;
    char p[512], pg[512];
    write_both(p, pg, "input.txt", text, n);

    /* The vocabulary written independently: which byte values occur, ascending. */
    int present[256] = {0};
    for (size_t i = 0; i < n; i++) present[text[i]] = 1;
    uint8_t want_vocab[256];
    int want_size = 0;
    for (int b = 0; b < 256; b++)
        if (present[b]) want_vocab[want_size++] = (uint8_t)b;

    for (int k = 0; k < 2; k++) {
        zl_tensor *t = zl_read_text(k ? pg : p);
        CHECK(same_shape(t, ZL_DTYPE_U8, 1, (int64_t[]){(int64_t)n}));
        if (!t) continue;
        CHECK(memcmp(zl_tensor_data(t), text, n) == 0);
        uint8_t vocab[256];
        int size = -1;
        CHECK(zl_text_vocab(t, vocab, &size) == ZL_OK);
        CHECK(size == want_size && memcmp(vocab, want_vocab, (size_t)want_size) == 0);
        zl_tensor *ids = zl_text_encode(t, vocab, size);
        CHECK(same_shape(ids, ZL_DTYPE_I64, 1, (int64_t[]){(int64_t)n}));
        if (ids) {
            const int64_t *id = zl_tensor_data(ids);
            int64_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += id[i] < 0 || id[i] >= size || vocab[id[i]] != text[i];
            CHECK(bad == 0);
            CHECK(id[0] > id[1]);   /* 'h' comes after 'e': ids follow byte order */
        }
        zl_tensor_release(ids);
        zl_tensor_release(t);
    }
    CHECK(want_vocab[0] == 0 && want_vocab[want_size - 1] == 0xff);
}

/* Encoding reads the text in logical order whatever its layout, keeps its
 * shape, and names the offset of a byte the vocabulary lacks. */
TEST(text_encode_views_and_errors)
{
    zl_tensor *t = zl_tensor_from_data(ZL_DTYPE_U8, 2, (int64_t[]){2, 3}, "abcdef");
    zl_tensor *tt = zl_tensor_transpose(t, 0, 1);   /* a d / b e / c f */
    const uint8_t vocab[6] = {'a', 'b', 'c', 'd', 'e', 'f'};
    zl_tensor *ids = zl_text_encode(tt, vocab, 6);
    CHECK(same_shape(ids, ZL_DTYPE_I64, 2, (int64_t[]){3, 2}));
    check_all(ids, (double[]){0, 3, 1, 4, 2, 5}, 6, __LINE__);
    zl_tensor_release(ids);

    zl_tensor *r;
    CHECK_ERR(r = zl_text_encode(tt, vocab, 4),
              "text_encode: byte 0x65 at offset 3 is not in the vocabulary of 4 bytes");
    CHECK(r == NULL);
    CHECK_ERR(zl_text_encode(t, (const uint8_t *)"abca", 4),
              "text_encode: byte 0x61 is in the vocabulary twice (ids 0 and 3)");
    CHECK_ERR(zl_text_encode(t, vocab, 257), "text_encode: vocab_size must be 0..256 with a vocab, got 257");
    CHECK_ERR(zl_text_encode(t, NULL, 3), "got 3 and a NULL vocab");
    zl_tensor *f = zl_tensor_zeros(ZL_DTYPE_F32, 1, (int64_t[]){4});
    uint8_t v[256];
    int size;
    CHECK_ERR(zl_text_vocab(f, v, &size), "text_vocab: text must be a u8 CPU tensor, got f32 [4] on cpu");
    CHECK_ERR(zl_text_encode(f, vocab, 6), "text_encode: text must be a u8 CPU tensor, got f32 [4] on cpu");
    CHECK_ERR(zl_text_vocab(NULL, v, &size), "text_vocab: text is NULL");
    CHECK_ERR(zl_text_vocab(t, NULL, &size), "text_vocab: vocab and vocab_size must not be NULL");
    CHECK(zl_text_vocab(tt, v, &size) == ZL_OK && size == 6 && memcmp(v, vocab, 6) == 0);

    char p[512], want[700];
    zt_tmp_path(p, sizeof p, "empty.txt");
    zt_write_file(p, "", 0);
    snprintf(want, sizeof want, "%s: the file is empty", p);
    CHECK_ERR(zl_read_text(p), want);
    zl_tensor_release(f);
    zl_tensor_release(tt);
    zl_tensor_release(t);
}

/* ---- what every reader shares ---- */

TEST(missing_directory_null)
{
    char p[512], want[700];
    zt_tmp_path(p, sizeof p, "no_such_file");
    snprintf(want, sizeof want, "cannot open '%s': No such file or directory", p);
    zl_tensor *img, *lab;
    CHECK_ERR(zl_read_idx(p), want);
    CHECK_ERR(zl_read_tokens(p, 2), want);
    CHECK_ERR(zl_read_text(p), want);
    zl_status st;
    CHECK_ERR(st = zl_read_cifar10(p, &img, &lab), want);
    CHECK(st == ZL_EIO);
    snprintf(want, sizeof want, "cannot read '%s': it is a folder, not a regular file", zt_tmp_dir());
    CHECK_ERR(zl_read_idx(zt_tmp_dir()), want);
    CHECK_ERR(zl_read_tokens(zt_tmp_dir(), 4), want);
    CHECK_ERR(zl_read_text(zt_tmp_dir()), want);
    CHECK_ERR(zl_read_cifar10(zt_tmp_dir(), &img, &lab), want);
    CHECK_ERR(zl_read_idx(NULL), "read_idx: path is NULL");
    CHECK_ERR(zl_read_text(NULL), "read_text: path is NULL");
    zt_tmp_path(p, sizeof p, "empty.idx");
    zt_write_file(p, "", 0);
    snprintf(want, sizeof want, "%s: the file is empty", p);
    CHECK_ERR(zl_read_idx(p), want);
}

/* A gzip stream cut short or damaged: the message names the file and how far
 * the uncompressed content got. */
TEST(corrupt_gzip)
{
    enum { N = 40 };
    unsigned char *recs = cifar_records(N);
    char p[512], pg[512];
    write_both(p, pg, "cut.bin", recs, (size_t)N * REC);
    size_t n;
    unsigned char *z = read_whole(pg, &n);
    CHECK(z && n > 1000);
    if (!z) return;
    zt_write_file(pg, z, n / 2);
    zl_tensor *img, *lab;
    char want[700];
    snprintf(want, sizeof want, "%s: corrupt gzip stream near uncompressed offset ", pg);
    CHECK_ERR(zl_read_cifar10(pg, &img, &lab), want);
    CHECK(strstr(zl_last_error(), ": unexpected end of file"));
    long long at = -1;
    sscanf(zl_last_error() + strlen(want), "%lld", &at);
    CHECK(at > 0 && at < (long long)N * REC);

    z[10] = 0xff;   /* the first deflate block's header: block type 3 does not exist */
    zt_write_file(pg, z, n);
    CHECK_ERR(zl_read_tokens(pg, 2), "corrupt gzip stream near uncompressed offset 0: invalid block type");
    free(z);
    free(recs);
}

/* Random bytes, with and without a plausible start, plain and gzipped: every
 * reader returns an error or a tensor, and never reads out of bounds. */
TEST(garbage)
{
    unsigned char b[4096];
    char p[512], pg[512];
    for (int trial = 0; trial < 60; trial++) {
        size_t n = trial < 10 ? (size_t)trial : rnd() % sizeof b;
        for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd();
        if (trial % 3 == 1 && n >= 4) {
            b[0] = b[1] = 0;
            b[2] = (unsigned char)(0x08 + rnd() % 7);
            b[3] = (unsigned char)(rnd() % 4);
        }
        if (trial % 3 == 2 && n >= 2) {
            b[0] = 0x1f;
            b[1] = 0x8b;
        }
        write_both(p, pg, "garbage", b, n);
        for (int k = 0; k < 2; k++) {
            const char *path = k ? pg : p;
            zl_tensor *t, *img, *lab;
            zl_clear_error();
            t = zl_read_idx(path);
            CHECK(t || strstr(zl_last_error(), path));
            zl_tensor_release(t);
            zl_clear_error();
            t = zl_read_tokens(path, 4);
            CHECK(t || strstr(zl_last_error(), path));
            zl_tensor_release(t);
            zl_clear_error();
            if (zl_read_cifar10(path, &img, &lab) == ZL_OK) {
                zl_tensor_release(img);
                zl_tensor_release(lab);
            } else {
                CHECK(strstr(zl_last_error(), path));
            }
            zl_clear_error();
            t = zl_read_text(path);
            CHECK(t || strstr(zl_last_error(), path));
            zl_tensor_release(t);
        }
    }
}

/* A failed allocation leaves nothing behind: not the images when the labels fail. */
TEST(out_of_memory)
{
    unsigned char *recs = cifar_records(3);
    char p[512], pg[512];
    write_both(p, pg, "oom.bin", recs, 3 * REC);
    int64_t before = zl_mem_stats_of(ZL_MEM_OTHER).current;
    zl_tensor *img = (zl_tensor *)1, *lab = (zl_tensor *)1;
    zl_mem_fail_after(2);
    zl_status st;
    CHECK_ERR(st = zl_read_cifar10(p, &img, &lab), "out of memory");
    CHECK(st == ZL_ENOMEM && img == NULL && lab == NULL);
    CHECK(zl_mem_stats_of(ZL_MEM_OTHER).current == before);
    zl_mem_fail_after(1);
    CHECK_ERR(zl_read_text(pg), "out of memory");
    zt_tmp_path(p, sizeof p, "oom.tok");
    zt_write_file(p, recs, 8);
    zl_mem_fail_after(1);
    CHECK_ERR(zl_read_tokens(p, 2), "out of memory");
    zt_tmp_path(p, sizeof p, "oom.idx");
    unsigned char idx[12];
    zt_write_file(p, idx, idx_header(idx, 0x08, 1, (uint32_t[]){4}) + 4);
    zl_mem_fail_after(1);
    CHECK_ERR(zl_read_idx(p), "out of memory");
    zl_mem_fail_after(0);
    free(recs);
}
