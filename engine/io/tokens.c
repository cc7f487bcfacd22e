/* zl_read_tokens: token files of little-endian uint16 or uint32 ids, plain or
 * gzip, into an i64 tensor [N] that can index an embedding directly. */
#include <stdlib.h>
#include "stream.h"

#define OP "read_tokens"

zl_tensor *zl_read_tokens(const char *path, int bytes_per_token)
{
    if (bytes_per_token != 2 && bytes_per_token != 4) {
        zl_error(ZL_EINVAL, OP ": bytes_per_token must be 2 (uint16) or 4 (uint32), got %d", bytes_per_token);
        return NULL;
    }
    zli_stream s;
    if (zli_stream_open(&s, path, OP)) return NULL;
    unsigned char *data;
    size_t len;
    zl_status st = zli_stream_read_rest(&s, SIZE_MAX, &data, &len);
    zli_stream_close(&s);
    if (st) return NULL;

    size_t bpt = (size_t)bytes_per_token;
    zl_tensor *t = NULL;
    if (len == 0) {
        zl_error(ZL_EFORMAT, "%s: the file is empty", path);
    } else if (len % bpt) {
        zl_error(ZL_EFORMAT,
                 "%s: %zu bytes is not a whole number of %d-byte tokens: a partial token starts at offset %zu", path,
                 len, bytes_per_token, len - len % bpt);
    } else {
        int64_t n = (int64_t)(len / bpt);
        t = zl_tensor_new(ZL_DTYPE_I64, 1, &n, ZL_MEM_OTHER);
        if (t) {
            int64_t *restrict out = zl_tensor_data(t);
            const unsigned char *restrict p = data;
            if (bpt == 2)
                for (int64_t i = 0; i < n; i++) out[i] = p[2 * i] | p[2 * i + 1] << 8;
            else
                for (int64_t i = 0; i < n; i++)
                    out[i] = (int64_t)((uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                                       (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24);
        }
    }
    free(data);
    return t;
}
