/* zl_read_cifar10: CIFAR-10 binary batches, plain or gzip, split into a u8
 * image tensor [N, 3, 32, 32] and an i64 label tensor [N]. The whole file is
 * checked (length, then every label) before either tensor is made. */
#include <stdlib.h>
#include <string.h>
#include "stream.h"

#define OP "read_cifar10"
#define PIXELS (3 * 32 * 32)
#define RECORD (1 + PIXELS)
#define CLASSES 10

static zl_status check_records(const char *path, const unsigned char *data, size_t len)
{
    if (len == 0) return zl_error(ZL_EFORMAT, "%s: the file is empty", path);
    if (len % RECORD) {
        size_t whole = len / RECORD;
        return zl_error(ZL_EFORMAT,
                        "%s: %zu bytes is not a whole number of %d-byte CIFAR-10 records: "
                        "a partial record %zu starts at offset %zu",
                        path, len, RECORD, whole, whole * RECORD);
    }
    for (size_t r = 0; r < len / RECORD; r++)
        if (data[r * RECORD] >= CLASSES)
            return zl_error(ZL_EFORMAT, "%s: record %zu at offset %zu has label %d, expected 0..%d", path, r,
                            r * RECORD, data[r * RECORD], CLASSES - 1);
    return ZL_OK;
}

zl_status zl_read_cifar10(const char *path, zl_tensor **images, zl_tensor **labels)
{
    if (!images || !labels) return zl_error(ZL_EINVAL, OP ": images and labels must not be NULL");
    *images = *labels = NULL;
    zli_stream s;
    zl_status st = zli_stream_open(&s, path, OP);
    if (st) return st;
    unsigned char *data;
    size_t len;
    st = zli_stream_read_rest(&s, SIZE_MAX, &data, &len);
    zli_stream_close(&s);
    if (st) return st;
    st = check_records(path, data, len);
    int64_t n = (int64_t)(len / RECORD);
    zl_tensor *img = NULL, *lab = NULL;
    if (!st) {
        img = zl_tensor_new(ZL_DTYPE_U8, 4, (int64_t[]){n, 3, 32, 32}, ZL_MEM_OTHER);
        lab = img ? zl_tensor_new(ZL_DTYPE_I64, 1, &n, ZL_MEM_OTHER) : NULL;
        if (!lab) st = zli_last_code();
    }
    if (!st) {
        unsigned char *pix = zl_tensor_data(img);
        int64_t *y = zl_tensor_data(lab);
        for (int64_t r = 0; r < n; r++) {
            const unsigned char *rec = data + (size_t)r * RECORD;
            y[r] = rec[0];
            memcpy(pix + (size_t)r * PIXELS, rec + 1, PIXELS);
        }
        *images = img;
        *labels = lab;
    } else {
        zl_tensor_release(img);
    }
    free(data);
    return st;
}
