/* Private to engine/comm: the communicator's layout and the backend vtable.
 * comm.c checks arguments, converts half types to f32 for host backends and
 * polls; a backend only moves contiguous buffers between ranks. */
#ifndef ZL_COMM_BACKEND_H
#define ZL_COMM_BACKEND_H

#include "../core/tensor_impl.h"

typedef enum zli_coll_kind {
    ZLI_COLL_ALLREDUCE,
    ZLI_COLL_REDUCE_SCATTER,
    ZLI_COLL_ALLGATHER,
    ZLI_COLL_BROADCAST,
    ZLI_COLL_BARRIER,
    ZLI_COLL_ALLGATHER_COALESCED,
} zli_coll_kind;

/* One collective on raw buffers. For a host backend reductions are always on
 * f32 elements and never AVG (comm.c divides the sum); a device backend gets
 * the tensors' own dtype (f32, f16 or bf16) and AVG. allgather and broadcast
 * move bytes.
 *  allreduce:      buf[count] dtype, in place
 *  reduce_scatter: send[size*count] dtype -> recv[count] dtype
 *  allgather:      send[count] bytes -> recv[size*count] bytes
 *  broadcast:      buf[count] bytes from root
 *  allgather_coalesced: for i < parts, sends[i][counts[i]] bytes ->
 *                  recvs[i][size*counts[i]] bytes, as one collective */
typedef struct zli_coll {
    zli_coll_kind kind;
    zl_comm_op op;
    zl_dtype dtype;
    void *buf;
    const void *send;
    void *recv;
    size_t count;
    int root;
    int parts;
    const void *const *sends;
    void *const *recvs;
    const size_t *counts;
} zli_coll;

struct zl_comm;

/* A backend, as a table of functions. Every field is required unless it says
 * otherwise; `pending` is the backend's own handle for a started collective. */
typedef struct zli_comm_backend {
    const char *name;
    /* Optional (NULL: the backend is built). Why this build lacks it and how to
     * get it; the backend is then only this and its name, and opening it fails
     * with this message. */
    const char *missing;
    /* Where the tensors must live. ZL_DEVICE_CPU: host buffers, halves widened
     * to f32 and AVG divided by comm.c. Another kind: buffers on device
     * c->device_index of that kind, reduced in their own dtype by the backend. */
    zl_device device;
    /* Set c->rank, c->size, c->local_rank, c->device_index (device backends)
     * and c->state. */
    zl_status (*open)(struct zl_comm *c);
    /* Free c->state. `clean` is false when a collective was abandoned unfinished
     * (after a timeout), so the backend must not block on the other ranks. */
    void (*close)(struct zl_comm *c, bool clean);
    /* Start `coll`. *pending is NULL when it completed at once. */
    zl_status (*start)(struct zl_comm *c, const zli_coll *coll, void **pending);
    /* Optional (NULL: start always completes at once). Set *done when `pending`
     * has completed, and free it then. A collective done in several steps
     * bumps c->progress at each, so that the wait keeps polling it briskly. */
    zl_status (*test)(struct zl_comm *c, void *pending, bool *done);
    /* Optional (NULL: losses are only found by the timeout). The rank of a peer
     * whose process is known to have ended, with the phrase that says so in
     * why ("lost rank 1 (process 1234 ended)", "rank 1 failed: <its message>");
     * -1 while none is. Cheap: comm.c polls it while waiting. */
    int (*lost)(struct zl_comm *c, char *why, size_t size);
    /* Optional. What is known of peers that cannot take part, such as "rank 1
     * (process 1234) is stopped", for a timeout's message; "" when nothing is. */
    void (*stopped)(struct zl_comm *c, char *out, size_t size);
} zli_comm_backend;

struct zl_comm_request;

struct zl_comm {
    const zli_comm_backend *be;
    int rank, size, local_rank;
    int device_index;                     /* of a device backend's tensors */
    double timeout_s;
    void *state;                          /* the backend's */
    int live_requests;                    /* started, not yet waited on */
    unsigned long progress;               /* bumped by the backend as collectives move on */
    bool closing;                         /* closed while requests were live */
    char broken[768];                     /* why it is unusable; "" while fine */
    bool peer_lost;                       /* broken because a rank's process ended */
    struct zl_comm_request *abandoned;    /* timed out, still owned by the backend */
};

/* The collective being waited on ("allreduce", ...), NULL between waits: read
 * by the mpi backend's SIGTERM handler to say what was interrupted. */
ZLI_HIDDEN extern const char *volatile zli_comm_waiting;

ZLI_HIDDEN extern const zli_comm_backend zli_comm_self;
ZLI_HIDDEN extern const zli_comm_backend zli_comm_mpi;

/* The communicator's functions a backend in a device module calls (the
 * nccl backend carries rank 0's unique id over an "mpi" communicator):
 * handed to it with the first request, as core's are (core/backend.h). */
typedef struct zli_comm_api {
    zl_status (*open)(const char *backend, zl_comm **out);
    void (*close)(zl_comm *c);
    int (*rank)(const zl_comm *c);
    int (*size)(const zl_comm *c);
    zl_status (*set_timeout)(zl_comm *c, double seconds);
    zl_status (*broadcast)(zl_comm *c, zl_tensor *t, int root);
} zli_comm_api;

#endif
