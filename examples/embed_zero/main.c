/* embed_zero: a host program that trains the digits MLP (64 -> 32 -> 10) with
 * ZeRO through the C API: the model built from tensors, the data read with
 * zl_read_csv, each step through zl_zero_*. Its DeepSpeed config is read by
 * zlua_ds_config_read (zlua/ds_config.h), which checks it as zlua.initialize
 * does in a private Lua state, closed before training starts: the stage,
 * buckets, offload, optimizer, batch sizes, clipping and lr schedule come
 * from there. train.lua beside it is its twin in Lua; both print the same
 * `step N loss X` lines, and each resumes the other's checkpoints
 * (zl_zero_save / zl_zero_load: the folder engine:save_checkpoint writes).
 *   mpirun -np 2 embed_zero --deepspeed_config ds.json --steps N [--data digits.csv.gz] [--seed S]
 *                           [--load DIR] [--save DIR] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlua/ds_config.h>
#include <zlua/zlua.h>

#define NLAYER 2

typedef struct model {
    zl_tensor *w[NLAYER], *b[NLAYER];
} model;

/* Says what failed, and leaves it for the other ranks, which then stop with
 * "rank R failed: <this message>" instead of waiting for this one. The
 * communicator stays open: closing is collective, and they are elsewhere. */
static int die(const char *what)
{
    char msg[1200];
    snprintf(msg, sizeof msg, "embed_zero: %s: %s", what, zl_last_error());
    fprintf(stderr, "%s\n", msg);
    zl_comm_note_failure(msg);
    return 1;
}

/* nn.Linear's initialisation: w then b, both uniform in +-1/sqrt(in). */
static zl_tensor *param(int ndim, const int64_t *shape, double bound)
{
    zl_tensor *t = zl_tensor_new(ZL_DTYPE_F32, ndim, shape, ZL_MEM_PARAMS);
    if (!t || zl_tensor_uniform_(t, -bound, bound, NULL) || zl_tensor_set_requires_grad(t, true)) {
        zl_tensor_release(t);
        return NULL;
    }
    return t;
}

static int build(model *m, const int *sizes)
{
    for (int l = 0; l < NLAYER; l++) {
        double bound = 1 / sqrt((double)sizes[l]);
        m->w[l] = param(2, (int64_t[]){sizes[l + 1], sizes[l]}, bound);
        m->b[l] = m->w[l] ? param(1, (int64_t[]){sizes[l + 1]}, bound) : NULL;
        if (!m->b[l]) return die("building the model");
    }
    return 0;
}

static zl_tensor *forward(model *m, zl_tensor *x)
{
    zl_tensor *h = zl_linear(x, m->w[0], m->b[0]);
    zl_tensor *a = h ? zl_relu(h) : NULL;
    zl_tensor *out = a ? zl_linear(a, m->w[1], m->b[1]) : NULL;
    zl_tensor_release(h);
    zl_tensor_release(a);
    return out;
}

/* The rows of micro-batch `index` (a global count over ranks and micro-steps), wrapping around. */
static zl_tensor *rows(int64_t index, int64_t micro, int64_t n)
{
    zl_tensor *t = zl_tensor_new(ZL_DTYPE_I64, 1, &micro, ZL_MEM_OTHER);
    if (!t) return NULL;
    int64_t *p = zl_tensor_data(t);
    for (int64_t i = 0; i < micro; i++) p[i] = (index * micro + i) % n;
    return t;
}

/* The lr (and OneCycle's betas) of step t of the schedule into the engine:
 * zlua.initialize's engine takes optimizer step k at t = start + k - 1. */
static zl_status schedule(zl_zero *z, const zl_lr_schedule *s, int64_t t, zl_zero_hparams *hp)
{
    double betas[2];
    zl_status st = zl_lr_schedule_lr(s, t, 0, &hp->lr);
    if (!st && s->kind == ZL_LR_ONE_CYCLE && s->cycle_momentum && !(st = zl_lr_schedule_betas(s, t, 0, betas))) {
        hp->beta1 = betas[0];
        hp->beta2 = betas[1];
    }
    return st ? st : zl_zero_set_hparams(z, 0, hp);
}

static const char *option(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2)
        if (strcmp(argv[i], "--deepspeed_config") && strcmp(argv[i], "--steps") && strcmp(argv[i], "--data") &&
            strcmp(argv[i], "--seed") && strcmp(argv[i], "--load") && strcmp(argv[i], "--save")) {
            fprintf(stderr, "embed_zero: unknown option %s\nusage: embed_zero --deepspeed_config ds.json "
                    "--steps N [--data digits.csv.gz] [--seed S] [--load DIR] [--save DIR]\n", argv[i]);
            return 2;
        }
    const char *load_dir = option(argc, argv, "--load", NULL), *save_dir = option(argc, argv, "--save", NULL);
    const char *cfg_path = option(argc, argv, "--deepspeed_config", NULL);
    int steps = atoi(option(argc, argv, "--steps", "20"));
    const char *data = option(argc, argv, "--data", ZLUA_DIGITS_CSV);
    int seed = atoi(option(argc, argv, "--seed", "1"));
    if (!cfg_path || steps < 1) {
        fprintf(stderr, "embed_zero: --deepspeed_config FILE and --steps N (>= 1) are needed\n");
        return 2;
    }
    zl_comm *comm;
    if (zl_comm_open(getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "self", &comm)) return die("opening the communicator");
    int rank = zl_comm_rank(comm), world = zl_comm_size(comm);
    zlua_ds_config *cfg;
    if (zlua_ds_config_read(cfg_path, world, &cfg)) {
        fprintf(stderr, "embed_zero: %s\n", zl_last_error());
        zl_comm_close(comm);
        return 1;
    }
    zlua_ds_config_print_notes(cfg, rank);
    zlua_ds_training tr = zlua_ds_config_training(cfg);
    const char *refused = NULL;
    if (!zlua_ds_config_optimizer(cfg)) refused = "it has no optimizer, and the example trains with the one it names";
    else if (tr.fp16 || tr.bf16) refused = "fp16 or bf16 is enabled, and the example trains in f32";
    if (refused) {
        fprintf(stderr, "embed_zero: %s: %s\n", cfg_path, refused);
        zlua_ds_config_free(cfg);
        zl_comm_close(comm);
        return 1;
    }
    zl_zero_hparams hp = zlua_ds_config_hparams(cfg);
    int64_t start;
    const zl_lr_schedule *sched = zlua_ds_config_schedule(cfg, &start);

    zl_tensor *csv = zl_read_csv(data, false);
    if (!csv) return die("reading the digits");
    int64_t n = zl_tensor_size(csv, 0);
    if (zl_tensor_size(csv, 1) != 65) {
        fprintf(stderr, "embed_zero: %s: expected 65 columns (64 pixels and a label)\n", data);
        return 1;
    }
    zl_tensor *px = zl_tensor_narrow(csv, 1, 0, 64);
    zl_tensor *x_all = px ? zl_affine(px, 1.0 / 16, 0) : NULL;    /* pixels scaled to [0, 1] */
    zl_tensor *lab = zl_tensor_select(csv, 1, 64);
    zl_tensor *y_all = lab ? zl_tensor_to(lab, ZL_DTYPE_I64) : NULL;
    if (!x_all || !y_all) return die("preparing the digits");

    zl_manual_seed((uint64_t)seed);
    model m;
    if (build(&m, (int[]){64, 32, 10})) return 1;
    zl_zero_param params[2 * NLAYER];
    /* nn.Sequential's names in the Lua twin, so each loads the other's checkpoints. */
    const char *names[] = {"1.weight", "1.bias", "3.weight", "3.bias"};
    for (int l = 0; l < NLAYER; l++) {
        params[2 * l] = (zl_zero_param){.tensor = m.w[l], .group = 0, .name = names[2 * l]};
        params[2 * l + 1] = (zl_zero_param){.tensor = m.b[l], .group = 0, .name = names[2 * l + 1]};
    }
    zl_zero *z;
    if (zl_zero_create(comm, zlua_ds_config_zero(cfg), params, 2 * NLAYER, &hp, 1, NULL, 0, &z))
        return die("starting ZeRO");
    int64_t gas = tr.gradient_accumulation_steps;
    /* Resumed where the checkpoint stopped: the step count picks the data and the schedule's place. */
    int first = 1;
    if (load_dir) {
        zl_zero_load_args la = {.optimizer = zlua_ds_config_optimizer(cfg), .hparams = true};
        bool found = false;
        zl_zero_counts counts;
        if (zl_zero_load(z, load_dir, &la, &found, &counts, NULL)) return die("loading the checkpoint");
        if (found) first = (int)counts.global_steps + 1;
    }

    for (int step = first; step <= steps; step++) {
        double sum = 0;
        for (int64_t micro = 0; micro < gas; micro++) {
            int64_t index = ((int64_t)(step - 1) * gas + micro) * world + rank;
            zl_tensor *idx = rows(index, tr.micro_batch, n);
            zl_tensor *x = idx ? zl_index_select(x_all, 0, idx) : NULL;
            zl_tensor *y = idx ? zl_index_select(y_all, 0, idx) : NULL;
            if (!x || !y || zl_zero_begin_forward(z)) return die("a micro-batch");
            zl_tensor *logits = forward(&m, x);
            zl_tensor *loss = logits ? zl_cross_entropy(logits, y, -100, ZL_REDUCE_MEAN) : NULL;
            zl_tensor *scaled = loss && gas > 1 ? zl_affine(loss, 1.0 / (double)gas, 0) : zl_tensor_retain(loss);
            if (!scaled) return die("forward");
            sum += zl_tensor_get(scaled, 0);
            if (zl_backward(scaled, NULL, false) || zl_zero_end_backward(z)) return die("backward");
            zl_tensor *all[] = {idx, x, y, logits, loss, scaled};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zl_tensor_release(all[i]);
        }
        if (sched && schedule(z, sched, start + step - 1, &hp)) return die("the lr schedule");
        zl_zero_step_info info;
        if (zl_zero_step(z, 1.0, tr.gradient_clipping, false, &info)) return die("the optimizer step");
        /* The loss of the step: the micro-steps' sum, averaged over the ranks. */
        zl_tensor *t = zl_tensor_full(ZL_DTYPE_F32, 1, (int64_t[]){1}, sum);
        if (!t || zl_comm_allreduce(comm, t, ZL_COMM_AVG)) return die("averaging the loss");
        if (rank == 0) printf("step %d loss %.6g\n", step, zl_tensor_get(t, 0));
        zl_tensor_release(t);
    }
    if (save_dir) {
        /* The schedule's place as zlua.initialize's scheduler keeps it, so the Lua twin resumes it. */
        char members[96] = "{}";
        if (sched) snprintf(members, sizeof members, "{\"lr_scheduler\": {\"last_batch_iteration\": %lld}}",
                            (long long)(start + steps - 1));
        zl_zero_save_args sa = {.counts = {steps, steps * tr.train_batch_size, 0, steps * gas},
                                .optimizer = zlua_ds_config_optimizer(cfg), .members = members};
        if (zl_zero_save(z, save_dir, &sa, NULL, 0)) return die("saving the checkpoint");
    }
    zl_zero_memory mem;
    if (zl_zero_memory_of(z, &mem)) return die("reading the figures");
    if (rank == 0 && mem.read_bytes + mem.write_bytes > 0)
        printf("rank 0 swapped %lld bytes in, %lld out\n", (long long)mem.read_bytes, (long long)mem.write_bytes);
    fflush(stdout);
    zl_zero_free(z);
    for (int l = 0; l < NLAYER; l++) {
        zl_tensor_release(m.w[l]);
        zl_tensor_release(m.b[l]);
    }
    zl_tensor *rest[] = {csv, px, x_all, lab, y_all};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) zl_tensor_release(rest[i]);
    zlua_ds_config_free(cfg);
    zl_comm_close(comm);
    return 0;
}
