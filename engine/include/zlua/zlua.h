/* zlua/zlua.h — the whole public C API of libzlua. What is not declared under
 * engine/include/zlua/ is not API.
 *
 * Ownership, in five lines:
 *  1. A function returning zl_tensor* (or another object pointer) gives a new
 *     reference, unless its comment says "borrowed"; release it with _release/_free.
 *  2. Arguments are borrowed: the callee retains what it keeps.
 *  3. NULL passed to any _release or _free is a no-op.
 *  4. Failure is NULL or a non-zero zl_status; zl_last_error() (thread-local) says why.
 *  5. Nothing aborts on bad input: shapes, dims, dtypes and files are checked.
 */
#ifndef ZLUA_ZLUA_H
#define ZLUA_ZLUA_H

#include "base.h"
#include "context.h"
#include "dtype.h"
#include "memory.h"
#include "tensor.h"
#include "device.h"
#include "rng.h"
#include "autograd.h"
#include "ops.h"
#include "io.h"
#include "safetensors.h"
#include "optim.h"
#include "optimizer.h"
#include "schedule.h"
#include "comm.h"
#include "aio.h"
#include "zero.h"

#endif
