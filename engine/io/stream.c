/* The byte stream under the dataset readers: open a file, detect gzip by its
 * magic, read through zlib (which passes plain files through unchanged), and
 * keep the offset of the content read so far for error messages. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "regular.h"
#include "stream.h"

/* zlib's internal buffer; larger ones bring nothing measurable for these files. */
#define ZBUF (1 << 16)
/* The most one gzread is asked for: gzread counts in int, and Ctrl-C is
 * polled between calls. A gzip data error discards the whole read that met it,
 * so compressed reads go in 64 KiB pieces: the offset an error names is then
 * within 64 KiB before the damage ("near"). */
#define READ_MAX (1 << 24)
#define GZ_READ_MAX (1 << 16)
/* First buffer for content of unknown length (a gzip file). */
#define REST_START (1 << 20)
/* Decompression is bounded: a gzip file gives at most INFLATE_RATIO times its
 * own size in content (INFLATE_FLOOR at least, for small files). Data files
 * compress far less (text about 4 times, tokens 2, CSV 10); a file that
 * inflates beyond is refused before it fills memory (deflate reaches 1000
 * times on constant bytes, so 1 MB could become 1 GB). A real file that
 * compresses better is read once gunzipped. */
#define INFLATE_RATIO 64
#define INFLATE_FLOOR ((int64_t)64 << 20)

static int64_t inflate_bound(int64_t size)
{
    int64_t b = size > INT64_MAX / INFLATE_RATIO ? INT64_MAX : size * INFLATE_RATIO;
    return b > INFLATE_FLOOR ? b : INFLATE_FLOOR;
}

zl_status zli_stream_open(zli_stream *s, const char *path, const char *op)
{
    *s = (zli_stream){.path = path, .op = op, .fd = -1, .size = -1};
    if (!path) return zl_error(ZL_EINVAL, "%s: path is NULL", op);
    int fd;
    int64_t size;
    zl_status st = zli_open_regular(path, 0, &fd, &size);
    if (st) return st;
    unsigned char magic[2];
    ssize_t got = pread(fd, magic, sizeof magic, 0);
    if (got < 0) {
        zl_status e = zl_error(ZL_EIO, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
        return e;
    }
    s->gzipped = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (s->gzipped) s->inflate_max = inflate_bound(size);
    else s->size = size;
    s->gz = gzdopen(fd, "rb");
    if (!s->gz) {
        close(fd);
        return zl_error(ZL_ENOMEM, "%s: cannot open a zlib stream on '%s'", op, path);
    }
    s->fd = fd;
    gzbuffer(s->gz, ZBUF);
    return ZL_OK;
}

void zli_stream_close(zli_stream *s)
{
    if (s->gz) gzclose_r(s->gz);
    s->gz = NULL;
    s->fd = -1;
}

/* The error zlib holds after a failed or short read, or ZL_OK at a clean end. */
static zl_status stream_error(zli_stream *s)
{
    int zerr;
    const char *msg = gzerror(s->gz, &zerr);
    if (zerr == Z_OK) return ZL_OK;
    if (zerr == Z_ERRNO) return zl_error(ZL_EIO, "cannot read '%s': %s", s->path, strerror(errno));
    /* zlib names a stream opened by descriptor "<fd:N>"; the path says more. */
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "<fd:%d>: ", s->fd);
    if (strncmp(msg, prefix, (size_t)n) == 0) msg += n;
    if (s->gzipped)
        return zl_error(ZL_EFORMAT, "%s: corrupt gzip stream near uncompressed offset %lld: %s", s->path,
                        (long long)s->offset, msg);
    return zl_error(ZL_EIO, "cannot read '%s': %s", s->path, msg);
}

zl_status zli_stream_read(zli_stream *s, void *buf, size_t n, size_t *got)
{
    unsigned char *p = buf;
    size_t total = 0;
    zl_status st = ZL_OK;
    while (total < n) {
        if (zl_interrupt_pending()) {
            st = zl_error(ZL_EINTERRUPT, "%s: interrupted reading '%s'", s->op, s->path);
            break;
        }
        size_t cap = s->gzipped ? GZ_READ_MAX : READ_MAX;
        size_t want = n - total < cap ? n - total : cap;
        if (s->gzipped && s->offset >= s->inflate_max) {
            st = zl_error(ZL_EFORMAT,
                          "%s: the gzip data inflates past %lld bytes, %d times the file's size: refused as a "
                          "decompression bomb (gunzip it first if it is real data)",
                          s->path, (long long)s->inflate_max, INFLATE_RATIO);
            break;
        }
        if (s->gzipped && (int64_t)want > s->inflate_max - s->offset) want = (size_t)(s->inflate_max - s->offset);
        int r = gzread(s->gz, p + total, (unsigned)want);
        if (r <= 0) {
            /* A gzip stream cut short reads as an end with Z_BUF_ERROR pending. */
            st = stream_error(s);
            if (!st && r < 0) st = zl_error(ZL_EIO, "cannot read '%s'", s->path);
            break;
        }
        total += (size_t)r;
        s->offset += r;
    }
    *got = total;
    return st;
}

zl_status zli_stream_read_exact(zli_stream *s, void *buf, size_t n, const char *what)
{
    size_t got;
    zl_status st = zli_stream_read(s, buf, n, &got);
    if (st || got == n) return st;
    if (s->offset == 0) return zl_error(ZL_EFORMAT, "%s: the file is empty", s->path);
    return zl_error(ZL_EFORMAT, "%s: truncated at offset %lld (expected %zu bytes of %s)", s->path,
                    (long long)s->offset, n, what);
}

zl_status zli_stream_read_rest(zli_stream *s, size_t max, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    /* A plain file's remaining size is known: one byte more lets the read see
     * the end without a second buffer. */
    size_t cap = REST_START;
    if (s->size >= 0) cap = s->size > s->offset ? (size_t)(s->size - s->offset) + 1 : 1;
    if (cap > max) cap = max;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (!buf) return zl_error(ZL_ENOMEM, "%s: out of memory reading '%s'", s->op, s->path);
    size_t n = 0;
    zl_status st = ZL_OK;
    for (;;) {
        if (n == cap) {
            if (cap >= max) break;
            size_t ncap = cap > max / 2 ? max : cap * 2;
            unsigned char *q = realloc(buf, ncap);
            if (!q) {
                st = zl_error(ZL_ENOMEM, "%s: out of memory reading '%s'", s->op, s->path);
                break;
            }
            buf = q;
            cap = ncap;
        }
        size_t got;
        st = zli_stream_read(s, buf + n, cap - n, &got);
        n += got;
        if (st || n < cap) break;
    }
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *len = n;
    return ZL_OK;
}
