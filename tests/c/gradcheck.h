/* Gradient checking against central finite differences, and the forward check
 * against a plain reference, used by every op's test. */
#ifndef ZL_GRADCHECK_H
#define ZL_GRADCHECK_H

#include "harness.h"

/* Builds the op's output from its inputs (which it must not release). */
typedef zl_tensor *(*zt_op_fn)(zl_tensor **inputs, void *ctx);

/* For every input with requires_grad: compare the analytic gradient of
 * L = sum(out * R) (R a fixed random tensor) with (L(x+h) - L(x-h)) / 2h per
 * element, computed in double from f32 evaluations. Records failures through
 * the harness with the op name, input and element. Returns 0 when all agree. */
int zt_gradcheck(const char *name, zt_op_fn fn, void *ctx, int n, zl_tensor **inputs, double h,
                 double tol);

/* Compare every element of t with ref (numel entries, logical order). */
int zt_check_values(const char *name, const zl_tensor *t, const double *ref, double tol);

#endif
