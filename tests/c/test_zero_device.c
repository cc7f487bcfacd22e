/* ZeRO with its parameters on a device (the stand-in device, stand_in.c)
 * against the same run in host memory: every stage, f32 and half working
 * copies, Adam, SGD and Lamb, gradient clipping, an fp16 overflow skipped,
 * the optimizer and the parameters offloaded to host memory (and to NVMe in
 * a build with libaio), overlap_comm and several buckets. The gradient norms,
 * the f32 masters and the working parameters must have the host run's bits.
 * On one rank with "self" (the device's buffers reduced where they are);
 * under mpirun with "mpi" on every rank (buffers staged through host
 * memory), as c.test_zero_device_ranks runs it. */
#include <stdlib.h>
#include "stand_in.h"

#define NP 5
#define STEPS 4
#define ACCUM 2

static const int64_t shapes[NP][2] = {{5, 3}, {5, 0}, {40, 7}, {2, 5}, {2, 0}};
static const char *const names[NP] = {"w1", "b1", "w2", "w3", "b3"};

static zl_comm *comm;

typedef struct run {
    zl_tensor *p[NP];
    zl_zero *z;
    zl_zero_step_info info[STEPS];
} run;

static void make(run *r, bool dev, const zl_zero_config *cfg)
{
    zl_manual_seed(11);
    zl_zero_param ps[NP];
    for (int i = 0; i < NP; i++) {
        zl_tensor *h = zl_tensor_randn(ZL_DTYPE_F32, shapes[i][1] ? 2 : 1, shapes[i], NULL);
        r->p[i] = dev ? to_fake(h) : zl_tensor_retain(h);
        zl_tensor_release(h);
        zl_tensor_set_requires_grad(r->p[i], true);
        ps[i] = (zl_zero_param){.tensor = r->p[i], .group = i % 2, .name = names[i]};
    }
    zl_zero_hparams hp[2] = {zl_zero_hparams_defaults(), zl_zero_hparams_defaults()};
    hp[0].lr = 0.05, hp[0].weight_decay = 0.1, hp[0].momentum = 0.9;
    hp[1].lr = 0.02, hp[1].momentum = 0.5, hp[1].nesterov = true;
    r->z = NULL;
    CHECK(zl_zero_create(comm, cfg, ps, NP, hp, 2, NULL, 0, &r->z) == ZL_OK);
}

/* A micro-step's forward and backward: each parameter read by a copy (stage
 * 3 gathers it around the read) and handed a gradient fixed by the step, the
 * parameter and the rank; one gradient is inf where the run asks for it. */
static void micro(run *r, bool dev, int step, bool overflow)
{
    for (int i = 0; i < NP; i++) {
        zl_tensor *y = zl_tensor_clone(r->p[i]);
        CHECK(y != NULL);
        if (!y) return;
        zl_manual_seed(1000 * (uint64_t)step + 10 * (uint64_t)i + (uint64_t)zl_comm_rank(comm));
        zl_tensor *g0 = zl_tensor_randn(ZL_DTYPE_F32, zl_tensor_ndim(y), zl_tensor_shape(y), NULL);
        if (overflow && i == 2) zl_tensor_set(g0, 17, INFINITY);
        zl_tensor *gh = zl_tensor_to(g0, zl_tensor_dtype(y));
        zl_tensor *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
        CHECK(zl_backward(y, g, false) == ZL_OK);
        zl_tensor *objs[] = {g, gh, g0, y};
        for (size_t k = 0; k < sizeof objs / sizeof *objs; k++) zl_tensor_release(objs[k]);
    }
}

static void train(run *r, bool dev, const zl_zero_config *cfg, double loss_scale, int overflow_step)
{
    make(r, dev, cfg);
    for (int s = 0; r->z && s < STEPS; s++) {
        for (int a = 0; a < ACCUM; a++) {
            CHECK(zl_zero_begin_forward(r->z) == ZL_OK);
            micro(r, dev, ACCUM * s + a, s == overflow_step && a == 1);
            CHECK(zl_zero_end_backward(r->z) == ZL_OK);
        }
        CHECK(zl_zero_step(r->z, loss_scale, 2.0, overflow_step >= 0, &r->info[s]) == ZL_OK);
        CHECK(r->info[s].overflow == (s == overflow_step));
    }
}

static void finish(run *r)
{
    zl_zero_free(r->z);
    for (int i = 0; i < NP; i++) zl_tensor_release(r->p[i]);
}

/* The same run with the parameters in host memory (h) and on the device (d). */
static void compare(const char *what, const zl_zero_config *cfg, double loss_scale, int overflow_step)
{
    run h, d;
    int64_t opt0 = fake_bytes(ZL_MEM_OPTIMIZER);
    train(&h, false, cfg, loss_scale, overflow_step);
    train(&d, true, cfg, loss_scale, overflow_step);
    if (!h.z || !d.z) {
        zt_fail(__FILE__, __LINE__, "%s: no engine: %s", what, zl_last_error());
        return;
    }
    /* The masters and moments are on the device unless the optimizer is offloaded. */
    bool offloaded = cfg->stage > 0 && cfg->offload_optimizer.device != ZL_OFFLOAD_NONE;
    CHECK((fake_pinned_bytes() > 0) == (offloaded && cfg->offload_optimizer.pin_memory));
    if ((fake_bytes(ZL_MEM_OPTIMIZER) > opt0) == offloaded)
        zt_fail(__FILE__, __LINE__, "%s: %lld bytes of optimizer state on the device", what,
                (long long)(fake_bytes(ZL_MEM_OPTIMIZER) - opt0));
    CHECK(h.info[0].grad_norm > 0 && (loss_scale != 1.0 || h.info[0].clip_coef < 1));   /* real gradients, clipped */
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&h.info[s].grad_norm, &d.info[s].grad_norm, sizeof(double)) ||
            h.info[s].clip_coef != d.info[s].clip_coef)
            zt_fail(__FILE__, __LINE__, "%s: step %d: norm %.17g on the device, %.17g on the host", what, s,
                    d.info[s].grad_norm, h.info[s].grad_norm);
    for (int i = 0; i < NP; i++) {
        zl_tensor *mh = NULL, *md = NULL;
        CHECK(zl_zero_full_fp32(h.z, h.p[i], &mh) == ZL_OK && zl_zero_full_fp32(d.z, d.p[i], &md) == ZL_OK);
        if (mh && md && memcmp(zl_tensor_data(mh), zl_tensor_data(md), (size_t)zl_tensor_numel(mh) * 4))
            zt_fail(__FILE__, __LINE__, "%s: the master of %s differs: %.9g vs %.9g", what, names[i],
                    zl_tensor_get(md, 0), zl_tensor_get(mh, 0));
        CHECK(zl_zero_gather(h.z, h.p[i]) == ZL_OK && zl_zero_gather(d.z, d.p[i]) == ZL_OK);
        CHECK(zl_tensor_device(d.p[i]) == ZL_DEVICE_CUDA);
        zl_tensor *wh = zl_tensor_contiguous(h.p[i]);
        check_bits(wh, d.p[i], what);
        CHECK(zl_zero_release(h.z, h.p[i]) == ZL_OK && zl_zero_release(d.z, d.p[i]) == ZL_OK);
        zl_tensor_release(wh);
        zl_tensor_release(mh);
        zl_tensor_release(md);
    }
    finish(&h);
    finish(&d);
}

static zl_zero_config base(int stage, zl_dtype dt)
{
    zl_zero_config c = zl_zero_config_defaults();
    c.stage = stage;
    c.dtype = dt;
    c.reduce_bucket_size = 200;            /* several buckets */
    c.allgather_bucket_size = 150;
    c.param_persistence_threshold = 4;
    c.prefetch_bucket_size = 60;
    return c;
}

__attribute__((constructor(300))) static void open_comm(void)
{
    /* mpirun sets this: the "mpi" communicator over every rank. */
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    if (zl_comm_open(world ? "mpi" : "self", &comm)) {
        printf("cannot open the communicator: %s\n", zl_last_error());
        exit(1);
    }
    /* The host's kernel whose multiply-adds are the device's. */
    if (zl_optim_set_kernel("avx2")) {
        printf("%s\n", zl_last_error());
        exit(1);
    }
}

__attribute__((destructor)) static void close_comm(void) { zl_comm_close(comm); }

TEST(every_stage_steps_the_host_bits)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int d = 0; d < 2; d++) {
            zl_zero_config c = base(stage, d ? ZL_DTYPE_BF16 : ZL_DTYPE_F32);
            c.overlap_comm = (stage + d) % 2 == 1;
            char what[64];
            snprintf(what, sizeof what, "stage %d %s", stage, zl_dtype_name(c.dtype));
            compare(what, &c, 1.0, -1);
        }
}

TEST(sgd_lamb_and_the_gradient_paths)
{
    zl_zero_config c = base(2, ZL_DTYPE_F32);
    c.optimizer = ZL_ZERO_SGD;
    compare("stage 2 sgd", &c, 1.0, -1);
    c = base(0, ZL_DTYPE_BF16);
    c.optimizer = ZL_ZERO_LAMB;
    compare("stage 0 lamb", &c, 1.0, -1);
    c = base(2, ZL_DTYPE_BF16);
    c.reduce_scatter = false;
    c.grad_accum_dtype = ZL_DTYPE_BF16;
    compare("stage 2 all-reduce, bf16 gradients", &c, 1.0, -1);
    c = base(3, ZL_DTYPE_F32);
    c.use_all_reduce_for_fetch_params = true;
    c.overlap_comm = true;
    compare("stage 3 gathered by all-reduce", &c, 1.0, -1);
}

TEST(an_fp16_overflow_is_skipped_on_both)
{
    for (int stage = 1; stage <= 3; stage += 2) {
        zl_zero_config c = base(stage, ZL_DTYPE_F16);
        compare("fp16 overflow", &c, 256.0, 2);
    }
}

TEST(offloaded_optimizer_and_parameters)
{
    for (int stage = 1; stage <= 3; stage++) {
        zl_zero_config c = base(stage, stage == 2 ? ZL_DTYPE_F32 : ZL_DTYPE_BF16);
        c.offload_optimizer.device = ZL_OFFLOAD_CPU;
        c.offload_optimizer.pin_memory = c.offload_param.pin_memory = stage != 2;
        if (stage == 3) c.offload_param.device = ZL_OFFLOAD_CPU;
        /* The gradients' copies to host memory (and stage 3's parameter
         * fetches) go on the copy stream, whose copies the stand-in does
         * only when waited for; and without one, as plain copies. */
        int64_t queued = fake_copies_queued();
        compare("offload cpu", &c, 1.0, -1);
        CHECK(fake_copies_queued() > queued && fake_copies_pending() == 0);
        fake_use_streams(false);
        queued = fake_copies_queued();
        compare("offload cpu, no copy stream", &c, 1.0, -1);
        CHECK(fake_copies_queued() == queued);
        fake_use_streams(true);
    }
    zl_zero_config c3 = base(3, ZL_DTYPE_F32);   /* f32 masters in host memory, working chunks on the device */
    c3.offload_optimizer.device = ZL_OFFLOAD_CPU;
    compare("stage 3 f32, optimizer offloaded", &c3, 1.0, -1);
    CHECK(fake_pinned_bytes() == 0);   /* every pinned buffer given back */
    if (zl_aio_unavailable()) {
        printf("  (NVMe offload skipped: %s)\n", zl_aio_unavailable());
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", zt_tmp_dir());
    zl_zero_config c = base(3, ZL_DTYPE_BF16);
    c.offload_optimizer = (zl_zero_offload){.device = ZL_OFFLOAD_NVME, .nvme_path = dir, .buffer_count = 4,
                                            .pipeline_read = true};
    c.offload_param = (zl_zero_offload){.device = ZL_OFFLOAD_NVME, .nvme_path = dir, .buffer_count = 2,
                                        .buffer_size = 1000, .max_in_cpu = 20};
    c.sub_group_size = 100;
    compare("offload nvme", &c, 1.0, -1);
}

TEST(a_model_in_two_places_is_refused)
{
    zl_tensor *a = zt_randn(SHAPE(4)), *b = zt_randn(SHAPE(3)), *bd = to_fake(b);
    zl_tensor_set_requires_grad(a, true);
    zl_tensor_set_requires_grad(bd, true);
    zl_zero_param ps[2] = {{bd, 0, "on_device"}, {a, 0, "on_host"}};
    zl_zero_hparams hp = zl_zero_hparams_defaults();
    zl_zero_config c = zl_zero_config_defaults();
    zl_zero *z = NULL;
    CHECK_ERR(zl_zero_create(comm, &c, ps, 2, &hp, 1, NULL, 0, &z),
              "parameter on_host is on cpu and on_device on cuda:7: a model's parameters live in one place");
    CHECK(z == NULL);
    zl_zero_init *in = NULL;
    CHECK(zl_zero_init_new(comm, &c, &in) == ZL_OK);
    CHECK_ERR(zl_zero_init_partition(in, bd), "zero.Init: the parameter is on cuda:7");
    zl_zero_init_free(in);
    zl_tensor *objs[] = {bd, b, a};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}
