/* libFuzzer target for gzip input (engine/io/stream.c, under every dataset
 * reader), through zl_read_text and zl_read_tokens. The first byte picks
 * what the rest is:
 *   mode 0: the file itself, raw (damaged gzip headers, members, trailers);
 *   mode 1: content the harness gzips: it must read back exactly;
 *   mode 2: the same gzip data cut short: the read must fail, never give a
 *           shorter file as if it were whole;
 *   mode 3: the content as two gzip members one after the other: it must
 *           read back whole.
 * The other bits of the first byte give the compression level. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "fuzz.h"
#include "zlua/zlua.h"

/* data as one gzip member at `level`, appended to *out (grown with realloc). */
static void gzip_append(const uint8_t *data, size_t n, int level, uint8_t **out, size_t *len)
{
    z_stream z = {0};
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) fuzz_die("deflateInit2 failed");
    size_t cap = deflateBound(&z, (uLong)n);
    uint8_t *buf = realloc(*out, *len + cap);
    if (!buf) fuzz_die("out of memory");
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)n;
    z.next_out = buf + *len;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) fuzz_die("deflate did not finish");
    *len += cap - z.avail_out;
    *out = buf;
    deflateEnd(&z);
}

/* What a read of the file must give. */
typedef enum { ANY, WHOLE, FAIL } expect;

/* The file at path read as text and as 2-byte tokens. ANY: a result or an
 * error naming the file. WHOLE: content[0 .. n) exactly (an error only for
 * what the reader refuses in any file: no bytes, an odd count of token
 * bytes). FAIL: an error naming the file. */
static void read_back(const char *path, const uint8_t *content, size_t n, expect want)
{
    zl_tensor *t = zl_read_text(path);
    if (!t) {
        fuzz_expect_error("read_text", path);
        if (want == WHOLE && n > 0) fuzz_die("read_text refused good gzip data: %s", zl_last_error());
    } else {
        if (want == FAIL) fuzz_die("read_text took gzip data cut short for %lld bytes", (long long)zl_tensor_numel(t));
        if (want == WHOLE && ((size_t)zl_tensor_numel(t) != n || memcmp(zl_tensor_data(t), content, n) != 0))
            fuzz_die("read_text gave %lld bytes that differ from the %zu gzipped", (long long)zl_tensor_numel(t), n);
        zl_tensor_release(t);
    }
    t = zl_read_tokens(path, 2);
    if (!t) {
        fuzz_expect_error("read_tokens", path);
        if (want == WHOLE && n > 0 && n % 2 == 0) fuzz_die("read_tokens refused good gzip data: %s", zl_last_error());
        return;
    }
    if (want == FAIL) fuzz_die("read_tokens took gzip data cut short for a whole file");
    if (want == WHOLE) {
        const int64_t *ids = zl_tensor_data(t);
        if ((size_t)zl_tensor_numel(t) * 2 != n)
            fuzz_die("read_tokens: %lld tokens from %zu bytes", (long long)zl_tensor_numel(t), n);
        for (size_t i = 0; i < n / 2; i++)
            if (ids[i] != (content[2 * i] | content[2 * i + 1] << 8)) fuzz_die("read_tokens: token %zu differs", i);
    }
    zl_tensor_release(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    int mode = data[0] & 3, level = (data[0] >> 2) % 10;
    const uint8_t *content = data + 1;
    size_t n = size - 1;
    if (mode == 0) {
        read_back(fuzz_file(content, n), NULL, 0, ANY);
        fuzz_expect_no_tensors();
        return 0;
    }
    uint8_t *gz = NULL;
    size_t len = 0;
    if (mode == 3) {
        gzip_append(content, n / 2, level, &gz, &len);
        gzip_append(content + n / 2, n - n / 2, level, &gz, &len);
    } else {
        gzip_append(content, n, level, &gz, &len);
    }
    expect want = WHOLE;
    if (mode == 2) {
        /* Anywhere after the magic, so that the file is still taken for gzip. */
        size_t cut = 2 + (n ? content[n - 1] * (len - 2) / 256 : 0);
        len = cut;
        want = FAIL;
    }
    read_back(fuzz_file(gz, len), content, n, want);
    free(gz);
    fuzz_expect_no_tensors();
    return 0;
}
