/* Private to engine/io: a file read front to back, plain or gzip alike, that
 * counts the bytes of content it has given out so that a reader's errors can
 * name the file and the offset. Offsets count uncompressed bytes. */
#ifndef ZL_IO_STREAM_H
#define ZL_IO_STREAM_H

#include <zlib.h>
#include "../core/tensor_impl.h"

typedef struct zli_stream {
    const char *path;      /* borrowed; quoted in every message */
    const char *op;        /* the reader's name, for "out of memory" and "interrupted" */
    int fd;
    gzFile gz;
    bool gzipped;          /* starts with the gzip magic 1f 8b */
    int64_t size;          /* a plain regular file's size in bytes, else -1 */
    int64_t offset;        /* bytes of content given out so far */
    int64_t inflate_max;   /* gzip: the most content the file may give (stream.c) */
} zli_stream;

/* Open `path` for reading, a regular file only (regular.h). Errors: "cannot
 * open '<path>': <strerror>", and "cannot read '<path>': it is a FIFO ..., not
 * a regular file" (a folder, a device). On failure *s needs no close. */
ZLI_HIDDEN zl_status zli_stream_open(zli_stream *s, const char *path, const char *op);
/* Close the file; a zeroed or already closed stream is a no-op. */
ZLI_HIDDEN void zli_stream_close(zli_stream *s);

/* Up to n bytes into buf; *got < n only at the end of the content. A read
 * error, a corrupt or truncated gzip stream, gzip data inflating past its
 * bound (stream.c), or Ctrl-C fail with a message naming the file (and the
 * offset where gzip data went bad). */
ZLI_HIDDEN zl_status zli_stream_read(zli_stream *s, void *buf, size_t n, size_t *got);
/* Exactly n bytes, else "<path>: truncated at offset N (expected n bytes of <what>)"
 * (or "<path>: the file is empty" when nothing at all was there). */
ZLI_HIDDEN zl_status zli_stream_read_exact(zli_stream *s, void *buf, size_t n, const char *what);
/* The rest of the content, at most `max` bytes, into a new malloc'd buffer
 * (*out, *len; free it). Stops at `max` without looking further, so a caller
 * that wants to know whether more follows asks for one byte beyond what it expects. */
ZLI_HIDDEN zl_status zli_stream_read_rest(zli_stream *s, size_t max, unsigned char **out, size_t *len);

#endif
