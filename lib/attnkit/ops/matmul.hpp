// The library's one matrix-multiply entry (docs/architecture.md, Floors): every kernel's GEMM goes through here,
// so the implementation behind it is chosen in one place: attnkit's own BLIS-style kernel
// (ops/gemm_kernel.inc) in its AVX-512 or AVX2+FMA build, picked at run time from the processor,
// Eigen's blocked GEMM on processors without AVX2 (ops/gemm_kernels.hpp names them; the
// measurements behind the choice: docs/benchmarks.md, "GEMM").
//
//   C [M, N] = alpha * op(A) [M, K] * op(B) [K, N] + beta * C
//   op(X) = X or X^T (Trans::Yes); all matrices row-major with leading dimensions (row strides)
//   lda, ldb, ldc, like cblas_sgemm(CblasRowMajor, ...). beta == 0 ignores C's old contents
//   (even NaN). The transposed forms serve backward: dX = dY W (No, No), dW += dY^T X (Yes, No).
//
// Threads: the library's thread policy (tensor/threads.hpp, num_threads()); a call made inside an
// OpenMP parallel region, or with GemmThreads::This, runs on the calling thread only.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace attnkit::ops {

enum class Trans { No, Yes };
enum class GemmThreads { Policy, This };

// What a product does to C's values as it stores them, while they are still in registers (fused:
// no second pass over C, as ONNX Runtime fuses a MatMul's bias and activation):
//   C = act(alpha op(A) op(B) + beta C + bias) + add
// bias [N] added to every row (nullptr: none); act = relu (max(v, 0)) or none; add [M, N] with row
// stride ldadd (nullptr: none), e.g. a residual connection. The result is the same, bit for bit, as
// the product followed by those steps in that order.
struct GemmEpilogue {
  const float* bias = nullptr;
  bool relu = false;
  const float* add = nullptr;
  int64_t ldadd = 0;
};

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, GemmThreads threads = GemmThreads::Policy,
          const GemmEpilogue& epilogue = {});

// The multiplications' precision (PyTorch's torch.set_float32_matmul_precision, and autocast's bfloat16
// products). Float32, the default: float32 operands, the numbers every test compares with PyTorch. BFloat16: ops::gemm
// (from 5 rows of C), gemm_packed and the recurrent layers' time steps round both operands to bfloat16 (8 bits of
// mantissa: a relative error up to 2^-9 per operand) and add the products in float32, two per instruction
// (vdpbf16ps: twice vfmadd231ps's multiply-adds), on processors with AVX512_BF16 and the AVX-512 kernel only.
// Products of 4 rows or fewer by ops::gemm, attention's tiled kernel and a batch of one stay float32.
// Process-wide: a training run sets it before its first step (train::TrainConfig::matmul_precision). A GemmPackedB
// keeps the precision in force when it was packed.
enum class MatmulPrecision { Float32, BFloat16 };
bool matmul_precision_available(MatmulPrecision precision);
// Throws (attnkit::Error) when the processor cannot run it.
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();
const char* matmul_precision_name(MatmulPrecision precision);  // "float32", "bf16"
MatmulPrecision parse_matmul_precision(std::string_view name);  // from those names; throws on another

// op(B) [K, N] packed once for many products with it, e.g. a recurrent layer's W_hh at every time
// step: the panels the kernel that ops::gemm picks would otherwise pack on every call. A derived copy
// (docs/architecture.md, Weights: one source of truth): build a new one when the weight's values
// change (its Parameter's version).
// Layout: Panels for products of many rows (the kernel's NR-wide panels); Rows for products of one row
// at a time (a recurrent layer's time step with a batch of one): blocks of 4 panels' columns, each read
// as one stream. Both give the same bits for any M; each is slower at the other's job.
class GemmPackedB {
 public:
  enum class Layout { Panels, Rows };
  GemmPackedB() = default;
  GemmPackedB(Trans tb, int64_t K, int64_t N, const float* B, int64_t ldb, Layout layout = Layout::Panels);
  int64_t rows() const { return K_; }  // K
  int64_t cols() const { return N_; }  // N
  Layout layout() const { return layout_; }
  // The panels from column j0 on (j0 a multiple of gemm_panel_shape().nr), for ops::gemm_panels, when the
  // whole pack is one block of the panel kernel (Layout::Panels, K <= max_depth, N <= max_width); else nullptr.
  const float* panels(int64_t j0) const;
  // The same columns as bfloat16 pair panels, for ops::gemm_panels_pairs, when op(B) was packed under
  // MatmulPrecision::BFloat16 (and panels(j0) is not nullptr); else nullptr.
  const uint32_t* pairs(int64_t j0) const;

 private:
  friend void gemm_packed(Trans, int64_t, float, const float*, int64_t, const GemmPackedB&, float, float*, int64_t,
                          GemmThreads, const GemmEpilogue&);
  int64_t K_ = 0, N_ = 0;
  int kernel_ = 0;  // the GemmKernel it was packed for
  Layout layout_ = Layout::Panels;
  std::vector<float> data_;
  std::vector<uint32_t> pairs_;  // op(B) as bfloat16 pair panels (MatmulPrecision::BFloat16, Layout::Panels)
};

// C [M, N] = alpha * op(A) [M, K] * B [K, N] + beta * C with B pre-packed: ops::gemm's semantics
// (strides, beta 0 ignores C, threads), without packing B, then the epilogue. Threads take blocks of
// C's rows from a shared counter (or of its columns when C has few rows): nothing is packed twice,
// and a thread slowed by other work on its core takes fewer blocks.
void gemm_packed(Trans ta, int64_t M, float alpha, const float* A, int64_t lda, const GemmPackedB& B, float beta,
                 float* C, int64_t ldc, GemmThreads threads = GemmThreads::Policy, const GemmEpilogue& epilogue = {});

// Whether a product of M rows on a pre-packed B gives the same bits as ops::gemm on the unpacked
// one: with the own kernels (gemm_panel_shape().mr > 0) from 5 rows, where ops::gemm runs the same
// register blocks (up to 4 rows it takes dot products along the rows of B when op(B) = B^T, and for
// op(B) = B streams B's rows for 1 or 2). Callers that keep a packed weight take it only then, so a
// forward's bits never depend on which path ran.
bool gemm_packed_matches(int64_t M);

// Reference: plain loops in double precision (tests compare gemm to it).
void gemm_naive(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace attnkit::ops
