/* Finite-difference gradient checking (see gradcheck.h). */
#include <stdlib.h>
#include "gradcheck.h"

static double weighted_sum(zl_tensor *out, const double *r)
{
    int64_t n = zl_tensor_numel(out);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += zl_tensor_get(out, i) * r[i];
    return s;
}

int zt_gradcheck(const char *name, zt_op_fn fn, void *ctx, int n, zl_tensor **inputs, double h, double tol)
{
    int bad = 0;
    zl_tensor *out = fn(inputs, ctx);
    if (!out) { zt_fail(__FILE__, __LINE__, "%s: forward failed: %s", name, zl_last_error()); return 1; }
    int64_t no = zl_tensor_numel(out);
    double *r = malloc((size_t)(no ? no : 1) * sizeof *r);
    zl_tensor *rt = zl_tensor_randn(ZL_DTYPE_F32, zl_tensor_ndim(out), zl_tensor_shape(out), NULL);
    for (int64_t i = 0; i < no; i++) r[i] = zl_tensor_get(rt, i);
    for (int i = 0; i < n; i++) zl_tensor_set_grad(inputs[i], NULL);
    if (zl_backward(out, rt, false)) {
        zt_fail(__FILE__, __LINE__, "%s: backward failed: %s", name, zl_last_error());
        bad = 1;
    }
    zl_tensor_release(rt);
    zl_tensor_release(out);
    bool was = zl_grad_set_enabled(false);
    for (int i = 0; i < n && !bad; i++) {
        if (!zl_tensor_requires_grad(inputs[i])) continue;
        zl_tensor *g = zl_tensor_grad(inputs[i]);
        if (!g) { zt_fail(__FILE__, __LINE__, "%s: input %d got no gradient", name, i); bad = 1; break; }
        int64_t ne = zl_tensor_numel(inputs[i]);
        for (int64_t e = 0; e < ne; e++) {
            double x0 = zl_tensor_get(inputs[i], e);
            zl_tensor_set(inputs[i], e, x0 + h);
            zl_tensor *op = fn(inputs, ctx);
            double lp = weighted_sum(op, r);
            zl_tensor_release(op);
            zl_tensor_set(inputs[i], e, x0 - h);
            zl_tensor *om = fn(inputs, ctx);
            double lm = weighted_sum(om, r);
            zl_tensor_release(om);
            zl_tensor_set(inputs[i], e, x0);
            double num = (lp - lm) / (2 * h), ana = zl_tensor_get(g, e);
            if (!(fabs(num - ana) <= tol * (1.0 + fabs(num)))) {
                zt_fail(__FILE__, __LINE__, "%s: d/d input%d[%lld]: analytic %.6g, numeric %.6g", name, i,
                        (long long)e, ana, num);
                if (++bad > 5) break;
            }
        }
    }
    zl_grad_set_enabled(was);
    free(r);
    return bad;
}

int zt_check_values(const char *name, const zl_tensor *t, const double *ref, double tol)
{
    int64_t n = zl_tensor_numel(t);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        double v = zl_tensor_get(t, i);
        if (!(fabs(v - ref[i]) <= tol * (1.0 + fabs(ref[i])))) {
            zt_fail(__FILE__, __LINE__, "%s: element %lld is %.9g, reference %.9g", name, (long long)i, v, ref[i]);
            bad++;
        }
    }
    return bad;
}
