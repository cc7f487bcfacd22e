/* Private to engine/optim/: the vector-width layer. Included with ZLI_VEC_BITS
 * 512 or 256 defined (vec_each.h does both), it names that width's float and
 * double vectors, its intrinsics and optim_impl.h's helpers zv_*, so that an
 * optimizer's vector kernels are written once, over zv_*, and built for
 * AVX-512 and for AVX2 with the instructions each was written with. Meant
 * to be included again: it first drops what an earlier inclusion named. */
#undef ZV_LANES
#undef ZV_TARGET
#undef ZV_NAME
#undef zv
#undef zvd
#undef zv_set1
#undef zv_load
#undef zv_store
#undef zv_add
#undef zv_sub
#undef zv_mul
#undef zv_div
#undef zv_sqrt
#undef zv_fmadd
#undef zv_fmsub
#undef zv_load_g
#undef zv_store_half
#undef zvd_zero
#undef zvd_sq_acc
#undef zvd_sum

#if ZLI_VEC_BITS == 512
#define ZV_LANES 16
#define ZV_TARGET ZLI_AVX512
#define ZV_NAME(f) f##_avx512
#define zv __m512
#define zvd __m512d
#define zv_set1 _mm512_set1_ps
#define zv_load _mm512_loadu_ps
#define zv_store _mm512_storeu_ps
#define zv_add _mm512_add_ps
#define zv_sub _mm512_sub_ps
#define zv_mul _mm512_mul_ps
#define zv_div _mm512_div_ps
#define zv_sqrt _mm512_sqrt_ps
#define zv_fmadd _mm512_fmadd_ps
#define zv_fmsub _mm512_fmsub_ps
#define zv_load_g zli_optim_load_g512
#define zv_store_half zli_optim_store_half512
#define zvd_zero _mm512_setzero_pd
#define zvd_sq_acc zli_optim_sq_acc512
#define zvd_sum _mm512_reduce_add_pd
#elif ZLI_VEC_BITS == 256
#define ZV_LANES 8
#define ZV_TARGET ZLI_AVX2
#define ZV_NAME(f) f##_avx2
#define zv __m256
#define zvd __m256d
#define zv_set1 _mm256_set1_ps
#define zv_load _mm256_loadu_ps
#define zv_store _mm256_storeu_ps
#define zv_add _mm256_add_ps
#define zv_sub _mm256_sub_ps
#define zv_mul _mm256_mul_ps
#define zv_div _mm256_div_ps
#define zv_sqrt _mm256_sqrt_ps
#define zv_fmadd _mm256_fmadd_ps
#define zv_fmsub _mm256_fmsub_ps
#define zv_load_g zli_optim_load_g256
#define zv_store_half zli_optim_store_half256
#define zvd_zero _mm256_setzero_pd
#define zvd_sq_acc zli_optim_sq_acc256
#define zvd_sum zli_optim_sum256
#else
#error "vec.h: ZLI_VEC_BITS must be 512 or 256"
#endif
