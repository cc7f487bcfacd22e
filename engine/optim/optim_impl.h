/* Private to engine/optim/: the kernel choice, argument checks, the chunking
 * every optimizer shares, and per-instruction-set helpers that read a gradient
 * of any supported dtype as f32, write the half copy of p and sum squares in
 * double (vec.h names them per vector width). */
#ifndef ZL_OPTIM_IMPL_H
#define ZL_OPTIM_IMPL_H

#include <math.h>
#include <string.h>
#include "../ops/op_util.h"

#if defined(__x86_64__) || defined(__i386__)
#define ZLI_OPTIM_X86 1
#include <immintrin.h>
#endif

enum { ZLI_ISA_SCALAR = 0, ZLI_ISA_AVX2 = 1, ZLI_ISA_AVX512 = 2 };

/* The kernel the next step uses (ZLI_ISA_*). */
ZLI_HIDDEN int zli_optim_isa(void);

/* Work is split into fixed chunks of this many elements, a multiple of every
 * vector width: only the last chunk has a tail, and a chunk's partial sum does
 * not depend on the thread count. */
#define ZLI_OPTIM_CHUNK 16384
static inline int64_t zli_optim_nchunks(int64_t n) { return (n + ZLI_OPTIM_CHUNK - 1) / ZLI_OPTIM_CHUNK; }

/* ZL_EINVAL unless lo <= x <= hi (x < hi when hi_open), x finite. */
ZLI_HIDDEN zl_status zli_optim_check_range(const char *op, const char *name, double x, double lo, double hi,
                                           bool hi_open);
/* Check the buffers of a step: hp and b non-NULL, the pointers each optimizer
 * needs, n >= 0, the dtypes, and that no two buffers overlap. */
ZLI_HIDDEN zl_status zli_optim_check_buf(const char *op, const void *hp, const zl_optim_buf *b, bool need_g,
                                         bool need_m, bool need_v);

/* Each optimizer's hyperparameters, checked as its step checks them (ZL_EINVAL
 * naming op and the value); the device path shares them. */
ZLI_HIDDEN zl_status zli_optim_adam_check(const char *op, const zl_optim_adam *hp);
ZLI_HIDDEN zl_status zli_optim_sgd_check(const char *op, const zl_optim_sgd *hp);
ZLI_HIDDEN zl_status zli_optim_lamb_check(const char *op, const zl_optim_lamb *hp);

/* *out from tensors wherever they live (the caller checks they live in one
 * place): p f32, g f32/bf16/f16, m and v f32, p_half bf16/f16, each
 * contiguous with p's element count; m, v, p_half may be NULL. Errors name op
 * and the role. */
ZLI_HIDDEN zl_status zli_optim_buf_of(const char *op, zl_optim_buf *out, zl_tensor *p, zl_tensor *g, zl_tensor *m,
                                      zl_tensor *v, zl_tensor *p_half);

/* The scalar kernels work in blocks of this many elements: the gradient is
 * first read into an f32 block and the half copy written after, so the loop in
 * between is plain f32 arithmetic that the compiler vectorises on any target. */
#define ZLI_OPTIM_BLOCK 256

/* out[0..n) = g[i..i+n) as f32. */
static inline void zli_optim_read_g(float *restrict out, const void *g, zl_dtype dt, int64_t i, int64_t n)
{
    const uint16_t *h = (const uint16_t *)g + i;
    switch (dt) {
    case ZL_DTYPE_BF16:
        for (int64_t k = 0; k < n; k++) {
            uint32_t u = (uint32_t)h[k] << 16;
            memcpy(&out[k], &u, 4);
        }
        break;
    case ZL_DTYPE_F16:
        for (int64_t k = 0; k < n; k++) out[k] = zl_f16_to_f32(h[k]);
        break;
    default: memcpy(out, (const float *)g + i, (size_t)n * sizeof *out);
    }
}

/* half[i..i+n) = p[0..n) rounded to dt. */
static inline void zli_optim_write_half(void *half, zl_dtype dt, int64_t i, const float *restrict p, int64_t n)
{
    uint16_t *h = (uint16_t *)half + i;
    for (int64_t k = 0; k < n; k++) h[k] = dt == ZL_DTYPE_F16 ? zl_f32_to_f16(p[k]) : zl_f32_to_bf16(p[k]);
}

#ifdef ZLI_OPTIM_X86
#define ZLI_AVX512 __attribute__((target("avx512f")))
#define ZLI_AVX2 __attribute__((target("avx2,fma,f16c")))

static inline ZLI_AVX512 __m512 zli_optim_load_g512(const void *g, zl_dtype dt, int64_t i)
{
    const uint16_t *h = (const uint16_t *)g + i;
    switch (dt) {
    case ZL_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)h)), 16));
    case ZL_DTYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
    default: return _mm512_loadu_ps((const float *)g + i);
    }
}

/* bf16 rounding done in integers, as zl_f32_to_bf16 does, so the bits match the
 * scalar path: the bf16 instructions would flush subnormals. */
static inline ZLI_AVX512 void zli_optim_store_half512(void *h, zl_dtype dt, int64_t i, __m512 x)
{
    __m256i *dst = (__m256i *)((uint16_t *)h + i);
    if (dt == ZL_DTYPE_F16) {
        _mm256_storeu_si256(dst, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        return;
    }
    __m512i u = _mm512_castps_si512(x), hi = _mm512_srli_epi32(u, 16);
    __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(dst, _mm512_cvtepi32_epi16(r));
}

/* acc + x*x for the 16 floats of x, widened to double. */
static inline ZLI_AVX512 __m512d zli_optim_sq_acc512(__m512d acc, __m512 x)
{
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_fmadd_pd(hi, hi, _mm512_fmadd_pd(lo, lo, acc));
}

static inline ZLI_AVX2 __m256 zli_optim_load_g256(const void *g, zl_dtype dt, int64_t i)
{
    const uint16_t *h = (const uint16_t *)g + i;
    switch (dt) {
    case ZL_DTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)), 16));
    case ZL_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
    default: return _mm256_loadu_ps((const float *)g + i);
    }
}

static inline ZLI_AVX2 void zli_optim_store_half256(void *h, zl_dtype dt, int64_t i, __m256 x)
{
    __m128i *dst = (__m128i *)((uint16_t *)h + i);
    if (dt == ZL_DTYPE_F16) {
        _mm_storeu_si128(dst, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        return;
    }
    __m256i u = _mm256_castps_si256(x), hi = _mm256_srli_epi32(u, 16);
    __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    /* Both sides are below 2^31, so the signed compare is the unsigned one. */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* Pack the eight 16-bit values (packus works per 128-bit lane) into the low half. */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(dst, _mm256_castsi256_si128(packed));
}

static inline ZLI_AVX2 __m256d zli_optim_sq_acc256(__m256d acc, __m256 x)
{
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    return _mm256_fmadd_pd(hi, hi, _mm256_fmadd_pd(lo, lo, acc));
}

static inline ZLI_AVX2 double zli_optim_sum256(__m256d x)
{
    double t[4];
    _mm256_storeu_pd(t, x);
    return (t[0] + t[1]) + (t[2] + t[3]);
}
#endif

#endif
