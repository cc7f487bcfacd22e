/* libFuzzer target for zl_read_idx (engine/io/idx.c): any bytes, plain or
 * gzip, give either a tensor of the shape and dtype the header gives, holding
 * the file's elements, or an error naming the file. */
#include <string.h>
#include "fuzz.h"
#include "zlua/zlua.h"

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* A plain file read whole: its header against the tensor, and for u8 data the bytes themselves. */
static void check_plain(const uint8_t *data, size_t size, const zl_tensor *t)
{
    int ndim = data[3];
    if (zl_tensor_ndim(t) != ndim) fuzz_die("read_idx: %d dims, the header gives %d", zl_tensor_ndim(t), ndim);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        uint32_t n = be32(data + 4 + 4 * (size_t)d);
        if (zl_tensor_size(t, d) != (int64_t)n)
            fuzz_die("read_idx: dim %d is %lld, the header gives %u", d, (long long)zl_tensor_size(t, d), n);
        numel *= n;
    }
    size_t head = 4 + 4 * (size_t)ndim;
    if (data[2] == 0x08 && (size - head != numel || memcmp(zl_tensor_data(t), data + head, numel) != 0))
        fuzz_die("read_idx: the u8 elements differ from the file's");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    zl_tensor *t = zl_read_idx(path);
    if (!t) {
        fuzz_expect_error("read_idx", path);
    } else {
        bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
        if (!gzip) check_plain(data, size, t);
        zl_tensor_release(t);
    }
    fuzz_expect_no_tensors();
    return 0;
}
