/* Private to engine/optim/: builds the vector kernels that the header named
 * by ZLI_VEC_KERNELS writes over vec.h's zv_* names, once for AVX-512 and once
 * for AVX2, as <name>_avx512 and <name>_avx2. */
#ifdef ZLI_OPTIM_X86
#define ZLI_VEC_BITS 512
#include "vec.h"
#include ZLI_VEC_KERNELS
#undef ZLI_VEC_BITS
#define ZLI_VEC_BITS 256
#include "vec.h"
#include ZLI_VEC_KERNELS
#undef ZLI_VEC_BITS
#endif
