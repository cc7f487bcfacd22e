/* libFuzzer target for zl_read_csv (engine/io/csv.c), with and without a
 * header line: any bytes, plain or gzip, give either an f32 [rows, cols]
 * tensor with at least one row and column, or an error naming the file. */
#include "fuzz.h"
#include "zlua/zlua.h"

static void read_one(const char *path, bool skip_header)
{
    zl_tensor *t = zl_read_csv(path, skip_header);
    if (!t) {
        fuzz_expect_error("read_csv", path);
        return;
    }
    if (zl_tensor_dtype(t) != ZL_DTYPE_F32 || zl_tensor_ndim(t) != 2 || zl_tensor_size(t, 0) < 1 ||
        zl_tensor_size(t, 1) < 1)
        fuzz_die("read_csv: a %s tensor of %d dims, expected f32 [rows >= 1, cols >= 1]",
                 zl_dtype_name(zl_tensor_dtype(t)), zl_tensor_ndim(t));
    zl_tensor_release(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    read_one(path, false);
    read_one(path, true);
    fuzz_expect_no_tensors();
    return 0;
}
