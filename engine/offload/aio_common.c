/* The parts of zlua/aio.h that need no libaio, built with aio.c or with
 * aio_absent.c: DeepSpeed's defaults, and the aligned buffers that the swapper
 * and the binding use whether or not there is an engine to write them. */
#include "../core/tensor_impl.h"

#define AIO_ALIGN 4096    /* O_DIRECT's unit; aio.c aligns to the same */

zl_aio_config zl_aio_defaults(void)
{
    return (zl_aio_config){.block_size = 1048576, .queue_depth = 8, .intra_op_parallelism = 1,
                           .single_submit = false, .overlap_events = true};
}

zl_tensor *zl_aio_buffer(zl_dtype dt, int64_t numel, zl_mem_category cat)
{
    if (numel < 0) {
        zl_error(ZL_EINVAL, "aio buffer: numel %lld is negative", (long long)numel);
        return NULL;
    }
    return zli_tensor_new_aligned(dt, 1, &numel, cat, AIO_ALIGN);
}
