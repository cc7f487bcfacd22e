/* zlua/dtype.h — element types and their traits; f32 <-> half conversions
 * with round-to-nearest-even. Enum values are stored in checkpoints: append only. */
#ifndef ZLUA_DTYPE_H
#define ZLUA_DTYPE_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zl_dtype {
    ZL_DTYPE_F32 = 0,
    ZL_DTYPE_F16 = 1,
    ZL_DTYPE_BF16 = 2,
    ZL_DTYPE_I32 = 3,
    ZL_DTYPE_I64 = 4,
    ZL_DTYPE_U8 = 5,
    ZL_DTYPE_BOOL = 6,
    ZL_DTYPE_COUNT
} zl_dtype;

typedef struct zl_dtype_traits {
    const char *name;          /* "f32", "bf16", ... */
    size_t size;               /* bytes per element */
    bool is_float;
    float (*to_f32)(const void *p);
    void (*from_f32)(void *p, float v);
    double (*to_f64)(const void *p);
    void (*from_f64)(void *p, double v);
} zl_dtype_traits;

/* Traits of `dt`, or NULL when dt is out of range. */
ZL_API const zl_dtype_traits *zl_dtype_traits_of(zl_dtype dt);
ZL_API const char *zl_dtype_name(zl_dtype dt);
ZL_API size_t zl_dtype_size(zl_dtype dt);
/* Parse a name ("f32", "float32", "bf16", "bfloat16", "f16", "fp16", "half",
 * "i32", "int32", "i64", "int64", "long", "u8", "uint8", "bool"). */
ZL_API zl_status zl_dtype_from_name(const char *name, zl_dtype *out);

/* Scalar conversions, round-to-nearest-even; NaN stays NaN, overflow -> inf. */
ZL_API uint16_t zl_f32_to_bf16(float f);
ZL_API float zl_bf16_to_f32(uint16_t h);
ZL_API uint16_t zl_f32_to_f16(float f);
ZL_API float zl_f16_to_f32(uint16_t h);

/* Bulk conversions over n contiguous elements (an invalid dtype writes nothing).
 * Float to integer saturates at the integer type's range; NaN becomes 0. */
ZL_API void zl_convert(const void *src, zl_dtype src_dt, void *dst, zl_dtype dst_dt, size_t n);

#ifdef __cplusplus
}
#endif
#endif
