// Legend: M rows, I in features, O out features.
#include "attnkit/ops/linear.hpp"

#include <algorithm>

#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

void linear_forward(const float* x, int64_t M, int64_t I, const float* W, int64_t O, const float* b, float* y) {
  // y [M, O] = x [M, I] W^T [I, O] + b (b added as the product stores)
  GemmEpilogue bias;
  bias.bias = b;
  gemm(Trans::No, Trans::Yes, M, O, I, 1.0f, x, I, W, I, 0.0f, y, O, GemmThreads::Policy, bias);
}

void linear_backward(const float* dy, const float* x, const float* W, int64_t M, int64_t I, int64_t O, float* dx,
                     float* dW, float* db) {
  // y = x W^T:  dx [M, I] += dy [M, O] W [O, I]
  if (dx) gemm(Trans::No, Trans::No, M, I, O, 1.0f, dy, O, W, I, 1.0f, dx, I);
  // dW [O, I] += dy^T [O, M] x [M, I]
  if (dW) gemm(Trans::Yes, Trans::No, O, I, M, 1.0f, dy, O, x, I, 1.0f, dW, I);
  // y += b:  db [O] += sum over rows of dy
  if (db)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < O; ++o) db[o] += dy[m * O + o];
}

// (Not Eigen's colwise().sum(): into an unaligned destination it sums the columns before the
// destination's first 32-byte boundary in another order than the others, so a gradient's last bits
// depended on where the heap had put it, and a resumed training run drifted from an uninterrupted one.)
void column_sums(const float* x, int64_t R, int64_t C, float* out) {
  std::fill(out, out + C, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[c] += x[r * C + c];
}

namespace {
struct LinearDims {
  int64_t M, I, O;
};
LinearDims check(const Tensor& x, const Tensor& W, const Tensor& b, const char* what) {
  AK_CHECK(W.rank() == 2, "{}: weight has shape {}, expected [out, in]", what, W.shape_str());
  const int64_t O = W.dim(0), I = W.dim(1);
  AK_CHECK(x.rank() >= 1 && x.dim(-1) == I, "{}: input has shape {}, expected [..., {}] (weight {} is [out, in])", what,
           x.shape_str(), I, W.shape_str());
  AK_CHECK(b.empty() || b.shape() == Shape{O}, "{}: bias has shape {}, expected [{}]", what, b.shape_str(), O);
  return {I == 0 ? 0 : x.numel() / I, I, O};
}
}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& W, const Tensor& b, const char* what) {
  const LinearDims d = check(x, W, b, what);
  Shape s = x.shape();
  s.back() = d.O;
  Tensor y(s);
  linear_forward(x.data(), d.M, d.I, W.data(), d.O, b.empty() ? nullptr : b.data(), y.data());
  return y;
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor* dx, Tensor* dW, Tensor* db,
                     const char* what) {
  const LinearDims d = check(x, W, db ? *db : Tensor(), what);
  Shape ys = x.shape();
  ys.back() = d.O;
  AK_CHECK(dy.shape() == ys, "{}: output gradient has shape {}, expected {}", what, dy.shape_str(), shape_str(ys));
  AK_CHECK(!dx || dx->shape() == x.shape(), "{}: input gradient has shape {}, expected {}", what, dx->shape_str(),
           x.shape_str());
  AK_CHECK(!dW || dW->shape() == W.shape(), "{}: weight gradient has shape {}, expected {}", what, dW->shape_str(),
           W.shape_str());
  linear_backward(dy.data(), x.data(), W.data(), d.M, d.I, d.O, dx ? dx->data() : nullptr, dW ? dW->data() : nullptr,
                  db ? db->data() : nullptr);
}

}  // namespace attnkit::ops
