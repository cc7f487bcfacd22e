/* Character-level text over bytes: zl_read_text reads a file (plain or gzip)
 * into a u8 tensor, zl_text_vocab lists its distinct bytes in order, and
 * zl_text_encode maps bytes to ids in such a vocabulary. */
#include <stdlib.h>
#include <string.h>
#include "stream.h"

zl_tensor *zl_read_text(const char *path)
{
    zli_stream s;
    if (zli_stream_open(&s, path, "read_text")) return NULL;
    unsigned char *data;
    size_t len;
    zl_status st = zli_stream_read_rest(&s, SIZE_MAX, &data, &len);
    zli_stream_close(&s);
    if (st) return NULL;
    zl_tensor *t = NULL;
    if (len == 0)
        zl_error(ZL_EFORMAT, "%s: the file is empty", path);
    else
        t = zl_tensor_from_data(ZL_DTYPE_U8, 1, (int64_t[]){(int64_t)len}, data);
    free(data);
    return t;
}

/* A contiguous view of a CPU u8 text tensor (a new reference), or NULL with an error. */
static zl_tensor *text_bytes(const char *op, zl_tensor *text)
{
    if (!text) {
        zl_error(ZL_EINVAL, "%s: text is NULL", op);
        return NULL;
    }
    if (zl_tensor_dtype(text) != ZL_DTYPE_U8 || zl_tensor_device(text) != ZL_DEVICE_CPU) {
        char buf[160];
        zl_error(ZL_EDTYPE, "%s: text must be a u8 CPU tensor, got %s %s on %s", op,
                 zl_dtype_name(zl_tensor_dtype(text)),
                 zl_shape_str(zl_tensor_ndim(text), zl_tensor_shape(text), buf, sizeof buf),
                 zl_tensor_device(text) == ZL_DEVICE_CPU ? "cpu" : "cuda");
        return NULL;
    }
    return zl_tensor_contiguous(text);
}

zl_status zl_text_vocab(zl_tensor *text, uint8_t vocab[256], int *vocab_size)
{
    if (!vocab || !vocab_size) return zl_error(ZL_EINVAL, "text_vocab: vocab and vocab_size must not be NULL");
    zl_tensor *c = text_bytes("text_vocab", text);
    if (!c) return zli_last_code();
    const unsigned char *p = zl_tensor_data(c);
    int64_t n = zl_tensor_numel(c);
    bool seen[256] = {false};
    for (int64_t i = 0; i < n; i++) seen[p[i]] = true;
    zl_tensor_release(c);
    int k = 0;
    for (int b = 0; b < 256; b++)
        if (seen[b]) vocab[k++] = (uint8_t)b;
    *vocab_size = k;
    return ZL_OK;
}

zl_tensor *zl_text_encode(zl_tensor *text, const uint8_t *vocab, int vocab_size)
{
    if (vocab_size < 0 || vocab_size > 256 || (vocab_size > 0 && !vocab)) {
        zl_error(ZL_EINVAL, "text_encode: vocab_size must be 0..256 with a vocab, got %d%s", vocab_size,
                 vocab ? "" : " and a NULL vocab");
        return NULL;
    }
    int id_of[256];
    for (int b = 0; b < 256; b++) id_of[b] = -1;
    for (int i = 0; i < vocab_size; i++) {
        if (id_of[vocab[i]] >= 0) {
            zl_error(ZL_EINVAL, "text_encode: byte 0x%02x is in the vocabulary twice (ids %d and %d)", vocab[i],
                     id_of[vocab[i]], i);
            return NULL;
        }
        id_of[vocab[i]] = i;
    }
    zl_tensor *c = text_bytes("text_encode", text);
    if (!c) return NULL;
    const unsigned char *p = zl_tensor_data(c);
    int64_t n = zl_tensor_numel(c);
    for (int64_t i = 0; i < n; i++)
        if (id_of[p[i]] < 0) {
            zl_error(ZL_EINVAL, "text_encode: byte 0x%02x at offset %lld is not in the vocabulary of %d bytes",
                     p[i], (long long)i, vocab_size);
            zl_tensor_release(c);
            return NULL;
        }
    zl_tensor *ids = zl_tensor_new(ZL_DTYPE_I64, zl_tensor_ndim(c), zl_tensor_shape(c), ZL_MEM_OTHER);
    if (ids) {
        int64_t *out = zl_tensor_data(ids);
        for (int64_t i = 0; i < n; i++) out[i] = id_of[p[i]];
    }
    zl_tensor_release(c);
    return ids;
}
