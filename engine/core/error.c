/* Errors, version and interruption: the small per-thread and process-wide
 * state every other file reports through (the rest lives in a context). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include "zlua/base.h"

static _Thread_local char last_error[2048];
static _Thread_local zl_status last_code;
static volatile sig_atomic_t interrupt_flag;

const char *zl_last_error(void) { return last_error; }

void zl_clear_error(void) { last_error[0] = '\0'; last_code = ZL_OK; }

/* The code that went with the last message; private (tensor_impl.h). */
__attribute__((visibility("hidden"))) zl_status zli_last_code(void) { return last_code; }

/* Formatted apart and then copied, so a message may wrap the last one
 * (zl_error(code, "load: %s", zl_last_error())). */
zl_status zl_error(zl_status code, const char *fmt, ...)
{
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    last_code = code;
    return code;
}

const char *zl_status_name(zl_status s)
{
    switch (s) {
    case ZL_OK: return "ok";
    case ZL_EINVAL: return "invalid argument";
    case ZL_ENOMEM: return "out of memory";
    case ZL_EDTYPE: return "unsupported dtype";
    case ZL_ESHAPE: return "shape mismatch";
    case ZL_EIO: return "i/o error";
    case ZL_ESTATE: return "invalid state";
    case ZL_EFORMAT: return "bad format";
    case ZL_EINTERRUPT: return "interrupted";
    case ZL_EHOOK: return "hook failed";
    case ZL_EDEVICE: return "device error";
    case ZL_ESCRIPT: return "script error";
    }
    return "unknown status";
}

const char *zl_version(void) { return ZL_VERSION_STRING; }

void zl_interrupt_set(int on) { interrupt_flag = on ? 1 : 0; }
int zl_interrupt_pending(void) { return interrupt_flag != 0; }
