#include "attnkit/ops/conv1d.hpp"

#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/row_loop.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

namespace {

struct ConvDims {
  int64_t N, T, C, O, k, P, dil;
};

ConvDims check_conv(const Tensor& x, const Tensor& w, const Tensor* b, const Conv1dOptions& options) {
  AK_CHECK(x.rank() == 3, "conv1d: input has shape {}, expected [N, T, C]", x.shape_str());
  AK_CHECK(w.rank() == 3, "conv1d: weight has shape {}, expected [O, C, k]", w.shape_str());
  AK_CHECK(w.dim(1) == x.dim(2), "conv1d: weight {} and input {} disagree on the channels C", w.shape_str(),
           x.shape_str());
  AK_CHECK(w.dim(2) >= 1, "conv1d: weight {} has kernel size 0", w.shape_str());
  AK_CHECK(options.dilation >= 1, "conv1d: dilation {} is not >= 1", options.dilation);
  if (b) AK_CHECK(b->shape() == Shape{w.dim(0)}, "conv1d: bias has shape {}, expected [O] = [{}]", b->shape_str(), w.dim(0));
  return {x.dim(0), x.dim(1), x.dim(2), w.dim(0), w.dim(2), conv1d_left_padding(w.dim(2), options), options.dilation};
}

// cols [N*T, C*k] from x [N, T, C] (zeros where a tap falls outside the sequence).
Tensor im2col(const Tensor& x, const ConvDims& d) {
  Tensor cols({d.N * d.T, d.C * d.k});  // [N*T, C*k]
  const float* xp = x.data();
  float* cp = cols.data();
  detail::for_rows(d.N * d.T, d.C * d.k, [&](int64_t row) {
    const int64_t n = row / d.T, t = row % d.T;
    float* out = cp + row * d.C * d.k;
    for (int64_t j = 0; j < d.k; ++j) {
      const int64_t s = t - d.P + j * d.dil;  // the input position tap j reads
      if (s < 0 || s >= d.T) {
        for (int64_t c = 0; c < d.C; ++c) out[c * d.k + j] = 0.0f;
      } else {
        const float* in = xp + (n * d.T + s) * d.C;
        for (int64_t c = 0; c < d.C; ++c) out[c * d.k + j] = in[c];
      }
    }
  });
  return cols;
}

}  // namespace

int64_t conv1d_left_padding(int64_t k, const Conv1dOptions& options) {
  const int64_t total = options.dilation * (k - 1);
  return options.padding == ConvPadding::Causal ? total : total / 2;
}

Tensor conv1d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv1dOptions& options) {
  const ConvDims d = check_conv(x, w, b, options);
  Tensor y({d.N, d.T, d.O});  // [N, T, O]
  if (y.numel() == 0) return y;
  const Tensor cols = im2col(x, d);  // [N*T, C*k]
  // y [N*T, O] = cols [N*T, C*k] w^T [C*k, O]
  gemm(Trans::No, Trans::Yes, d.N * d.T, d.O, d.C * d.k, 1.0f, cols.data(), d.C * d.k, w.data(), d.C * d.k, 0.0f,
       y.data(), d.O);
  if (b) {
    float* yp = y.data();
    const float* bp = b->data();
    for (int64_t r = 0; r < d.N * d.T; ++r)
      for (int64_t o = 0; o < d.O; ++o) yp[r * d.O + o] += bp[o];
  }
  return y;
}

void conv1d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv1dOptions& options, Tensor* dx,
                     Tensor* dw, Tensor* db) {
  const ConvDims d = check_conv(x, w, nullptr, options);
  AK_CHECK(dy.shape() == Shape({d.N, d.T, d.O}), "conv1d backward: dy has shape {}, expected [N, T, O] = [{}, {}, {}]",
           dy.shape_str(), d.N, d.T, d.O);
  if (dx) AK_CHECK(dx->shape() == x.shape(), "conv1d backward: dx has shape {}, expected {}", dx->shape_str(), x.shape_str());
  if (dw) AK_CHECK(dw->shape() == w.shape(), "conv1d backward: dw has shape {}, expected {}", dw->shape_str(), w.shape_str());
  if (db) AK_CHECK(db->shape() == Shape{d.O}, "conv1d backward: db has shape {}, expected [{}]", db->shape_str(), d.O);
  if (dy.numel() == 0) return;
  const int64_t NT = d.N * d.T, Ck = d.C * d.k;
  // y += b[o]  ->  db[o] += sum over rows of dy[row, o]
  if (db) {
    const float* g = dy.data();
    float* out = db->data();
    for (int64_t r = 0; r < NT; ++r)
      for (int64_t o = 0; o < d.O; ++o) out[o] += g[r * d.O + o];
  }
  // y = cols w^T  ->  dw [O, C*k] += dy^T [O, N*T] cols [N*T, C*k]
  if (dw) {
    const Tensor cols = im2col(x, d);  // [N*T, C*k] (recomputed: the forward kept nothing)
    gemm(Trans::Yes, Trans::No, d.O, Ck, NT, 1.0f, dy.data(), d.O, cols.data(), Ck, 1.0f, dw->data(), Ck);
  }
  // ... and dcols [N*T, C*k] = dy [N*T, O] w [O, C*k]; then cols[(n, t), c*k + j] = x[n, t - P + j*dil, c]
  // gives dx[n, s, c] += sum_j dcols[(n, s + P - j*dil), c*k + j] (a gather per input row: no races)
  if (dx) {
    Tensor dcols({NT, Ck});  // [N*T, C*k]
    gemm(Trans::No, Trans::No, NT, Ck, d.O, 1.0f, dy.data(), d.O, w.data(), Ck, 0.0f, dcols.data(), Ck);
    const float* gc = dcols.data();
    float* gx = dx->data();
    detail::for_rows(NT, Ck, [&](int64_t row) {
      const int64_t n = row / d.T, s = row % d.T;
      float* out = gx + row * d.C;
      for (int64_t j = 0; j < d.k; ++j) {
        const int64_t t = s + d.P - j * d.dil;  // the output position whose tap j read x_s
        if (t < 0 || t >= d.T) continue;
        const float* in = gc + (n * d.T + t) * Ck;
        for (int64_t c = 0; c < d.C; ++c) out[c] += in[c * d.k + j];
      }
    });
  }
}

Tensor conv1d_forward_naive(const Tensor& x, const Tensor& w, const Tensor* b, const Conv1dOptions& options) {
  const ConvDims d = check_conv(x, w, b, options);
  Tensor y({d.N, d.T, d.O});  // [N, T, O]
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t o = 0; o < d.O; ++o) {
        double acc = b ? (*b)[o] : 0.0;
        for (int64_t j = 0; j < d.k; ++j) {
          const int64_t s = t - d.P + j * d.dil;
          if (s < 0 || s >= d.T) continue;
          for (int64_t c = 0; c < d.C; ++c) acc += double(w[(o * d.C + c) * d.k + j]) * x[(n * d.T + s) * d.C + c];
        }
        y[(n * d.T + t) * d.O + o] = static_cast<float>(acc);
      }
  return y;
}

}  // namespace attnkit::ops
