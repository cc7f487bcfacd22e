/* Private to engine/comm: NCCL opened with the first nccl communicator
 * instead of linked, so that a process that never uses it (every run on a
 * CPU) neither loads it nor needs it installed. The functions nccl.c calls,
 * under their own names, in one table. */
#ifndef ZL_COMM_NCCL_LIB_H
#define ZL_COMM_NCCL_LIB_H

#include <nccl.h>

#define ZLI_NCCL_FUNCTIONS(X)                                                                         \
    X(ncclAllGather) X(ncclAllReduce) X(ncclBroadcast) X(ncclCommAbort) X(ncclCommDestroy)           \
    X(ncclCommFinalize) X(ncclCommGetAsyncError) X(ncclCommInitRankConfig) X(ncclGetErrorString)     \
    X(ncclGetLastError) X(ncclGetUniqueId) X(ncclGroupEnd) X(ncclGroupStart) X(ncclReduceScatter)

#define ZLI_NCCL_FIELD(f) __typeof__(f) *f;
typedef struct zli_nccl_api {
    ZLI_NCCL_FUNCTIONS(ZLI_NCCL_FIELD)
} zli_nccl_api;
#undef ZLI_NCCL_FIELD

/* The table, the library opened on the first call (thread-safe); NULL with
 * ZL_EDEVICE naming the library, where it was looked for and why it did not load. */
const zli_nccl_api *zli_nccl_api_get(void);

#endif
