/* Data readers: zl_read_csv on plain and gzipped files written here (values
 * against the numbers written, chunk boundaries, headers, CRLF), and every bad
 * file's message: missing, directory, truncated or corrupt gzip, bad number,
 * ragged row, empty, out of range, binary. */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>
#include "harness.h"

static void write_gz(const char *path, const char *text)
{
    gzFile g = gzopen(path, "wb");
    if (!g || gzwrite(g, text, (unsigned)strlen(text)) != (int)strlen(text))
        zt_fail(__FILE__, __LINE__, "cannot write %s", path);
    if (g) gzclose(g);
}

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

static void check_values(zl_tensor *t, int64_t rows, int64_t cols, const float *want)
{
    CHECK(t);
    if (!t) return;
    CHECK(zl_tensor_dtype(t) == ZL_DTYPE_F32 && zl_tensor_ndim(t) == 2);
    CHECK(zl_tensor_size(t, 0) == rows && zl_tensor_size(t, 1) == cols);
    if (zl_tensor_numel(t) != rows * cols) return;
    const float *got = zl_tensor_data(t);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * cols; i++) bad += got[i] != want[i];
    if (bad) zt_fail(__FILE__, __LINE__, "%lld of %lld values differ", (long long)bad, (long long)(rows * cols));
}

TEST(plain_small)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "small.csv");
    const char *text = "1,2.5,-3\n 4 , 5e-1 ,6\r\n\n7,8,9";   /* spaces, CRLF, a blank line, no final newline */
    zt_write_file(p, text, strlen(text));
    zl_tensor *t = zl_read_csv(p, false);
    check_values(t, 3, 3, (float[]){1, 2.5f, -3, 4, 0.5f, 6, 7, 8, 9});
    zl_tensor_release(t);

    zt_tmp_path(p, sizeof p, "header.csv");
    text = "a,b\n1,2\n3,4\n";
    zt_write_file(p, text, strlen(text));
    t = zl_read_csv(p, true);
    check_values(t, 2, 2, (float[]){1, 2, 3, 4});
    zl_tensor_release(t);
    CHECK_ERR(zl_read_csv(p, false), ":1: field 1 is not a number: 'a'");
}

/* Many rows of random values, so lines straddle the reader's 64 KiB chunks;
 * the same text read plain and gzipped must give exactly the numbers written. */
TEST(large_plain_and_gzip)
{
    enum { ROWS = 3000, COLS = 33 };
    float *want = malloc(sizeof(float) * ROWS * COLS);
    char *text = malloc((size_t)ROWS * COLS * 20 + 1);
    size_t len = 0;
    srand(7);
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            float v = (float)((rand() / (double)RAND_MAX - 0.5) * 2000.0);
            if (j == 0) v = (float)(i % 10);
            want[i * COLS + j] = v;
            len += (size_t)sprintf(text + len, "%.9g%c", v, j == COLS - 1 ? '\n' : ',');
        }
    CHECK(len > 3 * 65536);
    char p[512], pg[512];
    zt_tmp_path(p, sizeof p, "large.csv");
    zt_tmp_path(pg, sizeof pg, "large.csv.gz");
    zt_write_file(p, text, len);
    write_gz(pg, text);
    zl_tensor *a = zl_read_csv(p, false), *b = zl_read_csv(pg, false);
    check_values(a, ROWS, COLS, want);
    check_values(b, ROWS, COLS, want);
    zl_tensor_release(a);
    zl_tensor_release(b);
    free(want);
    free(text);
}

TEST(gzip_with_header)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "h.csv.gz");
    write_gz(p, "x,y,label\n0.25,16,3\n");
    zl_tensor *t = zl_read_csv(p, true);
    check_values(t, 1, 3, (float[]){0.25f, 16, 3});
    zl_tensor_release(t);
}

TEST(missing_and_directory)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "no_such.csv");
    char want[600];
    snprintf(want, sizeof want, "cannot open '%s': No such file or directory", p);
    zl_tensor *t;
    CHECK_ERR(t = zl_read_csv(p, false), want);
    CHECK(t == NULL);
    snprintf(want, sizeof want, "cannot read '%s': it is a folder, not a regular file", zt_tmp_dir());
    CHECK_ERR(t = zl_read_csv(zt_tmp_dir(), false), want);
    CHECK(t == NULL);
    CHECK_ERR(zl_read_csv(NULL, false), "read_csv: path is NULL");
}

TEST(truncated_gzip)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "trunc.csv.gz");
    char text[4096];
    size_t len = 0;
    for (int i = 0; i < 200; i++) len += (size_t)sprintf(text + len, "%d,%d\n", i, i * i);
    write_gz(p, text);
    size_t n;
    unsigned char *whole = read_whole(p, &n);
    CHECK(whole && n > 40);
    if (!whole) return;
    zt_write_file(p, whole, n / 2);
    char want[600];
    snprintf(want, sizeof want, "%s: corrupt gzip stream near uncompressed offset ", p);
    zl_tensor *t;
    CHECK_ERR(t = zl_read_csv(p, false), want);
    CHECK(t == NULL && strstr(zl_last_error(), ": unexpected end of file"));
    free(whole);
}

TEST(corrupt_gzip)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "bad.csv.gz");
    write_gz(p, "1,2\n3,4\n5,6\n");
    size_t n;
    unsigned char *whole = read_whole(p, &n);
    CHECK(whole && n > 18);
    if (!whole) return;
    char want[600];
    /* The first deflate byte after the 10-byte header: block type 3 does not exist. */
    unsigned char first = whole[10];
    whole[10] = 0xff;
    zt_write_file(p, whole, n);
    snprintf(want, sizeof want, "%s: corrupt gzip stream near uncompressed offset 0: invalid block type", p);
    CHECK_ERR(zl_read_csv(p, false), want);
    /* The stored CRC-32 (the trailer's first four bytes) no longer matches. */
    whole[10] = first;
    whole[n - 8] ^= 0x5a;
    zt_write_file(p, whole, n);
    snprintf(want, sizeof want, "%s: corrupt gzip stream near uncompressed offset ", p);
    CHECK_ERR(zl_read_csv(p, false), want);
    CHECK(strstr(zl_last_error(), ": incorrect data check"));
    free(whole);
}

TEST(bad_number)
{
    char p[512], want[600];
    zt_tmp_path(p, sizeof p, "num.csv");
    const char *text = "1,2,3\n4,5,6\n7,8,abc\n";
    zt_write_file(p, text, strlen(text));
    snprintf(want, sizeof want, "%s:3: field 3 is not a number: 'abc'", p);
    CHECK_ERR(zl_read_csv(p, false), want);
    text = "1,,3\n";
    zt_write_file(p, text, strlen(text));
    snprintf(want, sizeof want, "%s:1: field 2 is not a number: ''", p);
    CHECK_ERR(zl_read_csv(p, false), want);
    text = "1,2 3\n";
    zt_write_file(p, text, strlen(text));
    CHECK_ERR(zl_read_csv(p, false), "field 2 is not a number: '2 3'");
    text = "1,1e39\n";
    zt_write_file(p, text, strlen(text));
    snprintf(want, sizeof want, "%s:1: field 2 is out of range for f32: '1e39'", p);
    CHECK_ERR(zl_read_csv(p, false), want);
    zt_write_file(p, "1,2\n\0\0\x01,3\n", 11);
    snprintf(want, sizeof want, "%s:2: contains a NUL byte", p);
    CHECK_ERR(zl_read_csv(p, false), want);
}

TEST(ragged_row)
{
    char p[512], want[600];
    zt_tmp_path(p, sizeof p, "ragged.csv");
    const char *text = "1,2,3,4\n5,6,7,8\n\n9,10,11\n";
    zt_write_file(p, text, strlen(text));
    snprintf(want, sizeof want, "%s:4: row has 3 fields, expected 4 (as on line 1)", p);
    zl_tensor *t;
    CHECK_ERR(t = zl_read_csv(p, false), want);
    CHECK(t == NULL);
    zt_tmp_path(p, sizeof p, "ragged.csv.gz");
    write_gz(p, "h1,h2\n1,2\n3,4,5\n");
    snprintf(want, sizeof want, "%s:3: row has 3 fields, expected 2 (as on line 2)", p);
    CHECK_ERR(zl_read_csv(p, true), want);
}

TEST(empty_file)
{
    char p[512], want[600];
    zt_tmp_path(p, sizeof p, "empty.csv");
    zt_write_file(p, "", 0);
    snprintf(want, sizeof want, "%s: no data rows (the file is empty)", p);
    CHECK_ERR(zl_read_csv(p, false), want);
    zt_write_file(p, "\n  \n", 4);
    CHECK_ERR(zl_read_csv(p, false), want);
    zt_write_file(p, "a,b\n", 4);
    CHECK_ERR(zl_read_csv(p, true), "no data rows (the file is empty or holds only a header)");
    zt_tmp_path(p, sizeof p, "empty.csv.gz");
    write_gz(p, "");
    CHECK_ERR(zl_read_csv(p, false), "empty.csv.gz: no data rows");
}

TEST(out_of_memory)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "oom.csv");
    zt_write_file(p, "1,2\n", 4);
    zl_mem_fail_after(1);
    zl_tensor *t;
    CHECK_ERR(t = zl_read_csv(p, false), "out of memory");
    CHECK(t == NULL);
    zl_mem_fail_after(0);
}

TEST(interrupted)
{
    char p[512];
    zt_tmp_path(p, sizeof p, "int.csv");
    zt_write_file(p, "1,2\n", 4);
    zl_interrupt_set(1);
    zl_tensor *t;
    CHECK_ERR(t = zl_read_csv(p, false), "read_csv: interrupted reading");
    CHECK(t == NULL);
    zl_interrupt_set(0);
    t = zl_read_csv(p, false);
    check_values(t, 1, 2, (float[]){1, 2});
    zl_tensor_release(t);
}
