/* The op case list (op_cases.c) on the CPU, where each case runs twice and
 * must give the same bits and its gradients agree with finite differences,
 * and on the stand-in device against the host; and every op the public
 * header declares has a case. */
#include <stdlib.h>
#include "op_cases.h"
#include "stand_in_kernels.h"

static zl_tensor *host_copy(zl_tensor *h) { return zl_tensor_clone(h); }
static zl_tensor *host_back(const zl_tensor *t) { return zl_tensor_clone((zl_tensor *)t); }

TEST(every_op_in_ops_h_has_a_case)
{
    CHECK(op_cases_check_coverage(ZLUA_SOURCE_DIR "/engine/include/zlua/ops.h") > 60);
}

TEST(the_cases_on_the_cpu)
{
    const op_target cpu = {"the CPU", host_copy, host_back, true, true};
    CHECK(op_cases_run(&cpu, getenv("ZLUA_OP_CASE")) > 0);
}

static zl_tensor *fake_back(const zl_tensor *d) { return from_fake(d); }

TEST(the_cases_on_the_stand_in)
{
    const op_target fake = {"the stand-in (cuda:7)", to_fake, fake_back, true, false};
    fake_use_kernels(&stand_in_kernels);
    CHECK(op_cases_run(&fake, getenv("ZLUA_OP_CASE")) > 0);
    fake_use_kernels(NULL);
}
