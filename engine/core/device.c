/* Device names: "cpu", "cuda:N", both ways. Strings only: what a device can
 * do lives in the device layer (engine/device, engine/cuda), above core. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor_impl.h"

char *zl_device_str(zl_device kind, int index, char *buf, size_t n)
{
    if (!n) return buf;
    if (kind == ZL_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", index);
    else snprintf(buf, n, "cpu");
    return buf;
}

zl_status zl_device_parse(const char *s, zl_device *kind, int *index)
{
    if (!s) return zl_error(ZL_EINVAL, "device: no name given (expected cpu, cuda or cuda:N)");
    if (!strcmp(s, "cpu")) { *kind = ZL_DEVICE_CPU; *index = 0; return ZL_OK; }
    if (!strncmp(s, "cuda", 4) && (s[4] == '\0' || s[4] == ':')) {
        long i = 0;
        if (s[4] == ':') {
            char *end;
            i = strtol(s + 5, &end, 10);
            if (end == s + 5 || *end || i < 0 || i > 1023)
                return zl_error(ZL_EINVAL, "device: '%s' is not a device (expected cpu, cuda or cuda:N)", s);
        }
        *kind = ZL_DEVICE_CUDA;
        *index = (int)i;
        return ZL_OK;
    }
    return zl_error(ZL_EINVAL, "device: '%s' is not a device (expected cpu, cuda or cuda:N)", s);
}
