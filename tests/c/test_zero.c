/* engine/zero through zlua/zero.h on one rank (the "self" communicator):
 * every stage steps the same bits, stage 3 empties and gathers parameters
 * around their use, DeepSpeed's state accessors read and write a
 * parameter's gradient, master and state, the checkpoint walk reads and
 * writes masters, zero.Init's
 * store hands its chunks over, a shard and a whole checkpoint resume at
 * another stage, memory
 * figures add up, a step without an ended backward is refused, and bad input
 * is refused by name. Several ranks: tests/dist and examples/embed_zero. */
#include <stdlib.h>
#include "harness.h"

#define NP 4

typedef struct net {
    zl_tensor *p[NP];      /* w1 [5, 3], b1 [5], w2 [2, 5], b2 [2] */
} net;

static void make_net(net *n, uint64_t seed)
{
    zl_manual_seed(seed);
    const int64_t shapes[NP][2] = {{5, 3}, {5, 0}, {2, 5}, {2, 0}};
    for (int i = 0; i < NP; i++) {
        n->p[i] = zl_tensor_randn(ZL_DTYPE_F32, shapes[i][1] ? 2 : 1, shapes[i], NULL);
        zl_tensor_set_requires_grad(n->p[i], true);
    }
}

static void free_net(net *n)
{
    for (int i = 0; i < NP; i++) zl_tensor_release(n->p[i]);
}

static zl_tensor *forward(net *n, zl_tensor *x)
{
    zl_tensor *h = zl_linear(x, n->p[0], n->p[1]);
    zl_tensor *a = zl_tanh(h);
    zl_tensor *y = zl_linear(a, n->p[2], n->p[3]);
    zl_tensor_release(h);
    zl_tensor_release(a);
    return y;
}

static zl_zero *engine(zl_comm *c, net *n, zl_zero_config *cfg)
{
    static const char *names[NP] = {"w1", "b1", "w2", "b2"};
    zl_zero_param ps[NP];
    for (int i = 0; i < NP; i++) ps[i] = (zl_zero_param){.tensor = n->p[i], .group = i % 2, .name = names[i]};
    zl_zero_hparams hp[2] = {zl_zero_hparams_defaults(), zl_zero_hparams_defaults()};
    hp[0].lr = 0.05;
    hp[0].weight_decay = 0.1;
    hp[1].lr = 0.02;
    zl_zero *z = NULL;
    CHECK(zl_zero_create(c, cfg, ps, NP, hp, 2, NULL, 0, &z) == ZL_OK);
    return z;
}

/* Losses of `steps` steps on a fixed batch. */
static void train(zl_comm *c, zl_zero_config *cfg, int steps, float *losses, net *out)
{
    net n;
    make_net(&n, 3);
    zl_zero *z = engine(c, &n, cfg);
    zl_manual_seed(9);
    zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 3}, NULL);
    zl_tensor *t = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 2}, NULL);
    for (int s = 0; z && s < steps; s++) {
        CHECK(zl_zero_begin_forward(z) == ZL_OK);
        zl_tensor *xin = cfg->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(x) : zl_tensor_to(x, cfg->dtype);
        zl_tensor *y = forward(&n, xin);
        zl_tensor *yf = y ? zl_tensor_to(y, ZL_DTYPE_F32) : NULL;
        zl_tensor *loss = yf ? zl_mse_loss(yf, t, ZL_REDUCE_MEAN) : NULL;
        CHECK(loss != NULL);
        if (!loss) break;
        losses[s] = (float)zl_tensor_get(loss, 0);
        CHECK(zl_backward(loss, NULL, false) == ZL_OK);
        CHECK(zl_zero_end_backward(z) == ZL_OK);
        for (int i = 0; i < NP; i++) CHECK(zl_tensor_grad(n.p[i]) == NULL);   /* handed to the buckets */
        zl_zero_step_info info;
        CHECK(zl_zero_step(z, 1.0, 0.5, false, &info) == ZL_OK);
        CHECK(!info.overflow && info.grad_norm > 0);
        zl_tensor *rel[] = {xin, y, yf, loss};
        for (int i = 0; i < 4; i++) zl_tensor_release(rel[i]);
    }
    if (out) {
        *out = n;
        for (int i = 0; i < NP; i++) {
            zl_tensor *m = NULL;
            CHECK(zl_zero_full_fp32(z, n.p[i], &m) == ZL_OK);
            out->p[i] = m;
            zl_tensor_release(n.p[i]);
        }
    } else {
        free_net(&n);
    }
    zl_zero_free(z);
    zl_tensor_release(x);
    zl_tensor_release(t);
}

static zl_comm *self_comm(void)
{
    zl_comm *c = NULL;
    CHECK(zl_comm_open("self", &c) == ZL_OK);
    return c;
}

TEST(stages_step_the_same_bits)
{
    zl_comm *c = self_comm();
    zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        float ref[12], got[12];
        for (int stage = 0; stage <= 3; stage++) {
            zl_zero_config cfg = zl_zero_config_defaults();
            cfg.stage = stage;
            cfg.dtype = dts[d];
            cfg.grad_accum_dtype = ZL_DTYPE_F32;
            cfg.reduce_bucket_size = 20;       /* several buckets */
            cfg.overlap_comm = stage % 2 == 1;
            cfg.param_persistence_threshold = 4;
            train(c, &cfg, 12, stage == 0 ? ref : got, NULL);
            if (stage > 0) CHECK(memcmp(ref, got, sizeof ref) == 0);
        }
        CHECK(ref[11] < 0.8f * ref[0]);
    }
    zl_comm_close(c);
}

/* A bucket holds at most the gradients there are: DeepSpeed's default
 * reduce_bucket_size (5e8 elements) took 2 GB per bucket for this net of 27
 * parameters (and ASan's shadow for it made the sanitized suite time out). */
TEST(buckets_no_larger_than_the_gradients)
{
    zl_comm *c = self_comm();
    for (int stage = 1; stage <= 3; stage++) {
        zl_zero_config cfg = zl_zero_config_defaults();
        CHECK(cfg.reduce_bucket_size == 500000000);
        cfg.stage = stage;
        zl_mem_reset_peak();
        float losses[2];
        train(c, &cfg, 2, losses, NULL);
        CHECK(zl_mem_stats_of(ZL_MEM_COMM).peak < 64 * 1024);
    }
    zl_comm_close(c);
}

TEST(stage3_parameters_are_empty_between_uses)
{
    zl_comm *c = self_comm();
    net n;
    make_net(&n, 4);
    zl_tensor *before = zl_tensor_clone(n.p[0]);
    zl_zero_config cfg = zl_zero_config_defaults();
    cfg.stage = 3;
    cfg.param_persistence_threshold = 5;   /* the biases (5 and 2 elements) stay gathered... */
    zl_zero *z = engine(c, &n, &cfg);
    CHECK(zl_tensor_numel(n.p[0]) == 0);   /* ...the weights are released */
    CHECK(zl_tensor_numel(n.p[1]) == 5 && zl_tensor_numel(n.p[3]) == 2);
    CHECK(zl_zero_gather(z, n.p[0]) == ZL_OK);
    CHECK(zl_tensor_numel(n.p[0]) == 15);
    bool same = true;
    for (int i = 0; i < 15; i++) same = same && zl_tensor_get(n.p[0], i) == zl_tensor_get(before, i);
    CHECK(same);
    CHECK(zl_zero_release(z, n.p[0]) == ZL_OK);
    CHECK(zl_tensor_numel(n.p[0]) == 0);
    zl_zero_param_info pi;
    CHECK(zl_zero_param_of(z, 1, &pi) == ZL_OK && pi.persistent && pi.k == 16 && pi.own == 5 && pi.group == 1);
    CHECK(strcmp(pi.name, "b1") == 0);
    zl_zero_memory m;
    CHECK(zl_zero_memory_of(z, &m) == ZL_OK);
    CHECK(m.partition_elements == 16 + 16 + 16 + 16);
    CHECK(m.grads == 64 * 4 && m.master == 64 * 4 && m.moments == 2 * 64 * 4);
    zl_zero_free(z);
    zl_tensor_release(before);
    free_net(&n);
    zl_comm_close(c);
}

static zl_status bump(int i, zl_tensor *master, zl_tensor *const *states, void *user)
{
    (void)states;
    int *calls = user;
    (*calls)++;
    if (i == 3) zl_tensor_fill(master, 7.0);
    return ZL_OK;
}

TEST(each_chunk_writes_masters_and_sync_publishes_them)
{
    zl_comm *c = self_comm();
    net n;
    make_net(&n, 5);
    zl_zero_config cfg = zl_zero_config_defaults();
    cfg.stage = 2;
    cfg.dtype = ZL_DTYPE_BF16;
    zl_zero *z = engine(c, &n, &cfg);
    CHECK(zl_tensor_dtype(n.p[3]) == ZL_DTYPE_BF16);
    int calls = 0;
    CHECK(zl_zero_each_chunk(z, true, NULL, bump, &calls) == ZL_OK && calls == NP);
    CHECK(zl_zero_sync_working(z) == ZL_OK);
    CHECK(zl_tensor_get(n.p[3], 0) == 7.0 && zl_tensor_get(n.p[3], 1) == 7.0);
    int nk;
    const char *const *keys = zl_zero_state_keys(z, &nk);
    CHECK(nk == 2 && strcmp(keys[0], "exp_avg") == 0 && strcmp(keys[1], "exp_avg_sq") == 0);
    CHECK(zl_zero_group_steps(z, 0) == 0);
    zl_zero_free(z);
    free_net(&n);
    zl_comm_close(c);
}

TEST(init_store_hands_its_chunks_over)
{
    zl_comm *c = self_comm();
    net n;
    make_net(&n, 6);
    zl_tensor *orig[NP];
    for (int i = 0; i < NP; i++) orig[i] = zl_tensor_clone(n.p[i]);
    zl_zero_config cfg = zl_zero_config_defaults();
    cfg.stage = 3;
    zl_zero_init *in = NULL;
    CHECK(zl_zero_init_new(c, &cfg, &in) == ZL_OK);
    for (int i = 0; i < NP; i++) CHECK(zl_zero_init_partition(in, n.p[i]) == ZL_OK);
    CHECK(zl_zero_init_holds(in, n.p[2]) && zl_tensor_numel(n.p[2]) == 0);
    CHECK(zl_zero_init_gather(in, n.p[2]) == ZL_OK && zl_tensor_numel(n.p[2]) == 10);
    CHECK(zl_zero_init_scatter(in, n.p[2], -1) == ZL_OK && zl_tensor_numel(n.p[2]) == 0);
    static const char *names[NP] = {"w1", "b1", "w2", "b2"};
    zl_zero_param ps[NP];
    for (int i = 0; i < NP; i++) ps[i] = (zl_zero_param){.tensor = n.p[i], .group = 0, .name = names[i]};
    zl_zero_hparams hp = zl_zero_hparams_defaults();
    zl_zero *z = NULL;
    CHECK(zl_zero_create(c, &cfg, ps, NP, &hp, 1, &in, 1, &z) == ZL_OK);
    CHECK(!zl_zero_init_holds(in, n.p[0]));
    for (int i = 0; z && i < NP; i++) {
        zl_tensor *m = NULL;
        CHECK(zl_zero_full_fp32(z, n.p[i], &m) == ZL_OK);
        bool same = m && zl_tensor_numel(m) == zl_tensor_numel(orig[i]);
        for (int64_t j = 0; same && j < zl_tensor_numel(m); j++) same = zl_tensor_get(m, j) == zl_tensor_get(orig[i], j);
        CHECK(same);
        zl_tensor_release(m);
        zl_tensor_release(orig[i]);
    }
    zl_zero_free(z);
    zl_zero_init_free(in);
    free_net(&n);
    zl_comm_close(c);
}

/* sqrt(sum of squares) of w1's and b1's gradients of sum(linear(x, w1, b1)^2),
 * by plain autograd on copies. */
static double first_layer_norm(net *n, zl_tensor *x)
{
    zl_tensor *dw = zl_tensor_detach(n->p[0]), *db = zl_tensor_detach(n->p[1]);
    zl_tensor *w = zl_tensor_clone(dw), *b = zl_tensor_clone(db);
    zl_tensor_release(dw);
    zl_tensor_release(db);
    zl_tensor_set_requires_grad(w, true);
    zl_tensor_set_requires_grad(b, true);
    zl_tensor *h = zl_linear(x, w, b), *h2 = zl_mul(h, h), *s = zl_sum(h2, ZL_ALL_DIMS, false);
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    double sq = 0;
    zl_tensor *gs[2] = {zl_tensor_grad(w), zl_tensor_grad(b)};
    for (int i = 0; i < 2; i++)
        for (int64_t j = 0; gs[i] && j < zl_tensor_numel(gs[i]); j++) {
            double v = zl_tensor_get(gs[i], j);
            sq += v * v;
        }
    zl_tensor *rel[] = {w, b, h, h2, s};
    for (int i = 0; i < 5; i++) zl_tensor_release(rel[i]);
    return sqrt(sq);
}

/* A step reads only its own gradients: after a step where every parameter
 * had one, a step whose loss reaches only the first layer reports the norm
 * of that layer's gradients (alone the buffer's slots are left stale by
 * zero_grad, and the ones no gradient reached must count as zero). */
TEST(a_step_reads_only_its_own_gradients)
{
    zl_comm *c = self_comm();
    for (int stage = 0; stage <= 2; stage += 2) {
        net n;
        make_net(&n, 5);
        zl_zero_config cfg = zl_zero_config_defaults();
        cfg.stage = stage;
        zl_zero *z = engine(c, &n, &cfg);
        zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 3}, NULL);
        for (int s = 0; z && s < 3; s++) {
            bool all = s != 1;
            double want = all ? 0 : first_layer_norm(&n, x);
            CHECK(zl_zero_begin_forward(z) == ZL_OK);
            zl_tensor *y = all ? forward(&n, x) : zl_linear(x, n.p[0], n.p[1]);
            zl_tensor *y2 = zl_mul(y, y), *loss = zl_sum(y2, ZL_ALL_DIMS, false);
            CHECK(loss && zl_backward(loss, NULL, false) == ZL_OK);
            CHECK(zl_zero_end_backward(z) == ZL_OK);
            zl_zero_step_info info;
            CHECK(zl_zero_step(z, 1.0, 0.0, false, &info) == ZL_OK);
            if (!all && fabs(info.grad_norm - want) > 1e-5 * want)
                zt_fail(__FILE__, __LINE__, "stage %d: the step's gradient norm is %.9g, its gradients' %.9g", stage,
                        info.grad_norm, want);
            zl_tensor *rel[] = {y, y2, loss};
            for (int i = 0; i < 3; i++) zl_tensor_release(rel[i]);
        }
        zl_tensor_release(x);
        zl_zero_free(z);
        free_net(&n);
    }
    zl_comm_close(c);
}

/* One step on the fixed batch (x, t); its loss. */
static float step_once(zl_zero *z, net *n, zl_tensor *x, zl_tensor *t)
{
    CHECK(zl_zero_begin_forward(z) == ZL_OK);
    zl_tensor *y = forward(n, x);
    zl_tensor *loss = y ? zl_mse_loss(y, t, ZL_REDUCE_MEAN) : NULL;
    float v = loss ? (float)zl_tensor_get(loss, 0) : NAN;
    CHECK(loss && zl_backward(loss, NULL, false) == ZL_OK);
    CHECK(zl_zero_end_backward(z) == ZL_OK);
    zl_zero_step_info info;
    CHECK(zl_zero_step(z, 1.0, 0.5, false, &info) == ZL_OK);
    zl_tensor_release(y);
    zl_tensor_release(loss);
    return v;
}

/* A fixed batch (*x, *t) and net n (seed 3) at stage 2 after 3 steps on it. */
static zl_zero *three_steps(zl_comm *c, net *n, zl_zero_config *cfg, zl_tensor **x, zl_tensor **t)
{
    zl_manual_seed(9);
    *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 3}, NULL);
    *t = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 2}, NULL);
    make_net(n, 3);
    *cfg = zl_zero_config_defaults();
    cfg->stage = 2;
    zl_zero *z = engine(c, n, cfg);
    for (int s = 0; z && s < 3; s++) step_once(z, n, *x, *t);
    return z;
}

/* A shard saved at stage 2 resumes at stages 0 and 3 into a model built
 * from other values: the next steps' losses are the saver's, bit for bit. */
TEST(a_shard_resumes_at_another_stage_bit_for_bit)
{
    zl_comm *c = self_comm();
    zl_tensor *x, *t;
    net na;
    zl_zero_config cfg;
    zl_zero *za = three_steps(c, &na, &cfg, &x, &t);
    char path[4096];
    zt_tmp_path(path, sizeof path, "optim_rank0.safetensors");
    float ref[2], got[2];
    zl_zero_saved_param saved[NP];
    CHECK(za && zl_zero_save_shard(za, path) == ZL_OK);
    for (int i = 0; za && i < NP; i++) {
        zl_zero_param_info info;
        CHECK(zl_zero_param_of(za, i, &info) == ZL_OK);
        saved[i] = (zl_zero_saved_param){info.numel, info.k, zl_zero_group_steps(za, info.group)};
    }
    for (int s = 0; za && s < 2; s++) ref[s] = step_once(za, &na, x, t);
    int nkeys = 0;
    const char *const *keys = zl_zero_state_keys(za, &nkeys);
    zl_zero_saved from = {.folder = zt_tmp_dir(), .partitions = 1, .nparams = NP, .params = saved, .nkeys = nkeys,
                          .keys = keys};
    for (int stage = 0; za && stage <= 3; stage += 3) {
        net nb;
        make_net(&nb, 11);
        cfg.stage = stage;
        zl_zero *zb = engine(c, &nb, &cfg);
        CHECK(zb && zl_zero_load_shards(zb, &from) == ZL_OK);
        CHECK(zl_zero_group_steps(zb, 0) == 3 && zl_zero_group_steps(zb, 1) == 3);
        for (int s = 0; zb && s < 2; s++) got[s] = step_once(zb, &nb, x, t);
        CHECK(memcmp(ref, got, sizeof ref) == 0);
        zl_zero_free(zb);
        free_net(&nb);
    }
    /* A layout that is not the engine's is refused before anything is read. */
    from.nparams = NP - 1;
    CHECK_ERR(zl_zero_load_shards(za, &from), "the optimizer held 3 parameters, it has 4 now");
    from.nparams = NP;
    saved[2].numel = 9;
    CHECK_ERR(zl_zero_load_shards(za, &from), "w2 has 9 elements in the checkpoint and 10 now");
    saved[2].numel = 10;
    const char *bad_keys[] = {"exp_avg", "nosuch"};
    from.keys = bad_keys;
    from.nkeys = 2;
    CHECK_ERR(zl_zero_load_shards(za, &from), "the optimizer has no state 'nosuch'");
    zl_zero_free(za);
    free_net(&na);
    zl_tensor_release(x);
    zl_tensor_release(t);
    zl_comm_close(c);
}

/* A C host's checkpoint: saved at stage 2 with the host's own members,
 * resumed at stage 3 into other values, and the next steps' losses are the
 * saver's bit for bit; the counters and members come back; bad input and a
 * folder without `latest` are said. */
TEST(a_checkpoint_saved_and_loaded_from_c)
{
    zl_comm *c = self_comm();
    zl_tensor *x, *t;
    net na;
    zl_zero_config cfg;
    zl_zero *za = three_steps(c, &na, &cfg, &x, &t);
    char dir[4096];
    zt_tmp_path(dir, sizeof dir, "ckpt");
    float ref[2], got[2];
    zl_zero_save_args a = {.counts = {3, 24, 0, 3}, .optimizer = "AdamW", .members = "{\"client_state\": {\"epoch\": 7}}"};
    char path[4200];
    CHECK(za && zl_zero_save(za, dir, &a, path, sizeof path) == ZL_OK);
    CHECK(strstr(path, "/ckpt/global_step3") != NULL);
    for (int s = 0; za && s < 2; s++) ref[s] = step_once(za, &na, x, t);
    net nb;
    make_net(&nb, 11);
    cfg.stage = 3;
    zl_zero *zb = engine(c, &nb, &cfg);
    zl_zero_load_args la = {.optimizer = "AdamW", .hparams = true};
    bool found = false;
    zl_zero_counts counts = {0};
    char *json = NULL;
    CHECK(zb && zl_zero_load(zb, dir, &la, &found, &counts, &json) == ZL_OK && found);
    CHECK(counts.global_steps == 3 && counts.global_samples == 24 && counts.micro_steps == 3);
    CHECK(json && strstr(json, "\"client_state\": {\"epoch\": 7}") != NULL);
    free(json);
    for (int s = 0; zb && s < 2; s++) got[s] = step_once(zb, &nb, x, t);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    /* Refusals before anything is written or changed. */
    a.tag = "../out";
    CHECK_ERR(zl_zero_save(za, dir, &a, NULL, 0), "save_checkpoint: tag \"../out\" holds \"/\"");
    a.tag = "t";
    a.members = "{\"optimizer\": 1}";
    CHECK_ERR(zl_zero_save(za, dir, &a, NULL, 0), "members: \"optimizer\" is a key of the engine's own");
    a.members = "[1]";
    CHECK_ERR(zl_zero_save(za, dir, &a, NULL, 0), "members must be a JSON object, got table");
    la.optimizer = "SGD";
    CHECK_ERR(zl_zero_load(zb, dir, &la, &found, NULL, NULL), "holds the state of a AdamW optimizer; this engine has SGD");
    char empty[4096];
    zt_tmp_path(empty, sizeof empty, "none");
    CHECK(zl_fs_mkdirs(empty) == ZL_OK);
    CHECK(zl_zero_load(zb, empty, &la, &found, NULL, NULL) == ZL_OK && !found);
    zl_zero_free(za);
    zl_zero_free(zb);
    free_net(&na);
    free_net(&nb);
    zl_tensor_release(x);
    zl_tensor_release(t);
    zl_comm_close(c);
}

/* A host that forgets zl_zero_end_backward: with buckets smaller than the
 * model part of the gradient is still in them, and without any backward
 * there is nothing to apply. Both steps are refused, and change nothing. */
TEST(a_step_needs_an_ended_backward)
{
    zl_comm *c = self_comm();
    for (int stage = 0; stage <= 3; stage++) {
        net n;
        make_net(&n, 5);
        zl_zero_config cfg = zl_zero_config_defaults();
        cfg.stage = stage;
        cfg.reduce_bucket_size = 8;
        zl_zero *z = engine(c, &n, &cfg);
        if (!z) break;
        zl_zero_step_info info;
        zl_clear_error();
        CHECK(zl_zero_step(z, 1.0, 0.0, false, &info) == ZL_ESTATE);
        CHECK(strstr(zl_last_error(), "no backward ended since the last step; call zl_zero_end_backward") != NULL);
        zl_tensor *before = NULL, *after = NULL;
        CHECK(zl_zero_full_fp32(z, n.p[0], &before) == ZL_OK);
        CHECK(zl_zero_begin_forward(z) == ZL_OK);
        zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){4, 3}, NULL);
        zl_tensor *y = forward(&n, x);
        zl_tensor *s = zl_sum(y, ZL_ALL_DIMS, false);
        CHECK(zl_backward(s, NULL, false) == ZL_OK);
        zl_clear_error();
        CHECK(zl_zero_step(z, 1.0, 0.0, false, &info) == ZL_ESTATE);
        CHECK(strstr(zl_last_error(), "still pending in the buckets; call zl_zero_end_backward") != NULL);
        CHECK(zl_zero_full_fp32(z, n.p[0], &after) == ZL_OK);
        CHECK(before && after && memcmp(zl_tensor_data(before), zl_tensor_data(after), 15 * sizeof(float)) == 0);
        CHECK(zl_zero_end_backward(z) == ZL_OK);
        CHECK(zl_zero_step(z, 1.0, 0.0, false, &info) == ZL_OK);
        CHECK(info.grad_norm > 0);
        CHECK(zl_zero_step(z, 1.0, 0.0, false, &info) == ZL_ESTATE);
        zl_tensor *rel[] = {x, y, s, before, after};
        for (int i = 0; i < 5; i++) zl_tensor_release(rel[i]);
        zl_zero_free(z);
        free_net(&n);
    }
    zl_comm_close(c);
}

/* Whether a and b hold the same n f32 values, bit for bit. */
static bool same_f32(zl_tensor *a, zl_tensor *b, int64_t n)
{
    return a && b && zl_tensor_numel(a) == n && zl_tensor_numel(b) == n &&
           memcmp(zl_tensor_data(a), zl_tensor_data(b), (size_t)n * sizeof(float)) == 0;
}

/* DeepSpeed's state accessors in C, at every stage: the full gradient after
 * backward is the plain net's (bit for bit in f32), divided by the loss
 * scale asked; the local forms are the whole at one rank; exp_avg after a
 * step is (1 - beta1) g; a master and a state written read back and the
 * working copy follows; and the errors name the parameter and why. */
TEST(state_accessors_read_and_write_every_stage)
{
    zl_comm *c = self_comm();
    zl_manual_seed(9);
    zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 3}, NULL);
    zl_tensor *t = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){8, 2}, NULL);
    net plain;
    make_net(&plain, 3);
    zl_tensor *py = forward(&plain, x), *pl = zl_mse_loss(py, t, ZL_REDUCE_MEAN);
    CHECK(zl_backward(pl, NULL, false) == ZL_OK);
    for (int stage = 0; stage <= 3; stage++) {
        net n;
        make_net(&n, 3);
        zl_zero_config cfg = zl_zero_config_defaults();
        cfg.stage = stage;
        cfg.reduce_bucket_size = 8;
        zl_zero *z = engine(c, &n, &cfg);
        if (!z) break;
        zl_tensor *g = NULL, *out = NULL;
        CHECK_ERR(zl_zero_full_grad(z, n.p[0], 1.0, &g), "safe_get_full_grad: w1: there is no gradient now");
        CHECK(zl_zero_begin_forward(z) == ZL_OK);
        zl_tensor *y = forward(&n, x), *loss = zl_mse_loss(y, t, ZL_REDUCE_MEAN);
        CHECK(zl_backward(loss, NULL, false) == ZL_OK);
        CHECK_ERR(zl_zero_full_grad(z, n.p[0], 1.0, &g), "still being reduced");
        CHECK(zl_zero_end_backward(z) == ZL_OK);
        for (int i = 0; i < NP; i++) {
            int64_t numel = zl_tensor_numel(n.p[i]);
            CHECK(zl_zero_full_grad(z, n.p[i], 1.0, &g) == ZL_OK);
            CHECK(same_f32(g, zl_tensor_grad(plain.p[i]), numel));
            CHECK(zl_zero_local_grad(z, n.p[i], 1.0, &out) == ZL_OK && same_f32(out, g, numel));
            zl_tensor_release(out);
            CHECK(zl_zero_full_grad(z, n.p[i], 4.0, &out) == ZL_OK);
            for (int64_t k = 0; out && k < numel; k++) CHECK(zl_tensor_get(out, k) == zl_tensor_get(g, k) / 4);
            zl_tensor_release(out);
            zl_tensor_release(g);
        }
        CHECK(zl_zero_full_grad(z, n.p[2], 1.0, &g) == ZL_OK);
        zl_zero_step_info info;
        CHECK(zl_zero_step(z, 1.0, 0.0, false, &info) == ZL_OK);
        zl_tensor *m = NULL;
        CHECK(zl_zero_full_state(z, n.p[2], "exp_avg", &m) == ZL_OK);
        for (int64_t k = 0; m && g && k < 10; k++)
            CHECK_CLOSE(zl_tensor_get(m, k), (1 - 0.9) * zl_tensor_get(g, k), 1e-7);
        CHECK(zl_zero_local_state(z, n.p[2], "exp_avg", &out) == ZL_OK && same_f32(out, m, 10));
        zl_tensor_release(out);
        /* Writes: a master (the working weight follows) and a state, whole and by part. */
        zl_tensor *v = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){2, 5}, NULL);
        CHECK(zl_zero_set_full_fp32(z, n.p[2], v) == ZL_OK);
        CHECK(zl_zero_full_fp32(z, n.p[2], &out) == ZL_OK && same_f32(out, v, 10));
        zl_tensor_release(out);
        CHECK(zl_zero_gather(z, n.p[2]) == ZL_OK);
        CHECK(same_f32(n.p[2], v, 10));
        CHECK(zl_zero_release(z, n.p[2]) == ZL_OK);
        zl_tensor *flat = zl_tensor_reshape(v, 1, (int64_t[]){10});
        CHECK(zl_zero_set_local_state(z, n.p[2], "exp_avg_sq", flat) == ZL_OK);
        CHECK(zl_zero_full_state(z, n.p[2], "exp_avg_sq", &out) == ZL_OK && same_f32(out, v, 10));
        zl_tensor_release(out);
        zl_tensor *half = zl_tensor_full(ZL_DTYPE_F32, 1, (int64_t[]){2}, 0.5);
        CHECK(zl_zero_set_local_fp32(z, n.p[3], half) == ZL_OK);
        CHECK(zl_zero_full_fp32(z, n.p[3], &out) == ZL_OK && same_f32(out, half, 2));
        zl_tensor_release(out);
        zl_tensor_release(half);
        /* Errors. */
        CHECK_ERR(zl_zero_full_state(z, n.p[2], "momentum_buffer", &out),
                  "safe_get_full_optimizer_state: w2: the optimizer keeps no state 'momentum_buffer' (it keeps "
                  "exp_avg, exp_avg_sq)");
        CHECK_ERR(zl_zero_set_full_fp32(z, n.p[2], flat), "safe_set_full_fp32_param: w2: the value's shape [10] is "
                                                          "not the parameter's [2, 5]");
        CHECK_ERR(zl_zero_set_local_state(z, n.p[2], "exp_avg", v), "this rank's part is 1-d with 10 elements; the value's shape is [2, 5]");
        CHECK_ERR(zl_zero_full_grad(z, n.p[2], 0.0, &out), "loss_scale must be finite and > 0");
        CHECK_ERR(zl_zero_full_grad(z, n.p[2], 1.0, &out), "safe_get_full_grad: w2: there is no gradient now");
        CHECK_ERR(zl_zero_local_fp32(z, x, &out), "not a parameter this engine trains");
        zl_tensor *rel[] = {g, m, v, flat, y, loss};
        for (int i = 0; i < 6; i++) zl_tensor_release(rel[i]);
        zl_zero_free(z);
        free_net(&n);
    }
    zl_tensor *rel[] = {x, t, py, pl};
    for (int i = 0; i < 4; i++) zl_tensor_release(rel[i]);
    free_net(&plain);
    zl_comm_close(c);
}

TEST(bad_input_is_refused_by_name)
{
    zl_comm *c = self_comm();
    net n;
    make_net(&n, 7);
    zl_zero_hparams hp = zl_zero_hparams_defaults();
    zl_zero *z = NULL;
    zl_zero_config cfg = zl_zero_config_defaults();
    cfg.stage = 1;
    cfg.optimizer = ZL_ZERO_LAMB;
    zl_zero_param ps[2] = {{n.p[0], 0, "w1"}, {n.p[0], 0, "again"}};
    CHECK_ERR(zl_zero_create(c, &cfg, ps, 1, &hp, 1, NULL, 0, &z), "Lamb");
    cfg.optimizer = ZL_ZERO_ADAM;
    CHECK_ERR(zl_zero_create(c, &cfg, ps, 2, &hp, 1, NULL, 0, &z), "again appears in more than one place");
    cfg.stage = 5;
    CHECK_ERR(zl_zero_create(c, &cfg, ps, 1, &hp, 1, NULL, 0, &z), "zero_optimization.stage must be 0..3, got 5");
    cfg.stage = 0;
    zl_tensor *half = zl_tensor_to(n.p[1], ZL_DTYPE_BF16);
    zl_zero_param hps[1] = {{half, 0, "b1"}};
    CHECK_ERR(zl_zero_create(c, &cfg, hps, 1, &hp, 1, NULL, 0, &z), "parameter b1 is bf16");
    cfg.stage = 3;
    cfg.offload_param.device = ZL_OFFLOAD_NVME;
    CHECK_ERR(zl_zero_create(c, &cfg, ps, 1, &hp, 1, NULL, 0, &z), "offload_param.nvme_path is needed");
    CHECK(z == NULL);
    /* A build without libaio refuses NVMe offload by its config key before touching the folder. */
    if (zl_aio_unavailable()) {
        cfg.offload_param.nvme_path = "/nonexistent";
        CHECK_ERR(zl_zero_create(c, &cfg, ps, 1, &hp, 1, NULL, 0, &z),
                  "zero_optimization.offload_param.device = \"nvme\": zlua was built without libaio");
        CHECK(z == NULL);
    }
    /* A parameter the loss does not reach, with ignore_unused_parameters off. */
    cfg = zl_zero_config_defaults();
    cfg.ignore_unused_parameters = false;
    zl_zero_param two[2] = {{n.p[0], 0, "w1"}, {n.p[2], 0, "w2"}};
    CHECK(zl_zero_create(c, &cfg, two, 2, &hp, 1, NULL, 0, &z) == ZL_OK);
    zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){4, 3}, NULL);
    zl_tensor *y = zl_linear(x, n.p[0], NULL);
    zl_tensor *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    CHECK_ERR(zl_zero_end_backward(z), "parameter w2 received no gradient");
    zl_tensor *other = zl_tensor_zeros(ZL_DTYPE_F32, 1, (int64_t[]){3});
    zl_tensor *m = NULL;
    CHECK_ERR(zl_zero_full_fp32(z, other, &m), "not a parameter this engine trains");
    zl_tensor *rel[] = {x, y, s, other, half};
    for (int i = 0; i < 5; i++) zl_tensor_release(rel[i]);
    zl_zero_free(z);
    free_net(&n);
    zl_comm_close(c);
}
