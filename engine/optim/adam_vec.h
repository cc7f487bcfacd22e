/* Adam's vector kernel over vec.h's names (adam.c builds it per width through
 * vec_each.h): adam_scalar's update, ZV_LANES elements at a time, the tail left
 * to adam_scalar. */
static ZV_TARGET void ZV_NAME(adam)(const adam_ctx *c, int64_t lo, int64_t hi)
{
    float *restrict p = c->p, *restrict m = c->m, *restrict v = c->v;
    const zv scale = zv_set1(c->scale), l2 = zv_set1(c->l2);
    const zv omb1 = zv_set1(c->omb1), omb2 = zv_set1(c->omb2);
    const zv bc2_rsqrt = zv_set1(c->bc2_rsqrt), eps = zv_set1(c->eps);
    const zv decay = zv_set1(c->decay), neg_step = zv_set1(c->neg_step);
    int64_t i = lo;
    for (; i + ZV_LANES <= hi; i += ZV_LANES) {
        zv pi = zv_load(p + i);
        zv g = zv_mul(zv_load_g(c->g, c->g_dtype, i), scale);
        g = zv_fmadd(l2, pi, g);
        zv mi = zv_load(m + i), vi = zv_load(v + i);
        mi = zv_fmadd(omb1, zv_sub(g, mi), mi);
        vi = zv_fmadd(omb2, zv_fmsub(g, g, vi), vi);
        zv denom = zv_fmadd(zv_sqrt(vi), bc2_rsqrt, eps);
        pi = zv_add(pi, zv_fmadd(neg_step, zv_div(mi, denom), zv_mul(decay, pi)));
        zv_store(p + i, pi);
        zv_store(m + i, mi);
        zv_store(v + i, vi);
        if (c->half) zv_store_half(c->half, c->half_dtype, i, pi);
    }
    adam_scalar(c, i, hi);
}
