/* The engine's collectives on its buffers wherever they live. A buffer in
 * the communicator's memory (host memory for "self" and "mpi", the GPU for
 * "nccl") goes to it as it is; one elsewhere is staged: its contents copied
 * into the communicator's memory, the collective run there, the result
 * copied back when the request is waited for. On one rank a staged
 * collective is done where the buffers are, without the communicator.
 * Copies between host memory and the device go on the device's copy stream
 * (place.c), so that fetching an offloaded parameter does not wait for the
 * compute queued after it; the host waits for such a copy in zz_wait, before
 * its source may change. */
#include <stdlib.h>
#include "zero_impl.h"

struct zz_req {
    zl_comm_request *req;      /* NULL: complete already */
    zl_tensor *staged_out;     /* after the wait, out = staged_out */
    zl_tensor *out;
    zl_tensor *staged_in;      /* kept until the collective is done */
    void *copied;              /* the copy of the input on the copy stream, until the host waited for it */
};

bool zz_in_comm_memory(const zl_zero *z, const zl_tensor *t) { return zz_on_device(t) == z->comm_dev; }

/* A tensor like t (flat) in the communicator's memory. */
static zl_tensor *staged(zl_zero *z, zl_tensor *t)
{
    return zz_new(z, z->comm_dev, zl_tensor_dtype(t), zl_tensor_numel(t), ZL_MEM_COMM, false);
}

/* The request's input copy waited for by the host: its buffers are free to change. */
static zl_status copied(zl_zero *z, zz_req *r) { return zz_event_wait(z, &r->copied, true); }

static void req_free(zl_zero *z, zz_req *r)
{
    copied(z, r);
    zl_tensor_release(r->staged_out);
    zl_tensor_release(r->out);
    zl_tensor_release(r->staged_in);
    free(r);
}

zl_status zz_req_settle(zl_zero *z, zz_req *r) { return r ? copied(z, r) : ZL_OK; }

zl_status zz_wait(zl_zero *z, zz_req *r)
{
    if (!r) return ZL_OK;
    zl_status st = copied(z, r);
    if (!st && r->req) {
        double t0 = zz_now();
        st = zl_comm_wait(r->req);
        z->comm_time += zz_now() - t0;
    }
    if (!st && r->staged_out) st = zz_copy(r->out, 0, r->staged_out, 0, zl_tensor_numel(r->out));
    req_free(z, r);
    return st;
}

/* One rank, buffers outside the communicator's memory: the collective's
 * result is its input, copied where the output is. */
static zl_status local(zl_zero *z, zz_req *r, zz_coll kind, zl_tensor *in, zl_tensor *out)
{
    if (kind == ZZ_REDUCE_SCATTER || kind == ZZ_ALLGATHER)
        return zz_copy_start(z, NULL, out, 0, in, 0, zl_tensor_numel(out), &r->copied);
    return ZL_OK;
}

zz_req *zz_start(zl_zero *z, zz_coll kind, zl_tensor *in, zl_tensor *out, zl_comm_op op, int root)
{
    z->collectives++;
    zz_req *r = calloc(1, sizeof *r);
    if (!r) {
        zl_error(ZL_ENOMEM, "ZeRO: out of memory starting a collective");
        return NULL;
    }
    /* allreduce and broadcast work in place: in is out */
    bool in_place = kind == ZZ_ALLREDUCE || kind == ZZ_BROADCAST;
    if (in_place) out = in;
    zl_status st = ZL_OK;
    bool direct = zz_in_comm_memory(z, in) && zz_in_comm_memory(z, out);
    if (!direct && z->world == 1) {
        st = local(z, r, kind, in, out);
        if (st) {
            req_free(z, r);
            return NULL;
        }
        return r;
    }
    zl_tensor *cin = in, *cout = out;
    if (!zz_in_comm_memory(z, in)) {
        /* A collective on the device (nccl) runs after the compute queued
         * before it, so the compute waits for the copy in, not the host; one
         * on the host reads the copy when it starts. */
        if (!(cin = r->staged_in = staged(z, in))) st = ZL_ENOMEM;
        if (!st) st = zz_copy_start(z, NULL, cin, 0, in, 0, zl_tensor_numel(in), &r->copied);
        if (!st) st = zz_event_wait(z, &r->copied, !z->comm_dev);
        if (in_place) cout = cin;
    }
    if (!st && !zz_in_comm_memory(z, cout)) {
        if (!(cout = staged(z, out))) st = ZL_ENOMEM;
    }
    if (!st && cout != out) {
        r->staged_out = zl_tensor_retain(cout);
        r->out = zl_tensor_retain(out);
    }
    if (!st && cout != out && cout != cin) zl_tensor_release(cout);
    double t0 = zz_now();
    if (!st) {
        switch (kind) {
        case ZZ_ALLREDUCE: r->req = zl_comm_allreduce_async(z->comm, cin, op); break;
        case ZZ_REDUCE_SCATTER: r->req = zl_comm_reduce_scatter_async(z->comm, cin, cout, op); break;
        case ZZ_ALLGATHER: r->req = zl_comm_allgather_async(z->comm, cin, cout); break;
        case ZZ_BROADCAST: r->req = zl_comm_broadcast_async(z->comm, cin, root); break;
        }
        if (!r->req) st = ZL_EIO;
    }
    z->comm_time += zz_now() - t0;
    if (st) {
        req_free(z, r);
        return NULL;
    }
    return r;
}

zz_req *zz_start_gathers(zl_zero *z, int n, zl_tensor *const *in, zl_tensor *const *out)
{
    z->collectives++;
    zz_req *r = calloc(1, sizeof *r);
    if (!r) {
        zl_error(ZL_ENOMEM, "ZeRO: out of memory starting a collective");
        return NULL;
    }
    double t0 = zz_now();
    r->req = zl_comm_allgather_coalesced_async(z->comm, n, (const zl_tensor *const *)in, out);
    z->comm_time += zz_now() - t0;
    if (!r->req) {
        req_free(z, r);
        return NULL;
    }
    return r;
}

zl_status zz_run(zl_zero *z, zz_coll kind, zl_tensor *in, zl_tensor *out, zl_comm_op op, int root)
{
    zz_req *r = zz_start(z, kind, in, out, op, root);
    return r ? zz_wait(z, r) : zli_last_code();
}
