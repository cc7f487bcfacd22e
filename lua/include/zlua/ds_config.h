/* zlua/ds_config.h — a DeepSpeed config (ds_config.json) read for a C host
 * with exactly what zlua.initialize makes of it: zlua.config's checks, then
 * the translation into the engine's structs. Link libzlua-lua (and libzlua). */
#ifndef ZLUA_DS_CONFIG_H
#define ZLUA_DS_CONFIG_H

#include "zlua/optim.h"
#include "zlua/schedule.h"
#include "zlua/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the reader works: a private Lua state runs the Lua layer's own code on
 * the file (zlua.config.load's checks, "auto" and the batch arithmetic; the
 * engine's translation into zl_zero_config, the optimizer's param-group
 * defaults, the fp16 loss scaler, zlua.lr's schedule), the results are
 * copied into memory the object owns, and the state is closed before the
 * call returns. So a file gives the same values here as to zlua.initialize
 * at the same world size, and is refused where it would be refused there,
 * with the same message. The state has its own engine context; the caller's
 * (zlua/context.h) is current again when the call returns. Nothing else is
 * shared between objects or calls: any thread may read its own. */
typedef struct zlua_ds_config zlua_ds_config;

/* Read and check `path` for a job of `world_size` data-parallel ranks (>= 1).
 * On success *out is a new object (zlua_ds_config_free). On failure *out is
 * NULL and zl_last_error() holds zlua.config's message, which names the file
 * and, for a key, its line and the nearest known key:
 *   ZL_EIO     the file cannot be read ("config: cannot read ds.json: No such
 *              file or directory"; a folder; over 16 MiB)
 *   ZL_EFORMAT the text is not JSON ("ds.json:3:7: ...")
 *   ZL_EINVAL  the config is wrong: an unknown key in a section DeepSpeed
 *              checks strictly ("ds.json:5: unknown key
 *              zero_optimization.stgae (did you mean zero_optimization.stage?)"),
 *              a bad type or range, a feature zlua does not have, "auto"
 *              with nothing to fill it (no script arguments reach this reader),
 *              batch sizes that do not agree, a scheduler without an
 *              optimizer (as zlua.initialize refuses it); also a NULL
 *              argument or a world_size below 1
 *   ZL_ENOMEM  out of memory.
 * An unknown key outside the strict sections is not an error (DeepSpeed
 * ignores it, and so does zlua.config): it is a warning (below). */
ZL_API zl_status zlua_ds_config_read(const char *path, int world_size, zlua_ds_config **out);
/* NULL is a no-op. Every pointer the accessors returned becomes invalid.
 * The accessors below take an object zlua_ds_config_read made (not NULL). */
ZL_API void zlua_ds_config_free(zlua_ds_config *c);

/* zero_optimization, aio, data_types and the working dtype (bf16 or fp16
 * enabled), as zl_zero_create takes them; its optimizer field follows the
 * config's optimizer (Adam when the config has none, as zero.Init's). The
 * nvme_path strings belong to the object. Borrowed, valid until free. */
ZL_API const zl_zero_config *zlua_ds_config_zero(const zlua_ds_config *c);

/* The optimizer section's type ("Adam", "AdamW", "Lamb" or "SGD"), or NULL
 * when the config has none. Borrowed, valid until free. */
ZL_API const char *zlua_ds_config_optimizer(const zlua_ds_config *c);
/* The hyperparameters of a param group that sets none of its own: the
 * optimizer section's params over the optimizer's defaults, as zlua.initialize
 * hands its groups to zl_zero_create (zl_zero_hparams_defaults() when the
 * config has no optimizer). The lr is the optimizer's, before any schedule. */
ZL_API zl_zero_hparams zlua_ds_config_hparams(const zlua_ds_config *c);

/* The settings of the training loop around zl_zero_*. */
typedef struct zlua_ds_training {
    int world_size;                      /* as given to the reader */
    int64_t train_batch_size;            /* = micro_batch x gradient_accumulation_steps x world_size */
    int64_t micro_batch;                 /* train_micro_batch_size_per_gpu */
    int64_t gradient_accumulation_steps; /* micro-batches per optimizer step */
    double gradient_clipping;            /* max_norm for zl_zero_step; 0: off */
    int64_t steps_per_print;             /* 0: not given (no step log) */
    bool fp16, bf16;                     /* at most one; zero.dtype is f16 or bf16 then */
    zl_loss_scaler_config loss_scaler;   /* with fp16: the fp16 block, checked by zl_loss_scaler_new */
} zlua_ds_training;

ZL_API zlua_ds_training zlua_ds_config_training(const zlua_ds_config *c);

/* The scheduler section as the engine's schedule, as zlua.lr builds it over
 * the config's optimizer with one param group (so a list in the config has
 * one value, and the group's values stand for every group of the host), or
 * NULL when the config has none. OneCycle with cycle_momentum sets the betas
 * too (zl_lr_schedule_betas, at the same t); it is off for SGD, which has no
 * betas. WarmupCosineLR's base_lr is the optimizer's lr.
 * *start (may be NULL) receives last_batch_iteration: -1 for a fresh run.
 * The caller keeps the position and sets each step's lr as zlua.initialize's
 * engine does: the k-th optimizer step (from 1) takes zl_lr_schedule_lr at
 * t = start + k - 1 (t = k - 2 in a fresh run: the first step takes the
 * value at t = -1). Borrowed, valid until free. */
ZL_API const zl_lr_schedule *zlua_ds_config_schedule(const zlua_ds_config *c, int64_t *start);

/* What zlua.config says about the file besides errors, line i (from 0), or
 * NULL past the last; borrowed, valid until free:
 *   warnings: an unknown key outside the strict sections with the nearest
 *             known key, a deprecated spelling, an offload block ignored at
 *             the stage; zlua.initialize prints each on every rank as
 *             "zlua.config: warning: <line>"
 *   notices:  a key zlua accepts and has no use for, and why; zlua.initialize
 *             prints each on rank 0 as "zlua: note: <line>" (the pin_memory
 *             ones only with the model in host memory). */
ZL_API const char *zlua_ds_config_warning(const zlua_ds_config *c, int i);
ZL_API const char *zlua_ds_config_notice(const zlua_ds_config *c, int i);
/* Writes them to stderr as zlua.initialize does for a model in host memory:
 * the warnings on every rank, the notices on rank 0. */
ZL_API void zlua_ds_config_print_notes(const zlua_ds_config *c, int rank);

#ifdef __cplusplus
}
#endif
#endif
