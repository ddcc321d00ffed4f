// attnkit's own sgemm for AVX-512F (gemm_kernel.inc): a 12 x 32 register block (24 accumulators of
// 16 floats), MC 240, KC 512, NC 3072 (the A block fits a 1 MB L2 of Zen 4, the B block the L3;
// KC 512 makes K = 512 one block, C written once; docs/benchmarks.md).
// Compiled with -mavx512f -mfma whatever the build's -march (lib/CMakeLists.txt); ops::gemm calls it
// only when the processor has AVX-512F (__builtin_cpu_supports).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // _mm512_reduce_add_ps, GCC 12 false positive
#include <immintrin.h>

#include "attnkit/ops/gemm_kernels.hpp"

#define KNS avx512
#define V __m512
#define VW 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VSET1(x) _mm512_set1_ps(x)
#define VHSUM(v) _mm512_reduce_add_ps(v)
#define VZERO() _mm512_setzero_ps()
#define MR 12
#define MC 240
#define KC 512
#define NC 3072
#define DIRECT_M 48
#define DIRECT_A_N 64
#include "gemm_kernel.inc"
