/* zlua/base.h — status codes, the thread-local error message, and the export macro.
 * Every other public header includes this one. */
#ifndef ZLUA_BASE_H
#define ZLUA_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ZLUA_BUILDING)
#define ZL_API __attribute__((visibility("default")))
#else
#define ZL_API
#endif

#define ZL_VERSION_MAJOR 0
#define ZL_VERSION_MINOR 1
#define ZL_VERSION_PATCH 0
#define ZL_VERSION_STRING "0.1.0"

/* Status codes. 0 is success; values are stable and only ever appended. */
typedef enum zl_status {
    ZL_OK = 0,
    ZL_EINVAL = 1,       /* bad argument: shape, dim, value */
    ZL_ENOMEM = 2,       /* an allocation failed */
    ZL_EDTYPE = 3,       /* dtype not supported by this operation */
    ZL_ESHAPE = 4,       /* shapes do not agree */
    ZL_EIO = 5,          /* file or device error */
    ZL_ESTATE = 6,       /* object in the wrong state (freed graph, released tensor) */
    ZL_EFORMAT = 7,      /* corrupt or unreadable data */
    ZL_EINTERRUPT = 8,   /* interrupted by the user (Ctrl-C) */
    ZL_EHOOK = 9,        /* a user hook reported an error */
    ZL_EDEVICE = 10,     /* no such device, or the device (or its driver) failed */
    ZL_ESCRIPT = 11,     /* a Lua script raised an error (zlua_dofile, zlua_dostring) */
} zl_status;

/* The message of the last error on this thread. Never NULL; "" when none. */
ZL_API const char *zl_last_error(void);
/* Human name of a status code ("invalid argument", ...). */
ZL_API const char *zl_status_name(zl_status s);
/* Set the thread's error message (printf-style; it may include
 * zl_last_error() itself, to wrap it) and return `code`.
 * Public so that hosts and bindings can report through the same channel. */
ZL_API zl_status zl_error(zl_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clear the thread's error message. */
ZL_API void zl_clear_error(void);

/* Version string of the library, e.g. "0.1.0". */
ZL_API const char *zl_version(void);

/* Cooperative interruption: a host (the REPL's Ctrl-C handler) sets the flag,
 * long-running engine loops poll it and return ZL_EINTERRUPT. Signal-safe. */
ZL_API void zl_interrupt_set(int on);
ZL_API int zl_interrupt_pending(void);

/* OpenMP threads used by kernels, a setting of the current context (zlua/context.h):
 * it applies to the calling thread now and wherever the context becomes current.
 * Results are bit-identical run to run for a given thread count; changing it may
 * change the last bits of reductions. n <= 0 is ignored. */
ZL_API void zl_set_num_threads(int n);
ZL_API int zl_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif
