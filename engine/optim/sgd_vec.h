/* SGD's vector kernel over vec.h's names (sgd.c builds it per width through
 * vec_each.h): sgd_scalar's update, ZV_LANES elements at a time, the tail left
 * to sgd_scalar. */
static ZV_TARGET void ZV_NAME(sgd)(const sgd_ctx *c, int64_t lo, int64_t hi)
{
    float *restrict p = c->p, *restrict buf = c->buf;
    const zv scale = zv_set1(c->scale), wd = zv_set1(c->wd);
    const zv momentum = zv_set1(c->momentum), damp1 = zv_set1(c->damp1);
    const zv neg_lr = zv_set1(c->neg_lr);
    int64_t i = lo;
    for (; i + ZV_LANES <= hi; i += ZV_LANES) {
        zv pi = zv_load(p + i);
        zv g = zv_mul(zv_load_g(c->g, c->g_dtype, i), scale);
        g = zv_fmadd(wd, pi, g);
        if (c->use_momentum) {
            zv b = c->first ? g : zv_fmadd(momentum, zv_load(buf + i), zv_mul(damp1, g));
            zv_store(buf + i, b);
            g = c->nesterov ? zv_fmadd(momentum, b, g) : b;
        }
        pi = zv_fmadd(neg_lr, g, pi);
        zv_store(p + i, pi);
        if (c->half) zv_store_half(c->half, c->half_dtype, i, pi);
    }
    sgd_scalar(c, i, hi);
}
