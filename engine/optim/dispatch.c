/* Which optimizer kernel runs (CPU features, ZLUA_SIMD, zl_optim_set_kernel),
 * the argument checks every optimizer shares, and zl_optim_buf_from_tensors. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "optim_impl.h"

static const char *const isa_names[] = {"scalar", "avx2", "avx512"};

/* The kernel in use, -1 until the first step chooses it (zli_choice);
 * zl_optim_set_kernel is not to run beside a step. */
static int chosen = -1;

#ifdef ZLI_OPTIM_X86
#include <cpuid.h>

/* F16C by CPUID (leaf 1, ECX): clang before 16 has no "f16c" for
 * __builtin_cpu_supports, and the fuzz build (tests/fuzz) is clang's. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static int best_supported(void)
{
#ifdef ZLI_OPTIM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return ZLI_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) return ZLI_ISA_AVX2;
#endif
    return ZLI_ISA_SCALAR;
}

/* The ceiling a name asks for, or -1 when the name is not one of ours. */
static int isa_of_name(const char *name)
{
    if (!strcmp(name, "auto") || !strcmp(name, "avx512")) return ZLI_ISA_AVX512;
    if (!strcmp(name, "avx2")) return ZLI_ISA_AVX2;
    if (!strcmp(name, "scalar") || !strcmp(name, "off")) return ZLI_ISA_SCALAR;
    return -1;
}

static int from_environment(void)
{
    int best = best_supported();
    const char *env = getenv("ZLUA_SIMD");
    int cap = env ? isa_of_name(env) : -1;
    return cap >= 0 && cap < best ? cap : best;
}

int zli_optim_isa(void) { return zli_choice(&chosen, from_environment); }

const char *zl_optim_kernel_name(void) { return isa_names[zli_optim_isa()]; }

zl_status zl_optim_set_kernel(const char *name)
{
    if (!name) {
        __atomic_store_n(&chosen, from_environment(), __ATOMIC_RELAXED);
        return ZL_OK;
    }
    int want = isa_of_name(name), best = best_supported();
    if (want < 0)
        return zl_error(ZL_EINVAL, "optim: unknown kernel '%s' (expected auto, avx512, avx2, scalar or off)", name);
    if (!strcmp(name, "auto")) want = best;
    if (want > best)
        return zl_error(ZL_EINVAL, "optim: kernel '%s' needs CPU features this machine lacks (best here: %s)", name,
                        isa_names[best]);
    __atomic_store_n(&chosen, want, __ATOMIC_RELAXED);
    return ZL_OK;
}

zl_status zli_optim_check_range(const char *op, const char *name, double x, double lo, double hi, bool hi_open)
{
    bool ok = isfinite(x) && x >= lo && (hi_open ? x < hi : x <= hi);
    if (ok) return ZL_OK;
    if (isinf(hi)) return zl_error(ZL_EINVAL, "%s: %s must be a finite number >= %g, got %g", op, name, lo, x);
    return zl_error(ZL_EINVAL, "%s: %s must be in [%g, %g%c, got %g", op, name, lo, hi, hi_open ? ')' : ']', x);
}

static bool overlap(const void *a, const void *b, size_t nbytes_a, size_t nbytes_b)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && x < y + nbytes_b && y < x + nbytes_a;
}

zl_status zli_optim_check_buf(const char *op, const void *hp, const zl_optim_buf *b, bool need_g, bool need_m,
                              bool need_v)
{
    if (!hp) return zl_error(ZL_EINVAL, "%s: hyperparameters are NULL", op);
    if (!b) return zl_error(ZL_EINVAL, "%s: buffers are NULL", op);
    if (b->n < 0) return zl_error(ZL_EINVAL, "%s: n must be >= 0, got %lld", op, (long long)b->n);
    if (!b->p) return zl_error(ZL_EINVAL, "%s: parameter buffer p is NULL", op);
    if (need_g && !b->g) return zl_error(ZL_EINVAL, "%s: gradient buffer g is NULL", op);
    if (need_m && !b->m) return zl_error(ZL_EINVAL, "%s: moment buffer m is NULL", op);
    if (need_v && !b->v) return zl_error(ZL_EINVAL, "%s: moment buffer v is NULL", op);
    if (need_g && b->g_dtype != ZL_DTYPE_F32 && b->g_dtype != ZL_DTYPE_BF16 && b->g_dtype != ZL_DTYPE_F16)
        return zl_error(ZL_EDTYPE, "%s: gradient dtype must be f32, bf16 or f16, got %s", op,
                        zl_dtype_name(b->g_dtype));
    if (b->p_half && b->half_dtype != ZL_DTYPE_BF16 && b->half_dtype != ZL_DTYPE_F16)
        return zl_error(ZL_EDTYPE, "%s: half copy dtype must be bf16 or f16, got %s", op,
                        zl_dtype_name(b->half_dtype));
    /* The kernels read through restrict pointers: overlapping buffers would be
     * undefined behaviour, not just a wrong answer. */
    size_t n = (size_t)b->n;
    const void *ptr[5] = {b->p, need_g ? b->g : NULL, need_m ? b->m : NULL, need_v ? b->v : NULL, b->p_half};
    size_t bytes[5] = {4 * n, (need_g ? zl_dtype_size(b->g_dtype) : 0) * n, 4 * n, 4 * n, 2 * n};
    static const char *const role[5] = {"p", "g", "m", "v", "p_half"};
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (overlap(ptr[i], ptr[j], bytes[i], bytes[j]))
                return zl_error(ZL_EINVAL, "%s: buffers %s and %s overlap", op, role[i], role[j]);
    return ZL_OK;
}

/* One tensor argument: contiguous, one of the dtypes in the mask (bits
 * 1 << dtype), and as many elements as p. Where it lives is the caller's check. */
static zl_status check_tensor(const char *op, const char *role, const zl_tensor *t, const zl_tensor *p,
                              unsigned dtypes, const char *expected)
{
    if (!zl_tensor_is_contiguous(t)) return zl_error(ZL_EINVAL, "%s: %s must be contiguous", op, role);
    if (!((dtypes >> zl_tensor_dtype(t)) & 1u))
        return zl_error(ZL_EDTYPE, "%s: %s must be %s, got %s", op, role, expected, zl_dtype_name(zl_tensor_dtype(t)));
    if (zl_tensor_numel(t) != zl_tensor_numel(p)) {
        char what[96];
        snprintf(what, sizeof what, "%s has %lld elements, p has %lld", role, (long long)zl_tensor_numel(t),
                 (long long)zl_tensor_numel(p));
        return zli_shape_error(op, what, t, p);
    }
    return ZL_OK;
}

zl_status zli_optim_buf_of(const char *op, zl_optim_buf *out, zl_tensor *p, zl_tensor *g, zl_tensor *m, zl_tensor *v,
                           zl_tensor *p_half)
{
    const unsigned f32 = 1u << ZL_DTYPE_F32, half = 1u << ZL_DTYPE_BF16 | 1u << ZL_DTYPE_F16;
    if (check_tensor(op, "p", p, p, f32, "f32") || check_tensor(op, "g", g, p, f32 | half, "f32, bf16 or f16") ||
        (m && check_tensor(op, "m", m, p, f32, "f32")) || (v && check_tensor(op, "v", v, p, f32, "f32")) ||
        (p_half && check_tensor(op, "p_half", p_half, p, half, "bf16 or f16")))
        return zli_last_code();
    *out = (zl_optim_buf){
        .p = zl_tensor_data(p),
        .g = zl_tensor_data(g),
        .g_dtype = zl_tensor_dtype(g),
        .m = m ? zl_tensor_data(m) : NULL,
        .v = v ? zl_tensor_data(v) : NULL,
        .p_half = p_half ? zl_tensor_data(p_half) : NULL,
        .half_dtype = p_half ? zl_tensor_dtype(p_half) : ZL_DTYPE_BF16,
        .n = zl_tensor_numel(p),
    };
    return ZL_OK;
}

zl_status zl_optim_buf_from_tensors(zl_optim_buf *out, zl_tensor *p, zl_tensor *g, zl_tensor *m, zl_tensor *v,
                                    zl_tensor *p_half)
{
    if (!out) return zl_error(ZL_EINVAL, "optim: output zl_optim_buf is NULL");
    if (!p) return zl_error(ZL_EINVAL, "optim: parameter tensor p is NULL");
    if (!g) return zl_error(ZL_EINVAL, "optim: gradient tensor g is NULL");
    zl_tensor *const all[5] = {p, g, m, v, p_half};
    static const char *const role[5] = {"p", "g", "m", "v", "p_half"};
    for (int i = 0; i < 5; i++)
        if (all[i] && zl_tensor_device(all[i]) != ZL_DEVICE_CPU)
            return zl_error(ZL_EINVAL, "optim: %s must be a CPU tensor (zl_optim_adam_tensors and the others take "
                            "device tensors)", role[i]);
    return zli_optim_buf_of("optim", out, p, g, m, v, p_half);
}
