/* A host program using zlua two ways: the C API alone (a linear regression
 * trained with zl_linear, zl_mse_loss, zl_backward and an SGD step written
 * here), then the embedded Lua runtime running a training script.
 * Usage: embed [script.lua]   (default: train.lua in the current directory) */
#include <stdio.h>
#include <string.h>
#include <zlua/zlua.h>
#include <zlua/embed.h>

/* p -= lr * grad(p), then clear the gradient for the next backward.
 * p is a contiguous f32 leaf made by this program. */
static void sgd_step(zl_tensor *p, float lr)
{
    zl_tensor *g = zl_tensor_grad(p);   /* borrowed */
    float *pp = zl_tensor_data(p);
    for (int64_t i = 0; i < zl_tensor_numel(p); i++) pp[i] -= lr * (float)zl_tensor_get(g, i);
    zl_tensor_set_grad(p, NULL);
}

/* Fit w [1, 3] and b [1] to y = x · [2, -3, 0.5]ᵀ + 1 over x [64, 3]. */
static int train_regression(void)
{
    zl_manual_seed(7);
    zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, 2, (int64_t[]){64, 3}, NULL);
    zl_tensor *w_true = zl_tensor_from_data(ZL_DTYPE_F32, 2, (int64_t[]){1, 3}, (float[]){2.0f, -3.0f, 0.5f});
    zl_tensor *b_true = zl_tensor_from_data(ZL_DTYPE_F32, 1, (int64_t[]){1}, (float[]){1.0f});
    zl_tensor *y = zl_linear(x, w_true, b_true);
    zl_tensor *w = zl_tensor_zeros(ZL_DTYPE_F32, 2, (int64_t[]){1, 3});
    zl_tensor *b = zl_tensor_zeros(ZL_DTYPE_F32, 1, (int64_t[]){1});
    if (!x || !w_true || !b_true || !y || !w || !b) {
        fprintf(stderr, "embed: %s\n", zl_last_error());
        return 1;
    }
    zl_tensor_set_requires_grad(w, true);
    zl_tensor_set_requires_grad(b, true);

    double first = 0, last = 0;
    for (int step = 0; step <= 60; step++) {
        zl_tensor *pred = zl_linear(x, w, b);
        zl_tensor *loss = zl_mse_loss(pred, y, ZL_REDUCE_MEAN);
        if (!loss || zl_backward(loss, NULL, false) != ZL_OK) {
            fprintf(stderr, "embed: %s\n", zl_last_error());
            return 1;
        }
        last = zl_tensor_get(loss, 0);
        if (step == 0) first = last;
        if (step % 10 == 0) printf("c api: step %3d  loss %.6f\n", step, last);
        sgd_step(w, 0.1f);
        sgd_step(b, 0.1f);
        zl_tensor_release(loss);
        zl_tensor_release(pred);
    }
    printf("c api: learned w = [%.3f, %.3f, %.3f], b = %.3f\n", zl_tensor_get(w, 0), zl_tensor_get(w, 1),
           zl_tensor_get(w, 2), zl_tensor_get(b, 0));

    /* A deliberate mistake: [64, 3] · [1, 3] does not multiply. */
    zl_tensor *bad = zl_matmul(x, w_true);
    int caught = bad == NULL && strstr(zl_last_error(), "[64, 3]") && strstr(zl_last_error(), "[1, 3]");
    printf("c api: bad matmul %s: %s\n", caught ? "refused" : "NOT refused", zl_last_error());
    zl_tensor_release(bad);

    zl_tensor *all[] = {x, w_true, b_true, y, w, b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zl_tensor_release(all[i]);
    if (!(last < 1e-4 && last < first) || !caught) {
        fprintf(stderr, "embed: the C API part failed (loss %g -> %g)\n", first, last);
        return 1;
    }
    return 0;
}

/* Run a Lua training script in a fresh zlua state. */
static int run_script(const char *path)
{
    zlua_state *s = zlua_open();
    if (!s) {
        fprintf(stderr, "embed: cannot open a zlua state: %s\n", zl_last_error());
        return 1;
    }
    const char *args[] = {"from-embed"};
    zl_status st = zlua_dofile(s, path, 1, args);
    if (st != ZL_OK) fprintf(stderr, "embed: %s\n", zl_last_error());
    zlua_close(s);
    return st != ZL_OK;
}

int main(int argc, char **argv)
{
    printf("zlua %s\n", zl_version());
    if (train_regression()) return 1;
    if (run_script(argc > 1 ? argv[1] : "train.lua")) return 1;
    printf("embed: ok\n");
    return 0;
}
