// attnkit's own sgemm for AVX2 + FMA (gemm_kernel.inc): a 6 x 16 register block (12 accumulators of
// 8 floats), blocking as BLIS's Zen configuration (MC 144, KC 256, NC 4080). Compiled with
// -mavx2 -mfma whatever the build's -march (lib/CMakeLists.txt); ops::gemm calls it only when the
// processor has both (__builtin_cpu_supports).
#include <immintrin.h>

#include "attnkit/ops/gemm_kernels.hpp"

#define KNS avx2
#define V __m256
#define VW 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VSET1(x) _mm256_set1_ps(x)
namespace {
inline float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
}  // namespace
#define VHSUM(v) hsum8(v)
#define VZERO() _mm256_setzero_ps()
#define MR 6
#define MC 144
#define KC 256
#define NC 4080
#define DIRECT_M 24
#define DIRECT_A_N 64
#include "gemm_kernel.inc"
