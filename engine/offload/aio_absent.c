/* zlua/aio.h in a build configured without libaio (CMake compiles this file
 * instead of aio.c): no engine can be opened, so every call that would do I/O
 * fails with a message saying how to get one. */
#include "../core/tensor_impl.h"

#define MISSING "zlua was built without libaio (configured with -DZLUA_AIO=OFF or found none): " \
                "install libaio-dev, then reconfigure and rebuild"

const char *zl_aio_unavailable(void) { return MISSING; }

zl_status zl_aio_open(const zl_aio_config *cfg, zl_aio **out)
{
    if (out) *out = NULL;
    return zl_error(ZL_EINVAL, "aio: %s", MISSING);
}

void zl_aio_close(zl_aio *a) { (void)a; }

zl_aio_request *zl_aio_write(zl_aio *a, const char *path, zl_tensor *t, int64_t offset)
{
    zl_error(ZL_EINVAL, "aio: %s", MISSING);
    return NULL;
}

zl_aio_request *zl_aio_read(zl_aio *a, const char *path, zl_tensor *t, int64_t offset)
{
    zl_error(ZL_EINVAL, "aio: %s", MISSING);
    return NULL;
}

zl_status zl_aio_wait(zl_aio_request *r) { return zl_error(ZL_EINVAL, "aio: %s", MISSING); }

bool zl_aio_is_direct(const zl_aio *a) { return false; }

double zl_aio_busy_seconds(zl_aio *a)
{
    (void)a;
    return 0;
}
