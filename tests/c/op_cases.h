/* The op cases every backend runs (op_cases.c, the list) and the runner that
 * runs them on a target against the host (op_runner.c): the host's result
 * and gradients are the reference, and a device must give them bit for bit
 * or, where its arithmetic differs by design, within a tolerance. Adding an
 * op to zlua/ops.h means adding its cases to the list. */
#ifndef ZL_TEST_OP_CASES_H
#define ZL_TEST_OP_CASES_H

#include "harness.h"

enum {
    CASE_GRAD = 1,    /* backward too: the float inputs' gradients compared */
    CASE_NO_FD = 2,   /* no finite-difference check on the host (ties, random masks) */
    CASE_CLOSE = 4,   /* the device adds in an order of its own (a GEMM, a composed op) or fuses
                         its multiply-adds otherwise (rotary's vector loop): a tolerance */
};

/* One case: `op` is the ops.h function it covers; `inputs` names each input,
 * space separated, as dtype[shape] and then, in any order:
 *   +      positive values          <N   integers in [0, N)
 *   ?      random booleans          ~    small integers (ties)
 *   !      edge values (0, -0, +-inf, NaN, huge, tiny) among normal ones
 *   ^T     stored transposed: a strided view with the last two dims swapped
 *   >[..]  an expanded view (stride 0) to that shape
 *   @h     stays in host memory on every target (a one-element operand)
 *   =      gets no gradient
 * otherwise values are drawn from N(0, 1). `run` builds the output from the
 * inputs (views already applied) and must not release them. */
typedef struct op_case {
    const char *op;
    const char *what;
    const char *inputs;
    zl_tensor *(*run)(zl_tensor **in);
    int flags;
} op_case;

extern const op_case op_cases[];
extern const int op_case_count;

/* Where the cases run: to_dev gives a contiguous copy of a host tensor on the
 * target, to_host a contiguous host copy of one of its tensors. exact: the
 * host's bits are required (but for CASE_GEMM); otherwise each dtype's
 * tolerance. fd: the host's gradients are also checked against finite
 * differences (the CPU's run). */
typedef struct op_target {
    const char *name;
    zl_tensor *(*to_dev)(zl_tensor *h);
    zl_tensor *(*to_host)(const zl_tensor *d);
    bool exact;
    bool fd;
} op_target;

/* Runs every case whose op or description contains `filter` (all for NULL)
 * on t; failures go to the harness, naming the case. Returns the cases run. */
int op_cases_run(const op_target *t, const char *filter);

/* Each `ZL_API zl_tensor *zl_<name>(` of the ops header at path that no case
 * covers, reported to the harness; returns how many ops the header declares. */
int op_cases_check_coverage(const char *ops_h);

#endif
