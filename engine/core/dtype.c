/* The dtype traits table and the f32 <-> f16/bf16 conversions. Rounding is
 * round-to-nearest-even, as the hardware converters do. */
#include <string.h>
#include <omp.h>
#include <math.h>
#include "zlua/dtype.h"
#include "../math/convert.h"

/* The conversions are math/convert.h's, the kernels' own, inlined into
 * zl_convert's loops (the exported functions could be interposed, and a call
 * per element would not vectorize). */
uint16_t zl_f32_to_bf16(float f) { return zlm_f32_to_bf16(f); }
float zl_bf16_to_f32(uint16_t h) { return zlm_bf16_to_f32(h); }
uint16_t zl_f32_to_f16(float f) { return zlm_f32_to_f16(f); }
float zl_f16_to_f32(uint16_t h) { return zlm_f16_to_f32(h); }

static float f32_get(const void *p) { return *(const float *)p; }
static void f32_set(void *p, float v) { *(float *)p = v; }
static double f32_get64(const void *p) { return *(const float *)p; }
static void f32_set64(void *p, double v) { *(float *)p = (float)v; }
static float f16_get(const void *p) { return zl_f16_to_f32(*(const uint16_t *)p); }
static void f16_set(void *p, float v) { *(uint16_t *)p = zl_f32_to_f16(v); }
static double f16_get64(const void *p) { return f16_get(p); }
static void f16_set64(void *p, double v) { f16_set(p, (float)v); }
static float bf16_get(const void *p) { return zl_bf16_to_f32(*(const uint16_t *)p); }
static void bf16_set(void *p, float v) { *(uint16_t *)p = zl_f32_to_bf16(v); }
static double bf16_get64(const void *p) { return bf16_get(p); }
static void bf16_set64(void *p, double v) { bf16_set(p, (float)v); }
/* Float to integer saturates (NaN gives 0): a C cast of an out-of-range value
 * is undefined behaviour. */
static inline int64_t sat(double v, double lo, double hi)
{
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}
#define I64_LO (-9223372036854775808.0)
#define I64_HI 9223372036854774784.0   /* the largest double below 2^63 */

static float i32_get(const void *p) { return (float)*(const int32_t *)p; }
static void i32_set(void *p, float v) { *(int32_t *)p = (int32_t)sat(v, INT32_MIN, INT32_MAX); }
static double i32_get64(const void *p) { return *(const int32_t *)p; }
static void i32_set64(void *p, double v) { *(int32_t *)p = (int32_t)sat(v, INT32_MIN, INT32_MAX); }
static float i64_get(const void *p) { return (float)*(const int64_t *)p; }
static void i64_set(void *p, float v) { *(int64_t *)p = sat(v, I64_LO, I64_HI); }
static double i64_get64(const void *p) { return (double)*(const int64_t *)p; }
static void i64_set64(void *p, double v) { *(int64_t *)p = sat(v, I64_LO, I64_HI); }
static float u8_get(const void *p) { return *(const uint8_t *)p; }
static void u8_set(void *p, float v) { *(uint8_t *)p = (uint8_t)sat(v, 0, 255); }
static double u8_get64(const void *p) { return *(const uint8_t *)p; }
static void u8_set64(void *p, double v) { *(uint8_t *)p = (uint8_t)sat(v, 0, 255); }
static float bool_get(const void *p) { return *(const uint8_t *)p ? 1.0f : 0.0f; }
static void bool_set(void *p, float v) { *(uint8_t *)p = v != 0.0f; }
static double bool_get64(const void *p) { return *(const uint8_t *)p ? 1.0 : 0.0; }
static void bool_set64(void *p, double v) { *(uint8_t *)p = v != 0.0; }

static const zl_dtype_traits traits[ZL_DTYPE_COUNT] = {
    [ZL_DTYPE_F32] = {"f32", 4, true, f32_get, f32_set, f32_get64, f32_set64},
    [ZL_DTYPE_F16] = {"f16", 2, true, f16_get, f16_set, f16_get64, f16_set64},
    [ZL_DTYPE_BF16] = {"bf16", 2, true, bf16_get, bf16_set, bf16_get64, bf16_set64},
    [ZL_DTYPE_I32] = {"i32", 4, false, i32_get, i32_set, i32_get64, i32_set64},
    [ZL_DTYPE_I64] = {"i64", 8, false, i64_get, i64_set, i64_get64, i64_set64},
    [ZL_DTYPE_U8] = {"u8", 1, false, u8_get, u8_set, u8_get64, u8_set64},
    [ZL_DTYPE_BOOL] = {"bool", 1, false, bool_get, bool_set, bool_get64, bool_set64},
};

const zl_dtype_traits *zl_dtype_traits_of(zl_dtype dt)
{
    return (unsigned)dt < ZL_DTYPE_COUNT ? &traits[dt] : NULL;
}

const char *zl_dtype_name(zl_dtype dt)
{
    return (unsigned)dt < ZL_DTYPE_COUNT ? traits[dt].name : "invalid";
}

size_t zl_dtype_size(zl_dtype dt) { return (unsigned)dt < ZL_DTYPE_COUNT ? traits[dt].size : 0; }

zl_status zl_dtype_from_name(const char *name, zl_dtype *out)
{
    static const struct { const char *alias; zl_dtype dt; } names[] = {
        {"f32", ZL_DTYPE_F32},   {"float32", ZL_DTYPE_F32}, {"float", ZL_DTYPE_F32},
        {"fp32", ZL_DTYPE_F32},  {"f16", ZL_DTYPE_F16},     {"float16", ZL_DTYPE_F16},
        {"fp16", ZL_DTYPE_F16},  {"half", ZL_DTYPE_F16},    {"bf16", ZL_DTYPE_BF16},
        {"bfloat16", ZL_DTYPE_BF16}, {"i32", ZL_DTYPE_I32}, {"int32", ZL_DTYPE_I32},
        {"int", ZL_DTYPE_I32},   {"i64", ZL_DTYPE_I64},     {"int64", ZL_DTYPE_I64},
        {"long", ZL_DTYPE_I64},  {"u8", ZL_DTYPE_U8},       {"uint8", ZL_DTYPE_U8},
        {"byte", ZL_DTYPE_U8},   {"bool", ZL_DTYPE_BOOL},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].alias) == 0) { *out = names[i].dt; return ZL_OK; }
    return zl_error(ZL_EDTYPE, "unknown dtype '%s' (expected f32, f16, bf16, i32, i64, u8 or bool)",
                    name ? name : "(null)");
}

/* The four float conversions, threaded for long runs. Not from inside another
 * parallel region (copy_rows converts a row at a time in one): libgomp opens a
 * team for a nested region even when its `if` is false, and wakes a futex as
 * it closes it, a system call per row. */
#define CONVERT(S, D, EXPR)                                                   \
    do {                                                                      \
        const S *s_ = src;                                                    \
        D *d_ = dst;                                                          \
        if (n > 65536 && !omp_in_parallel()) {                                \
            _Pragma("omp parallel for schedule(static)")                      \
            for (size_t i = 0; i < n; i++) d_[i] = EXPR(s_[i]);               \
        } else {                                                              \
            for (size_t i = 0; i < n; i++) d_[i] = EXPR(s_[i]);               \
        }                                                                     \
    } while (0)

void zl_convert(const void *src, zl_dtype sdt, void *dst, zl_dtype ddt, size_t n)
{
    if ((unsigned)sdt >= ZL_DTYPE_COUNT || (unsigned)ddt >= ZL_DTYPE_COUNT) return;
    if (sdt == ddt) { memcpy(dst, src, n * traits[sdt].size); return; }
    if (sdt == ZL_DTYPE_F32 && ddt == ZL_DTYPE_BF16) { CONVERT(float, uint16_t, zlm_f32_to_bf16); return; }
    if (sdt == ZL_DTYPE_BF16 && ddt == ZL_DTYPE_F32) { CONVERT(uint16_t, float, zlm_bf16_to_f32); return; }
    if (sdt == ZL_DTYPE_F32 && ddt == ZL_DTYPE_F16) { CONVERT(float, uint16_t, zlm_f32_to_f16); return; }
    if (sdt == ZL_DTYPE_F16 && ddt == ZL_DTYPE_F32) { CONVERT(uint16_t, float, zlm_f16_to_f32); return; }
    /* Everything else goes through f64, exact for every value our dtypes hold
     * except i64 beyond 2^53. */
    const zl_dtype_traits *st = &traits[sdt], *dt = &traits[ddt];
    const char *s = src; char *d = dst;
    for (size_t i = 0; i < n; i++) dt->from_f64(d + i * dt->size, st->to_f64(s + i * st->size));
}
