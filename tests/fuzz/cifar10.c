/* libFuzzer target for zl_read_cifar10 (engine/io/cifar10.c): any bytes,
 * plain or gzip, give either images u8 [N, 3, 32, 32] and labels i64 [N] in
 * 0..9 taken from the file's records, or an error naming the file and both
 * outputs NULL. */
#include <string.h>
#include "fuzz.h"
#include "zlua/zlua.h"

#define PIXELS (3 * 32 * 32)
#define RECORD (1 + PIXELS)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    zl_tensor *img = NULL, *lab = NULL;
    zl_status st = zl_read_cifar10(path, &img, &lab);
    if (st) {
        fuzz_expect_error("read_cifar10", path);
        if (img || lab) fuzz_die("read_cifar10 failed but left a tensor");
        fuzz_expect_no_tensors();
        return 0;
    }
    int64_t n = zl_tensor_size(lab, 0);
    if (zl_tensor_ndim(img) != 4 || zl_tensor_size(img, 0) != n || zl_tensor_ndim(lab) != 1 || n < 1)
        fuzz_die("read_cifar10: images and labels disagree on the record count");
    const int64_t *y = zl_tensor_data(lab);
    bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (!gzip && (size_t)n * RECORD != size) fuzz_die("read_cifar10: %lld records from %zu bytes", (long long)n, size);
    for (int64_t r = 0; r < n; r++) {
        if (y[r] < 0 || y[r] > 9) fuzz_die("read_cifar10: label %lld of record %lld", (long long)y[r], (long long)r);
        if (!gzip && (y[r] != data[r * RECORD] ||
                      memcmp((const uint8_t *)zl_tensor_data(img) + r * PIXELS, data + r * RECORD + 1, PIXELS)))
            fuzz_die("read_cifar10: record %lld differs from the file's", (long long)r);
    }
    zl_tensor_release(img);
    zl_tensor_release(lab);
    fuzz_expect_no_tensors();
    return 0;
}
