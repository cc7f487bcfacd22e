/* zl_read_idx: idx files (MNIST's images and labels), plain or gzip. The header
 * is checked field by field so that a wrong or damaged file is named with the
 * offset of the field at fault, before any data is converted. */
#include <stdlib.h>
#include <string.h>
#include "stream.h"

#define OP "read_idx"
/* Bytes before the dims: 00 00 <dtype code> <ndims>. */
#define MAGIC_LEN 4

/* A checked header: what the data that follows must be. */
typedef struct idx_header {
    int code;              /* the idx dtype code */
    size_t esize;          /* bytes per element in the file */
    zl_dtype dt;           /* the tensor's dtype */
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    size_t nbytes;         /* bytes of data the shape gives */
} idx_header;

/* What an idx dtype code becomes: the element size in the file and the tensor dtype. */
static bool idx_code(idx_header *h)
{
    switch (h->code) {
    case 0x08: h->esize = 1; h->dt = ZL_DTYPE_U8; return true;
    case 0x09: h->esize = 1; h->dt = ZL_DTYPE_I32; return true;
    case 0x0B: h->esize = 2; h->dt = ZL_DTYPE_I32; return true;
    case 0x0C: h->esize = 4; h->dt = ZL_DTYPE_I32; return true;
    case 0x0D: h->esize = 4; h->dt = ZL_DTYPE_F32; return true;
    case 0x0E: h->esize = 8; h->dt = ZL_DTYPE_F32; return true;
    default: return false;
    }
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const unsigned char *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/* n big-endian elements of idx dtype `code` from src into the tensor's data. */
static void convert(int code, const unsigned char *restrict src /* [n * esize] */, void *restrict dst,
                    size_t n)
{
    switch (code) {
    case 0x08:
        memcpy(dst, src, n);
        break;
    case 0x09: {
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (int8_t)src[i];
        break;
    }
    case 0x0B: {
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (int16_t)(uint16_t)(src[2 * i] << 8 | src[2 * i + 1]);
        break;
    }
    case 0x0C: {
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (int32_t)be32(src + 4 * i);
        break;
    }
    case 0x0D: {
        float *d = dst;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = be32(src + 4 * i);
            memcpy(&d[i], &u, sizeof u);
        }
        break;
    }
    case 0x0E: {
        float *d = dst;
        for (size_t i = 0; i < n; i++) {
            uint64_t u = be64(src + 8 * i);
            double v;
            memcpy(&v, &u, sizeof v);
            d[i] = (float)v;
        }
        break;
    }
    }
}

/* Read and check the header; on success the stream stands at the first element. */
static zl_status read_header(zli_stream *s, idx_header *h)
{
    unsigned char magic[MAGIC_LEN];
    zl_status st = zli_stream_read_exact(s, magic, MAGIC_LEN, "idx header");
    if (st) return st;
    if (magic[0] || magic[1])
        return zl_error(ZL_EFORMAT, "%s: not an idx file: bytes 0x%02x 0x%02x at offset 0, expected 0x00 0x00",
                        s->path, magic[0], magic[1]);
    h->code = magic[2];
    if (!idx_code(h))
        return zl_error(ZL_EFORMAT,
                        "%s: unknown idx dtype code 0x%02x at offset 2 "
                        "(expected 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)", s->path, h->code);
    h->ndim = magic[3];
    if (h->ndim < 1 || h->ndim > ZL_MAX_DIMS)
        return zl_error(ZL_EFORMAT, "%s: idx header gives %d dims at offset 3, expected 1 to %d", s->path,
                        h->ndim, ZL_MAX_DIMS);
    unsigned char dims[4 * ZL_MAX_DIMS];
    st = zli_stream_read_exact(s, dims, 4 * (size_t)h->ndim, "idx dims");
    if (st) return st;
    /* Every dim fits in 32 bits; the product is bounded so that bytes fit in
     * size_t, and so is the product of the nonzero dims (the strides of a
     * tensor with a zero-sized dim beside huge ones). */
    uint64_t n = 1, span = 1, limit = (uint64_t)(SIZE_MAX / 2) / h->esize;
    bool too_big = false;
    for (int d = 0; d < h->ndim; d++) {
        h->shape[d] = be32(dims + 4 * d);
        uint64_t s = h->shape[d] ? (uint64_t)h->shape[d] : 1;
        if (span > limit / s) too_big = true;
        else span *= s;
        n *= (uint64_t)h->shape[d];
    }
    if (too_big) {
        char buf[160];
        return zl_error(ZL_EFORMAT, "%s: idx dims %s at offset %d give more data than memory can hold",
                        s->path, zl_shape_str(h->ndim, h->shape, buf, sizeof buf), MAGIC_LEN);
    }
    h->nbytes = (size_t)n * h->esize;
    return ZL_OK;
}

zl_tensor *zl_read_idx(const char *path)
{
    zli_stream s;
    if (zli_stream_open(&s, path, OP)) return NULL;
    idx_header h = {0};
    unsigned char *data = NULL;
    size_t len = 0;
    zl_status st = read_header(&s, &h);
    /* One byte past the data tells a longer file from an exact one. */
    if (!st) st = zli_stream_read_rest(&s, h.nbytes + 1, &data, &len);
    zli_stream_close(&s);

    zl_tensor *t = NULL;
    if (!st && len < h.nbytes) {
        zl_error(ZL_EFORMAT, "%s: truncated at offset %lld (expected %zu bytes of data)", path,
                 (long long)s.offset, h.nbytes);
    } else if (!st && len > h.nbytes) {
        char buf[160];
        zl_error(ZL_EFORMAT, "%s: trailing data at offset %lld (dims %s give %zu bytes of data)", path,
                 (long long)(s.offset - 1), zl_shape_str(h.ndim, h.shape, buf, sizeof buf), h.nbytes);
    } else if (!st) {
        t = zl_tensor_new(h.dt, h.ndim, h.shape, ZL_MEM_OTHER);
        if (t && h.nbytes) convert(h.code, data, zl_tensor_data(t), h.nbytes / h.esize);
    }
    free(data);
    return t;
}
