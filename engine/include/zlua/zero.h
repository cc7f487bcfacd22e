/* zlua/zero.h — ZeRO stages 0-3 over a communicator: a rank's partition of
 * the fp32 master weights, optimizer moments and gradients, the gradient
 * buckets fed from the gradient-ready hooks, stage 3's gather/release from
 * the use hooks, the optimizer step, offload to NVMe, and zero.Init's
 * partitioned construction. A host trains with ZeRO through these alone. */
#ifndef ZLUA_ZERO_H
#define ZLUA_ZERO_H

#include "aio.h"
#include "comm.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zl_zero zl_zero;
typedef struct zl_zero_init zl_zero_init;

/* Every parameter is cut the same way in every stage: P chunks of k elements
 * (k = ceil(numel / P) rounded up to ZL_ZERO_ALIGN, the last chunk
 * zero-padded); rank q holds chunk q of every parameter, one after another,
 * as one flat buffer. Stage 0 is P = 1, stages 1-3 P = world size. Because an
 * element sits at the same place modulo the SIMD width in every stage, the
 * fused optimizer runs the same instructions on it whatever the stage: the
 * stages give bit-identical results. Values are stored in checkpoints. */
#define ZL_ZERO_ALIGN 16

typedef enum zl_zero_optimizer {
    ZL_ZERO_ADAM = 0,    /* Adam and AdamW (adamw_mode) */
    ZL_ZERO_LAMB = 1,    /* stage 0 only: its trust ratio needs whole parameters */
    ZL_ZERO_SGD = 2,
} zl_zero_optimizer;

/* One param group's hyperparameters; set again before a step whenever a
 * scheduler changed them. Fields an optimizer does not use are ignored. */
typedef struct zl_zero_hparams {
    double lr, beta1, beta2, eps, weight_decay;
    bool adamw_mode, bias_correction;
    double max_coeff, min_coeff;              /* Lamb */
    double momentum, dampening;               /* SGD */
    bool nesterov;
} zl_zero_hparams;

typedef enum zl_offload_device { ZL_OFFLOAD_NONE = 0, ZL_OFFLOAD_CPU = 1, ZL_OFFLOAD_NVME = 2 } zl_offload_device;

/* DeepSpeed's offload_optimizer / offload_param blocks. */
typedef struct zl_zero_offload {
    zl_offload_device device;
    const char *nvme_path;     /* device NVME: the folder swap files go under (read by create only) */
    int buffer_count;          /* swap buffers in memory */
    int64_t buffer_size;       /* offload_param: elements per buffer, at least the largest swapped chunk */
    int64_t max_in_cpu;        /* offload_param: elements of leading chunks kept in memory */
    bool pipeline_read;        /* offload_optimizer: read the next sub-groups during the step and backward */
    bool pipeline_write;       /* offload_optimizer: write a sub-group back while the next is updated */
    bool pin_memory;           /* a model on a device: page-locked host buffers for its copies */
} zl_zero_offload;

typedef struct zl_zero_config {
    int stage;                            /* 0..3 */
    zl_zero_optimizer optimizer;
    zl_dtype dtype;                       /* working parameters: f32, bf16 or f16 (then f32 masters) */
    zl_dtype grad_accum_dtype;            /* the gradient buffer: f32, bf16 or f16 */
    int64_t reduce_bucket_size;           /* elements per gradient bucket, over all ranks */
    int64_t allgather_bucket_size;        /* elements per all-gather of updated parameters (stages 1-2) */
    bool overlap_comm;                    /* reduce buckets while backward goes on */
    bool reduce_scatter;                  /* stages 2-3: reduce-scatter (else all-reduce, keep own part) */
    bool ignore_unused_parameters;        /* false: a trained parameter without gradient is an error */
    bool prescale_gradients;              /* divide each rank's gradient by the world size before the sum */
    double gradient_predivide_factor;     /* else: divide by this before the sum, multiply by it / world after */
    int64_t prefetch_bucket_size;         /* stage 3: elements gathered ahead along the recorded trace */
    int64_t max_live_parameters;          /* stage 3: elements gathered at once */
    int64_t max_reuse_distance;           /* stage 3: keep a parameter read again within this many elements */
    int64_t param_persistence_threshold;  /* stage 3: parameters this small stay gathered */
    int64_t model_persistence_threshold;  /* stage 3: ... up to this many elements in all */
    bool use_all_reduce_for_fetch_params; /* stage 3: gather by all-reduce of a zeroed whole */
    bool log_trace_cache_warnings;        /* stage 3: say on stderr when the trace is recorded anew */
    int64_t sub_group_size;               /* elements per optimizer sub-group swapped to NVMe */
    zl_zero_offload offload_optimizer;    /* stages 1-3 */
    zl_zero_offload offload_param;        /* stage 3 */
    zl_aio_config aio;
} zl_zero_config;

/* DeepSpeed's defaults for every field (stage 0, Adam, f32). */
ZL_API zl_zero_config zl_zero_config_defaults(void);
/* DeepSpeed's Adam defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, adamw_mode
 * and bias correction on, Lamb's coefficients 10 and 0.01, no momentum. */
ZL_API zl_zero_hparams zl_zero_hparams_defaults(void);

/* A trained parameter: an f32 leaf that requires grad (or one zl_zero_init
 * partitioned), its 0-based param group, and a name for messages and
 * checkpoints (copied). */
typedef struct zl_zero_param {
    zl_tensor *tensor;
    int group;
    const char *name;
} zl_zero_param;

/* Take over the parameters (retained): their masters, optimizer state and
 * gradient partition are made, working copies replace their data (half
 * precision, or stage 3's empty data gathered on use), and hooks on them
 * feed the buckets and stage 3's gathers. `inits` (may be NULL) are the
 * zero.Init stores that built some of them. Collective over `comm`, which
 * must outlive the engine. Errors name the parameter or the config key. */
ZL_API zl_status zl_zero_create(zl_comm *comm, const zl_zero_config *cfg, const zl_zero_param *params, int nparams,
                                const zl_zero_hparams *groups, int ngroups, zl_zero_init *const *inits, int ninits,
                                zl_zero **out);
/* Remove the hooks, wait for I/O and collectives in flight, free. The
 * parameters keep their current data. NULL is a no-op. */
ZL_API void zl_zero_free(zl_zero *z);

ZL_API zl_status zl_zero_set_hparams(zl_zero *z, int group, const zl_zero_hparams *hp);
ZL_API zl_status zl_zero_get_hparams(const zl_zero *z, int group, zl_zero_hparams *hp);

/* A forward begins (stage 3 restarts its trace and prefetches). */
ZL_API zl_status zl_zero_begin_forward(zl_zero *z);
/* After each backward: the last bucket reduced, every collective waited for.
 * zl_zero_step needs one since the last step, and none of the gradients of a
 * backward still unended. */
ZL_API zl_status zl_zero_end_backward(zl_zero *z);

typedef struct zl_zero_step_info {
    bool overflow;        /* an inf or NaN on some rank: the step was skipped on every rank */
    double grad_norm;     /* global L2 norm of the unscaled gradient (inf on overflow) */
    double clip_coef;     /* the clipping factor applied (1 for none) */
} zl_zero_step_info;

/* At an accumulation boundary: with check_overflow, vote on an inf/NaN over
 * every rank and skip the step if any; otherwise take the global norm,
 * clip to max_norm (0: off), step every rank's partition with the
 * gradients divided by loss_scale, and bring the working parameters up to
 * date on every rank. The gradients are zeroed either way. ZL_ESTATE, with
 * nothing done, when no zl_zero_end_backward came since the last step or a
 * gradient arrived after the last one (the step would apply part of the
 * gradient, or none). */
ZL_API zl_status zl_zero_step(zl_zero *z, double loss_scale, double max_norm, bool check_overflow,
                              zl_zero_step_info *info);
ZL_API zl_status zl_zero_zero_grad(zl_zero *z);

/* Stage 3: gather p whole and hold it (ops reading it meanwhile do not
 * release it) until the matching zl_zero_release; a persistent parameter
 * stays gathered. At stages 0-2 parameters are always whole and these do
 * nothing. Collective. */
ZL_API zl_status zl_zero_gather(zl_zero *z, zl_tensor *p);
ZL_API zl_status zl_zero_release(zl_zero *z, zl_tensor *p);
/* p (gathered) was changed on rank `root`: its values are broadcast and
 * become the master's (and the working copy's) on every rank. Collective. */
ZL_API zl_status zl_zero_update_param(zl_zero *z, zl_tensor *p, int root);
/* The whole f32 master of p, in p's shape (a new tensor). Collective. */
ZL_API zl_status zl_zero_full_fp32(zl_zero *z, zl_tensor *p, zl_tensor **out);

/* ---- one parameter's state, as DeepSpeed's safe_get/set_full_* and
 * safe_get/set_local_* give it ----
 * "full" is the whole parameter in its shape; "local" this rank's part of
 * it, the `own` elements [lo, lo + own) of the flattened parameter
 * (zl_zero_param_info), 1-d, possibly empty. Results are new f32 tensors in
 * host memory. The gradient is the one the step will use, reduced over the
 * ranks and accumulated, divided by loss_scale (what the step passes), not
 * clipped; it exists from zl_zero_end_backward to the step (ZL_ESTATE
 * outside). key is a name of zl_zero_state_keys ("exp_avg"); an unknown
 * one is ZL_EINVAL naming those kept. Every rank calls the full getters
 * (collective at stages 1-3, whose parts are spread over the ranks) and
 * every setter (a master written gathers the working copies again); the
 * local getters are not collective. Writing a master rounds it into the
 * working copies; values are converted from any floating dtype. */
ZL_API zl_status zl_zero_full_grad(zl_zero *z, zl_tensor *p, double loss_scale, zl_tensor **out);
ZL_API zl_status zl_zero_local_grad(zl_zero *z, zl_tensor *p, double loss_scale, zl_tensor **out);
ZL_API zl_status zl_zero_local_fp32(zl_zero *z, zl_tensor *p, zl_tensor **out);
ZL_API zl_status zl_zero_full_state(zl_zero *z, zl_tensor *p, const char *key, zl_tensor **out);
ZL_API zl_status zl_zero_local_state(zl_zero *z, zl_tensor *p, const char *key, zl_tensor **out);
ZL_API zl_status zl_zero_set_full_fp32(zl_zero *z, zl_tensor *p, const zl_tensor *value);
ZL_API zl_status zl_zero_set_local_fp32(zl_zero *z, zl_tensor *p, const zl_tensor *value);
ZL_API zl_status zl_zero_set_full_state(zl_zero *z, zl_tensor *p, const char *key, const zl_tensor *value);
ZL_API zl_status zl_zero_set_local_state(zl_zero *z, zl_tensor *p, const char *key, const zl_tensor *value);

/* ---- what a checkpoint needs ---- */
typedef struct zl_zero_param_info {
    const char *name;
    zl_tensor *tensor;    /* borrowed */
    int group;
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t numel;
    int64_t k;            /* chunk length */
    int64_t lo, own;      /* this rank's real elements: [lo, lo + own) of the flattened parameter */
    bool persistent;      /* stage 3: kept gathered */
} zl_zero_param_info;

ZL_API int zl_zero_num_params(const zl_zero *z);
ZL_API zl_status zl_zero_param_of(const zl_zero *z, int i, zl_zero_param_info *out);
ZL_API int zl_zero_stage(const zl_zero *z);
ZL_API int zl_zero_partitions(const zl_zero *z);      /* P */
ZL_API zl_dtype zl_zero_dtype(const zl_zero *z);       /* the working dtype */
/* The names of the optimizer's state tensors ("exp_avg", "exp_avg_sq";
 * "momentum_buffer"), sorted; *n receives their count. Borrowed. */
ZL_API const char *const *zl_zero_state_keys(const zl_zero *z, int *n);
/* The optimizer steps taken by a param group (0: no state yet). */
ZL_API int64_t zl_zero_group_steps(const zl_zero *z, int group);
ZL_API zl_status zl_zero_set_group_steps(zl_zero *z, int group, int64_t steps);

/* fn(i, master, states, user) for each parameter (those with only[i] true
 * when only is not NULL) with its chunk in memory: master is its k-element
 * f32 chunk, states[j] that of state key j (tensors valid during the call).
 * With write, what fn changed is kept (written back to NVMe), and the
 * working copies are brought up to date by zl_zero_sync_working. fn
 * returning non-zero stops the walk with that status. */
typedef zl_status (*zl_zero_chunk_fn)(int i, zl_tensor *master, zl_tensor *const *states, void *user);
ZL_API zl_status zl_zero_each_chunk(zl_zero *z, bool write, const bool *only, zl_zero_chunk_fn fn, void *user);
/* After masters changed (a checkpoint loaded): working copies rounded from
 * them and gathered on every rank. Collective. */
ZL_API zl_status zl_zero_sync_working(zl_zero *z);

/* ---- a checkpoint's optimizer shards ----
 * A shard is one rank's part of the optimizer: a safetensors file holding,
 * for each parameter i (counted from 1) of which this rank owns elements,
 * "param.<i>", the real elements of its f32 master chunk, and once its group
 * has stepped "state.<i>.<key>" for each state key (zl_zero_state_keys), all
 * f32 of `own` elements (zl_zero_param_info). At P = 1 every rank holds the
 * same: one rank's shard is the checkpoint's. Written atomically (the old
 * file stays on failure); streamed, so NVMe-offloaded state passes through a
 * sub-group at a time. Not collective. */
ZL_API zl_status zl_zero_save_shard(zl_zero *z, const char *path);

/* One parameter of a saved partition, in the engine's order. */
typedef struct zl_zero_saved_param {
    int64_t numel;   /* its elements, which must be the engine's */
    int64_t k;       /* its chunk length in the saved partition (as zl_zero_param_info.k there) */
    int64_t step;    /* optimizer steps it had taken; 0: no state was saved */
} zl_zero_saved_param;

/* A saved partition: `partitions` shards named optim_rank<q>.safetensors in
 * `folder`, laid out as zl_zero_save_shard writes them. All borrowed. */
typedef struct zl_zero_saved {
    const char *folder;
    int partitions;                       /* >= 1 */
    int nparams;                          /* the engine's count */
    const zl_zero_saved_param *params;
    int nkeys;                            /* state keys saved; each must be one of the engine's */
    const char *const *keys;
} zl_zero_saved;

/* This rank's chunks of the masters and, for parameters saved with a step,
 * of the optimizer state, read from whichever saved chunks hold them (so any
 * world size and stage loads any other's shards; a state key not saved
 * starts at zero), the groups' step counts set to their parameters' largest,
 * then zl_zero_sync_working. The layout is checked against the engine first
 * (ZL_EINVAL naming the folder and parameter); the files are checked by the
 * safetensors reader (each message names the file and tensor). Collective,
 * through zl_zero_sync_working. */
ZL_API zl_status zl_zero_load_shards(zl_zero *z, const zl_zero_saved *saved);

/* ---- checkpoints ----
 * A checkpoint is the folder DIR/TAG that engine:save_checkpoint writes, by
 * this code, so a C host and a Lua script load each other's:
 *   model.safetensors          the model's tensors, parameters in the working dtype
 *   optim_rank<R>.safetensors  rank R's shard (zl_zero_save_shard; rank 0's alone at one partition)
 *   engine.json (+ .crc32)     format, tag, the counters, world size, precision, every rank's
 *                              generator state, the optimizer (type, param groups, each
 *                              parameter's step, state names, the partition), the host's own
 *                              members (client_state, ...) and the manifest: every file's
 *                              bytes and CRC-32
 * and DIR/latest names the newest tag. Everything is written into a hidden
 * folder ".TAG.tmp-PID" (with a marker naming the host and process, so a save
 * killed midway is swept by the next save or load in DIR), fsynced, read back
 * and checked, then renamed to TAG (swapped with an older TAG in one atomic
 * exchange); `latest` is replaced atomically after that. The ranks agree on
 * every outcome: one rank's failure is every rank's error, and the previous
 * checkpoint and `latest` stay as they were. */

/* The training counters a checkpoint keeps. */
typedef struct zl_zero_counts {
    int64_t global_steps, global_samples, skipped_steps, micro_steps;
} zl_zero_counts;

/* Writes the model's file at `path`; every rank calls it, one writes. */
typedef zl_status (*zl_zero_model_writer)(void *user, const char *path);

typedef struct zl_zero_save_args {
    const char *tag;              /* NULL: "global_step<global_steps>" */
    zl_zero_counts counts;
    const char *precision;        /* engine.json's: "f32", "bf16" or "fp16" */
    const char *optimizer;        /* its type there: "Adam", "AdamW", "Lamb" or "SGD" */
    const char *param_groups;     /* a JSON list, an object of hyperparameters per group; NULL: the
                                   * engine's, under torch's names (lr, betas, eps, weight_decay, ...) */
    const char *members;          /* a JSON object whose members join engine.json's (client_state and
                                   * any of the host's own); NULL: none */
    zl_zero_model_writer write_model;   /* NULL: the engine's parameters, in order, by their names */
    void *user;
    bool keep_latest;             /* leave DIR/latest as it is */
    zl_comm *comm;                /* the ranks, when z is NULL (a model without an optimizer) */
} zl_zero_save_args;

/* Save a checkpoint of z (NULL: a model without an optimizer, its file from
 * write_model, the ranks a->comm) into DIR/TAG (collective); path (may be
 * NULL) receives DIR/TAG. Refused before anything is written: a bad tag, members
 * that are not a JSON object or name a key of the engine's, param groups
 * that are not a list of objects (ZL_EINVAL naming them). */
ZL_API zl_status zl_zero_save(zl_zero *z, const char *dir, const zl_zero_save_args *a, char *path, size_t path_size);

/* What a load takes. */
typedef struct zl_zero_load_args {
    const char *tag;              /* NULL: the one DIR/latest names */
    const char *optimizer;        /* the type of the host's optimizer: a checkpoint of another is refused */
    bool skip_optimizer;          /* the model's weights only: the optimizer's state is left as it is */
    bool masters_from_model;      /* the f32 masters from model.safetensors' weights (DeepSpeed's
                                   * load_from_fp32_weights false), not from the shards */
    bool hparams;                 /* set the engine's hyperparameters from the saved param groups
                                   * (a Lua engine sets its optimizer's groups itself) */
    bool keep_generator;          /* leave this process's generator as it is */
} zl_zero_load_args;

typedef struct zl_zero_ckpt zl_zero_ckpt;

/* Open DIR/TAG for a load into z (z NULL: a model without an optimizer, and
 * comm its ranks; otherwise comm is ignored). Collective. engine.json and
 * every file are checked (against the manifest, the saved partition against
 * z's parameters, each shard's tensors against engine.json) before anything
 * changes: errors name the folder, file and key. *out is NULL (ZL_OK) when no
 * tag is given and DIR has no `latest`. Nothing is changed until
 * zl_zero_ckpt_load, so a host checks its own members first. */
ZL_API zl_status zl_zero_ckpt_open(zl_zero *z, zl_comm *comm, const char *dir, const zl_zero_load_args *a,
                                   zl_zero_ckpt **out);
ZL_API const char *zl_zero_ckpt_path(const zl_zero_ckpt *c);          /* DIR/TAG */
ZL_API const char *zl_zero_ckpt_json(const zl_zero_ckpt *c, size_t *len);   /* engine.json's text */
ZL_API zl_zero_counts zl_zero_ckpt_counts(const zl_zero_ckpt *c);
/* Load it (collective): this rank's chunks of the masters and optimizer
 * state from whichever saved chunks hold them (any world size and stage
 * loads any other's), or the masters from the model's weights; the step
 * counts, the hyperparameters when asked, the working weights brought up to
 * date, and this process's generator set to its rank's saved state. */
ZL_API zl_status zl_zero_ckpt_load(zl_zero_ckpt *c);
ZL_API void zl_zero_ckpt_close(zl_zero_ckpt *c);   /* NULL is a no-op */

/* Open, load and close. *found is false (ZL_OK) when DIR has no `latest`
 * and no tag is given; counts (may be NULL) receives the counters and
 * *json (may be NULL; free() it) engine.json's text, for the host's members. */
ZL_API zl_status zl_zero_load(zl_zero *z, const char *dir, const zl_zero_load_args *a, bool *found,
                              zl_zero_counts *counts, char **json);

/* ---- figures ---- */
typedef struct zl_zero_memory {
    int64_t params;            /* working parameters held (gathered ones included), bytes */
    int64_t grads;             /* the gradient buffer */
    int64_t master;            /* f32 masters in memory (not aliased by params) */
    int64_t moments;           /* optimizer state in memory */
    int64_t reduce_buffers;    /* gradient bucket buffers */
    int64_t allgather_buffers; /* stage 1-2 all-gather buffers */
    int64_t swap_buffers;      /* offload_optimizer's swap buffers */
    int64_t nvme;              /* bytes in swap files */
    int64_t partition_elements;
    int64_t peak_live;         /* stage 3: most elements of non-persistent parameters gathered at once */
    double comm_seconds;       /* time spent issuing and waiting on collectives */
    double io_seconds;         /* time spent waiting on swap I/O */
    int64_t read_bytes, write_bytes;   /* swap traffic */
    int64_t collectives;       /* collectives started so far (on one rank, the copies standing in for them) */
    double io_busy_seconds;    /* time with swap I/O in flight, waited for or not (io_seconds: waited for) */
} zl_zero_memory;

ZL_API zl_status zl_zero_memory_of(const zl_zero *z, zl_zero_memory *out);

/* ---- zero.Init: partitioned construction ----
 * A store that keeps only this rank's chunk (f32) of each parameter given to
 * it, in memory or, with offload_param on NVMe, in a swap file; the tensor's
 * data is emptied. zl_zero_create takes the chunks over. Collective
 * functions: every rank calls them for the same tensors in the same order. */
ZL_API zl_status zl_zero_init_new(zl_comm *comm, const zl_zero_config *cfg, zl_zero_init **out);
ZL_API void zl_zero_init_free(zl_zero_init *in);
/* p (f32, whole) becomes partitioned. */
ZL_API zl_status zl_zero_init_partition(zl_zero_init *in, zl_tensor *p);
ZL_API bool zl_zero_init_holds(const zl_zero_init *in, const zl_tensor *p);
/* p's whole values gathered into its data (collective). */
ZL_API zl_status zl_zero_init_gather(zl_zero_init *in, zl_tensor *p);
/* End of a gather: with root >= 0 root's values become p's chunks; p's data
 * is emptied again (collective). */
ZL_API zl_status zl_zero_init_scatter(zl_zero_init *in, zl_tensor *p, int root);
/* p whole again on every rank and no longer held (collective). */
ZL_API zl_status zl_zero_init_unpartition(zl_zero_init *in, zl_tensor *p);
/* p, which no engine trains (frozen), stays partitioned for good: it is
 * gathered whole (in `dtype`: f32, bf16 or f16) before each op that reads it,
 * in forward and backward, and emptied after; its chunk is charged to params.
 * Every rank must run the same ops. Freeing the store removes the hook. */
ZL_API zl_status zl_zero_init_gather_on_use(zl_zero_init *in, zl_tensor *p, zl_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
