/* Lamb's two vector kernels over vec.h's names (lamb.c builds them per width
 * through vec_each.h): moments_scalar's and apply_scalar's work, ZV_LANES
 * elements at a time, the squares summed in double lanes; the tails are left
 * to the scalar kernels. */
static ZV_TARGET void ZV_NAME(moments)(const lamb_ctx *c, int64_t lo, int64_t hi, double sq[2])
{
    float *restrict p = c->p, *restrict m = c->m, *restrict v = c->v;
    const zv scale = zv_set1(c->scale), omb1 = zv_set1(c->omb1), omb2 = zv_set1(c->omb2);
    const zv eps = zv_set1(c->eps), wd = zv_set1(c->wd);
    zvd sp = zvd_zero(), su = zvd_zero();
    int64_t i = lo;
    for (; i + ZV_LANES <= hi; i += ZV_LANES) {
        zv pi = zv_load(p + i);
        zv g = zv_mul(zv_load_g(c->g, c->g_dtype, i), scale);
        zv mi = zv_load(m + i), vi = zv_load(v + i);
        mi = zv_fmadd(omb1, zv_sub(g, mi), mi);
        vi = zv_fmadd(omb2, zv_fmsub(g, g, vi), vi);
        zv u = zv_fmadd(wd, pi, zv_div(mi, zv_add(zv_sqrt(vi), eps)));
        zv_store(m + i, mi);
        zv_store(v + i, vi);
        sp = zvd_sq_acc(sp, pi);
        su = zvd_sq_acc(su, u);
    }
    sq[0] += zvd_sum(sp);
    sq[1] += zvd_sum(su);
    moments_scalar(c, i, hi, sq);
}

static ZV_TARGET void ZV_NAME(apply)(const lamb_ctx *c, int64_t lo, int64_t hi)
{
    float *restrict p = c->p;
    const float *restrict m = c->m, *restrict v = c->v;
    const zv eps = zv_set1(c->eps), wd = zv_set1(c->wd), neg_rate = zv_set1(c->neg_rate);
    int64_t i = lo;
    for (; i + ZV_LANES <= hi; i += ZV_LANES) {
        zv pi = zv_load(p + i);
        zv denom = zv_add(zv_sqrt(zv_load(v + i)), eps);
        zv u = zv_fmadd(wd, pi, zv_div(zv_load(m + i), denom));
        pi = zv_fmadd(neg_rate, u, pi);
        zv_store(p + i, pi);
        if (c->half) zv_store_half(c->half, c->half_dtype, i, pi);
    }
    apply_scalar(c, i, hi);
}
