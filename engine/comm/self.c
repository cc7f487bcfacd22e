/* The "self" backend: one process, rank 0 of 1. A reduction over one rank is
 * the identity, so only the collectives whose output is a separate buffer copy. */
#include <string.h>
#include "backend.h"

static zl_status self_open(zl_comm *c)
{
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    c->state = NULL;
    return ZL_OK;
}

static void self_close(zl_comm *c, bool clean)
{
    (void)c;
    (void)clean;
}

static zl_status self_start(zl_comm *c, const zli_coll *coll, void **pending)
{
    (void)c;
    *pending = NULL;
    switch (coll->kind) {
    case ZLI_COLL_REDUCE_SCATTER:
        if (coll->count) memmove(coll->recv, coll->send, coll->count * sizeof(float));
        return ZL_OK;
    case ZLI_COLL_ALLGATHER:
        if (coll->count) memmove(coll->recv, coll->send, coll->count);
        return ZL_OK;
    case ZLI_COLL_ALLGATHER_COALESCED:
        for (int i = 0; i < coll->parts; i++)
            if (coll->counts[i]) memmove(coll->recvs[i], coll->sends[i], coll->counts[i]);
        return ZL_OK;
    case ZLI_COLL_ALLREDUCE:
    case ZLI_COLL_BROADCAST:
    case ZLI_COLL_BARRIER:
        return ZL_OK;
    }
    return zl_error(ZL_EINVAL, "comm self: unknown collective %d", (int)coll->kind);
}

const zli_comm_backend zli_comm_self = {
    .name = "self",
    .device = ZL_DEVICE_CPU,
    .open = self_open,
    .close = self_close,
    .start = self_start,
    .test = NULL,
};
