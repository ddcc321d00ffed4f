#include "attnkit/autograd/functional.hpp"

#include <algorithm>
#include <optional>

#include "attnkit/autograd/layers.hpp"
#include "attnkit/ops/feed_forward.hpp"
#include "attnkit/ops/linear.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::autograd {
namespace {

bool is_suffix(const Shape& small, const Shape& big) {
  return small.size() <= big.size() && std::equal(small.rbegin(), small.rend(), big.rbegin());
}

int axis_of(int axis, int rank, const char* op) {
  const int a = axis < 0 ? axis + rank : axis;
  AK_CHECK(a >= 0 && a < rank, "{}: axis {} is out of range for rank {}", op, axis, rank);
  return a;
}

// [outer, size along axis, inner] view of a shape.
struct AxisView {
  int64_t outer = 1, size = 0, inner = 1;
};
AxisView axis_view(const Shape& s, int axis) {
  AxisView v;
  for (int i = 0; i < axis; ++i) v.outer *= s[i];
  v.size = s[axis];
  for (size_t i = axis + 1; i < s.size(); ++i) v.inner *= s[i];
  return v;
}

// W [out, in] and b [out] (or undefined) as ops::linear_fused reads them, or nullopt when they are malformed.
std::optional<ops::LinearWeights> linear_weights(const Var& W, const Var& b, const PackedWeight& packed,
                                                 const LowpWeight& lowp = nullptr) {
  const Tensor& w = W.value();
  if (w.rank() != 2 || (b.defined() && b.shape() != Shape{w.dim(0)})) return std::nullopt;
  if (lowp && (lowp->out != w.dim(0) || lowp->in != w.dim(1))) return std::nullopt;
  ops::LinearWeights l;
  l.W = w.data(), l.out = w.dim(0), l.in = w.dim(1);
  l.b = b.defined() ? b.value().data() : nullptr;
  l.packed = packed;
  l.lowp = lowp;
  return l;
}

}  // namespace

Var add(const Var& a, const Var& b) {
  const Tensor &x = a.value(), &y = b.value();
  AK_CHECK((is_suffix(y.shape(), x.shape()) && y.numel() > 0) || x.numel() == 0,
           "add: shapes {} and {} do not broadcast (the second must be a suffix of the first)", x.shape_str(),
           y.shape_str());
  Tensor out = x;
  const int64_t n = y.numel();
  for (int64_t r = 0; r < out.numel(); r += n) {  // out = a + b (b repeated), a repeat at a time
    float* __restrict o = out.data() + r;
    const float* __restrict q = y.data();
    for (int64_t j = 0; j < n; ++j) o[j] += q[j];
  }
  return record("add", {a, b}, std::move(out), [n](const auto& dy, const auto& dx) {
    const Tensor& g = *dy[0];
    if (dx[0]) accumulate(*dx[0], g);  // d/da = 1
    if (dx[1])                          // d/db = sum over the repeats, in their order
      for (int64_t r = 0; r < g.numel(); r += n) {
        float* __restrict d = dx[1]->data();
        const float* __restrict q = g.data() + r;
        for (int64_t j = 0; j < n; ++j) d[j] += q[j];
      }
  });
}

Var add_in_place(const Var& a, Var b) {
  if (grad_enabled() || !b.defined() || b.impl().use_count() != 1 || b.impl()->param != nullptr ||
      a.shape() != b.shape())
    return add(a, b);
  float* p = b.impl()->value.data();  // b = a + b
  const float* q = a.value().data();
  const int64_t n = b.value().numel();
#pragma omp parallel for num_threads(num_threads()) if (n > (1 << 16)) schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = q[i] + p[i];
  return b;
}

Var sub(const Var& a, const Var& b) {
  AK_CHECK(a.shape() == b.shape(), "sub: shapes {} and {} differ", a.value().shape_str(), b.value().shape_str());
  Tensor out = a.value();
  for (int64_t i = 0; i < out.numel(); ++i) out[i] -= b.value()[i];
  return record("sub", {a, b}, std::move(out), [](const auto& dy, const auto& dx) {
    const Tensor& g = *dy[0];
    if (dx[0]) accumulate(*dx[0], g);
    if (dx[1])
      for (int64_t i = 0; i < g.numel(); ++i) (*dx[1])[i] -= g[i];
  });
}

Var mul(const Var& a, const Var& b) {
  AK_CHECK(a.shape() == b.shape(), "mul: shapes {} and {} differ", a.value().shape_str(), b.value().shape_str());
  Tensor out = a.value();
  for (int64_t i = 0; i < out.numel(); ++i) out[i] *= b.value()[i];
  return record("mul", {a, b}, std::move(out), [ai = a.impl(), bi = b.impl()](const auto& dy, const auto& dx) {
    const Tensor &g = *dy[0], &av = ai->val(), &bv = bi->val();
    // out = a * b:  da += g * b,  db += g * a
    if (dx[0])
      for (int64_t i = 0; i < g.numel(); ++i) (*dx[0])[i] += g[i] * bv[i];
    if (dx[1])
      for (int64_t i = 0; i < g.numel(); ++i) (*dx[1])[i] += g[i] * av[i];
  });
}

Var scale(const Var& a, float s) {
  Tensor out = a.value();
  for (float& v : out.values()) v *= s;
  return record("scale", {a}, std::move(out), [s](const auto& dy, const auto& dx) {
    if (dx[0])
      for (int64_t i = 0; i < dy[0]->numel(); ++i) (*dx[0])[i] += s * (*dy[0])[i];
  });
}

Var sum(const Var& a) {
  double acc = 0;
  for (float v : a.value().values()) acc += v;
  return record("sum", {a}, Tensor::scalar(static_cast<float>(acc)), [](const auto& dy, const auto& dx) {
    if (!dx[0]) return;
    const float g = (*dy[0])[0];  // d sum / d a_i = 1
    for (float& v : dx[0]->values()) v += g;
  });
}

Var mean(const Var& a) {
  const int64_t n = a.value().numel();
  AK_CHECK(n > 0, "mean: the input {} is empty", a.value().shape_str());
  return scale(sum(a), 1.0f / static_cast<float>(n));
}

Var reshape(const Var& a, Shape shape) {
  return record("reshape", {a}, a.value().reshaped(std::move(shape)), [](const auto& dy, const auto& dx) {
    if (dx[0]) accumulate(*dx[0], *dy[0]);  // same data, same order
  });
}

Var concat(const std::vector<Var>& parts, int axis) {
  AK_CHECK(!parts.empty(), "concat: no inputs");
  const Shape& s0 = parts[0].shape();
  const int ax = axis_of(axis, static_cast<int>(s0.size()), "concat");
  Shape out_shape = s0;
  out_shape[ax] = 0;
  for (const Var& p : parts) {
    Shape s = p.shape();
    AK_CHECK(s.size() == s0.size(), "concat: shapes {} and {} differ in rank", shape_str(s0), shape_str(s));
    out_shape[ax] += s[ax];
    s[ax] = s0[ax];
    AK_CHECK(s == s0, "concat: shapes {} and {} differ outside axis {}", shape_str(s0), p.value().shape_str(), axis);
  }
  Tensor out(out_shape);
  const AxisView ov = axis_view(out_shape, ax);
  std::vector<int64_t> offsets;
  int64_t off = 0;
  for (const Var& p : parts) {
    const AxisView pv = axis_view(p.shape(), ax);
    for (int64_t o = 0; o < pv.outer; ++o)
      std::copy_n(p.value().data() + o * pv.size * pv.inner, pv.size * pv.inner,
                  out.data() + (o * ov.size + off) * ov.inner);
    offsets.push_back(off);
    off += pv.size;
  }
  std::vector<AxisView> views;
  for (const Var& p : parts) views.push_back(axis_view(p.shape(), ax));
  return record("concat", parts, std::move(out), [ov, offsets, views](const auto& dy, const auto& dx) {
    for (size_t k = 0; k < dx.size(); ++k) {
      if (!dx[k]) continue;
      const AxisView& pv = views[k];
      for (int64_t o = 0; o < pv.outer; ++o) {
        const float* g = dy[0]->data() + (o * ov.size + offsets[k]) * ov.inner;
        float* d = dx[k]->data() + o * pv.size * pv.inner;
        for (int64_t i = 0; i < pv.size * pv.inner; ++i) d[i] += g[i];
      }
    }
  });
}

Var slice(const Var& a, int axis, int64_t begin, int64_t end) {
  const Shape& s = a.shape();
  const int ax = axis_of(axis, static_cast<int>(s.size()), "slice");
  AK_CHECK(0 <= begin && begin <= end && end <= s[ax], "slice: [{}, {}) is outside axis {} of {}", begin, end, axis,
           shape_str(s));
  const AxisView v = axis_view(s, ax);
  Shape out_shape = s;
  out_shape[ax] = end - begin;
  Tensor out(out_shape);
  const int64_t w = (end - begin) * v.inner;
  for (int64_t o = 0; o < v.outer; ++o)
    std::copy_n(a.value().data() + (o * v.size + begin) * v.inner, w, out.data() + o * w);
  return record("slice", {a}, std::move(out), [v, begin, w](const auto& dy, const auto& dx) {
    if (!dx[0]) return;
    for (int64_t o = 0; o < v.outer; ++o) {
      float* d = dx[0]->data() + (o * v.size + begin) * v.inner;
      const float* g = dy[0]->data() + o * w;
      for (int64_t i = 0; i < w; ++i) d[i] += g[i];
    }
  });
}

Var matmul(const Var& a, const Var& b) {
  const Tensor &A = a.value(), &B = b.value();
  AK_CHECK(A.rank() == 2 && B.rank() == 2 && A.dim(1) == B.dim(0), "matmul: shapes {} and {} do not multiply",
           A.shape_str(), B.shape_str());
  const int64_t M = A.dim(0), K = A.dim(1), N = B.dim(1);
  Tensor C({M, N});
  ops::gemm(ops::Trans::No, ops::Trans::No, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
  return record("matmul", {a, b}, std::move(C), [ai = a.impl(), bi = b.impl(), M, K, N](const auto& dy, const auto& dx) {
    using ops::Trans;
    const Tensor &A = ai->val(), &B = bi->val();
    // C = A B:  dA [M, K] += dC B^T,  dB [K, N] += A^T dC
    if (dx[0]) ops::gemm(Trans::No, Trans::Yes, M, K, N, 1.0f, dy[0]->data(), N, B.data(), N, 1.0f, dx[0]->data(), K);
    if (dx[1]) ops::gemm(Trans::Yes, Trans::No, K, N, M, 1.0f, A.data(), K, dy[0]->data(), N, 1.0f, dx[1]->data(), N);
  });
}

Var linear(const Var& x, const Var& W, const Var& b) {
  const Tensor bias = b.defined() ? b.value() : Tensor();
  Tensor y = ops::linear_forward(x.value(), W.value(), bias);
  std::vector<Var> inputs{x, W};
  if (b.defined()) inputs.push_back(b);
  // The node keeps its inputs alive: x and W are read from them, not copied.
  return record("linear", inputs, std::move(y), [xi = x.impl(), Wi = W.impl()](const auto& dy, const auto& dx) {
    ops::linear_backward(*dy[0], xi->val(), Wi->val(), dx[0], dx[1], dx.size() > 2 ? dx[2] : nullptr);
  });
}

Var linear(const Var& x, const Var& W, const Var& b, const LinearThen& then, const PackedWeight& packed,
           const LowpWeight& lowp) {
  const std::optional<ops::LinearWeights> l = linear_weights(W, b, packed, lowp);
  Shape ys = x.shape();
  if (l && !ys.empty()) ys.back() = l->out;
  const bool fused = !grad_enabled() && l && l->in > 0 && !x.shape().empty() && x.shape().back() == l->in &&
                     (!then.residual || then.residual->shape() == ys);
  if (!fused) {
    // (malformed shapes: the recorded ops below say what is wrong)
    AK_CHECK(!lowp || !grad_enabled(), "linear: {} weights [{}, {}] are for inference only (under autograd::NoGrad); "
             "a recorded product needs the float32 weights", ops::precision_name(lowp->precision), lowp->out, lowp->in);
    Var y = linear(x, W, b);                              // [..., O]
    if (then.relu) y = relu(y);                           // max(y, 0)
    if (then.residual) y = add(*then.residual, y);        // residual + y
    return y;
  }
  Tensor y(ys);  // [..., O] = act(x W^T + b) + residual
  ops::linear_fused(*l, x.value().data(), x.value().numel() / l->in, y.data(), then.relu,
                    then.residual ? then.residual->value().data() : nullptr);
  return Var(std::move(y));
}

Var feed_forward(const Var& x, const Var& W1, const Var& b1, const PackedWeight& packed1, const Var& W2, const Var& b2,
                 const PackedWeight& packed2, const Var& base, const LowpWeight& lowp1, const LowpWeight& lowp2) {
  const std::optional<ops::LinearWeights> l1 = linear_weights(W1, b1, packed1, lowp1),
                                          l2 = linear_weights(W2, b2, packed2, lowp2);
  if (!grad_enabled() && l1 && l2 && l2->in == l1->out && !x.shape().empty() && x.shape().back() == l1->in &&
      x.shape() == base.shape() && l2->out == l1->in) {
    Tensor y = Tensor::uninitialized(base.shape());  // written whole by the products
    ops::feed_forward(*l1, *l2, x.value().data(), x.value().numel() / l1->in, y.data(), base.value().data());
    return Var(std::move(y));
  }
  const Var h = linear(x, W1, b1, {true, nullptr}, packed1, lowp1);  // [..., F] = relu(x W1^T + b1)
  return linear(h, W2, b2, {false, &base}, packed2, lowp2);          // [..., E] = base + h W2^T + b2
}

}  // namespace attnkit::autograd
