// lstm-run's request and result handling (recurrent_request.hpp).
#include "attnkit/app/recurrent_request.hpp"

#include <cstring>
#include <optional>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/reference.hpp"
#include "attnkit/tensor/creation.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::app {

using nn::CellKind;
using nn::WeightLayout;
using ops::gate_count;

io::Value trace_bundle(const ops::RecurrentCache& cache, CellKind cell, WeightLayout layout,
                       const std::vector<int64_t>* lengths) {
  const int G = gate_count(cell);
  const int64_t T = cache.h.dim(0), N = cache.h.dim(1), H = cache.h.dim(2);
  // [T, N, W] time-major -> [N, T, W] batch-first, taking W columns from `from` starting at col0
  auto batch_first = [&](const attnkit::detail::ScratchTensor& src, int64_t col0, int64_t width) {
    const int64_t src_w = src.dim(2);
    Tensor dst({N, T, width});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        if (!lengths || t < (*lengths)[n])  // padded steps stay zero
          std::memcpy(dst.data() + (n * T + t) * width, src.data() + (t * N + n) * src_w + col0, sizeof(float) * width);
    return dst;
  };
  io::Value b = io::Value::bundle();
  if (cache.pre.rank() == 3) {  // kept (possibly with T = 0)
    // a in the layout's gate order (cs231n LSTM: i, f, o, g)
    Tensor a = batch_first(cache.pre, 0, G * H);
    if (layout == WeightLayout::Cs231n && cell == CellKind::Lstm) {
      Tensor re({N, T, G * H});
      for (int64_t row = 0; row < N * T; ++row)
        for (int g = 0; g < G; ++g)
          std::memcpy(re.data() + row * G * H + nn::cs231n_gate(cell, g) * H, a.data() + row * G * H + g * H,
                      sizeof(float) * H);
      a = std::move(re);
    }
    b.set("a", a);
  }
  if (cell == CellKind::Lstm) {
    b.set("i", batch_first(cache.gates, 0, H));
    b.set("f", batch_first(cache.gates, H, H));
    b.set("o", batch_first(cache.gates, 3 * H, H));
    b.set("g", batch_first(cache.gates, 2 * H, H));
    b.set("c", batch_first(cache.c, 0, H));
  } else if (cell == CellKind::Gru) {
    b.set("r", batch_first(cache.gates, 0, H));
    b.set("z", batch_first(cache.gates, H, H));
    b.set("n", batch_first(cache.gates, 2 * H, H));
  }
  b.set("h", batch_first(cache.h, 0, H));
  return b;
}

io::Value run_sequence(nn::Recurrent& model, const SequenceRequest& req) {
  const ops::RecurrentConfig& cfg = model.config();
  const int64_t LD = cfg.layers * cfg.directions(), H = cfg.hidden_size, D = cfg.input_size;
  const bool tm = req.time_major;
  auto from = [](const std::string& source) { return source.empty() ? std::string() : source + ": "; };
  const std::string xs = from(req.sources.x);
  const std::string batched_form = tm ? "[T, N, {}]" : "[N, T, {}]";
  AK_CHECK(req.x.rank() == 3 || (req.x.rank() == 2 && !tm), "{}input has shape {}, expected {}{} (D = {})", xs,
           req.x.shape_str(), fmt::format(fmt::runtime(batched_form), D), tm ? "" : fmt::format(" or [T, {}]", D), D);
  const bool unbatched = req.x.rank() == 2;
  AK_CHECK(req.x.dim(-1) == D, "{}input has shape {}, expected {} (the weights' input size D is {})", xs,
           req.x.shape_str(), unbatched ? fmt::format("[T, {}]", D) : fmt::format(fmt::runtime(batched_form), D), D);
  // batch-first inside: [T, N, D] -> [N, T, D] when time-major (and every [N, T, ..] result back)
  const int64_t N = unbatched ? 1 : req.x.dim(tm ? 1 : 0), T = req.x.dim(unbatched ? 0 : tm ? 0 : 1);
  Tensor x = unbatched ? req.x.reshaped({1, T, D}) : tm ? transpose(req.x, {1, 0, 2}) : req.x;
  auto to_wire = [&](Tensor t) { return tm ? transpose(t, {1, 0, 2}) : t; };  // [N, T, W] -> [T, N, W]
  // States: [L*dirs, H] for a [T, D] input, [L*dirs, N, H] otherwise.
  std::optional<Tensor> h0, c0;
  auto state = [&](const Tensor* t, const char* name, const std::string& source, std::optional<Tensor>& dst) {
    if (!t) return;
    const Shape want = unbatched ? Shape{LD, H} : Shape{LD, N, H};
    AK_CHECK(t->shape() == want, "{}{} has shape {}, expected {} ({}) for {} layer{} x {} direction{} and hidden size {}",
             from(source), name, t->shape_str(), shape_str(want), unbatched ? "layers*dirs, H" : "layers*dirs, N, H",
             cfg.layers, cfg.layers > 1 ? "s" : "", cfg.directions(), cfg.directions() > 1 ? "s" : "", H);
    dst = t->reshaped({LD, N, H});
  };
  state(req.h0, "h0", req.sources.h0, h0);
  AK_CHECK(!req.c0 || cfg.cell == CellKind::Lstm, "{}c0 is given, but a {} has no cell state (c0 is for lstm)",
           from(req.sources.c0), ops::cell_name(cfg.cell));
  state(req.c0, "c0", req.sources.c0, c0);
  std::vector<int64_t> lengths;
  if (req.lengths) lengths = io::lengths_from(*req.lengths, N, T, from(req.sources.lengths) + "lengths");

  ops::RecurrentInputs in;
  in.x = &x;
  in.h0 = h0 ? &*h0 : nullptr;
  in.c0 = c0 ? &*c0 : nullptr;
  in.lengths = req.lengths ? &lengths : nullptr;
  // The upstream gradients, checked before any work: {output, h_n, c_n}, each as the result it belongs to.
  std::optional<Tensor> dy_out, dy_hn, dy_cn;
  if (req.grad_output) {
    const std::string& src = req.grad_output_source;
    const io::Value& g = *req.grad_output;
    const Shape out_shape = unbatched ? Shape{T, cfg.directions() * H}
                            : tm      ? Shape{T, N, cfg.directions() * H}
                                      : Shape{N, T, cfg.directions() * H};
    const Shape state_shape = unbatched ? Shape{LD, H} : Shape{LD, N, H};
    auto take = [&](const Tensor& t, const std::string& name, const Shape& want, std::optional<Tensor>& dst) {
      AK_CHECK(t.shape() == want, "{}: the gradient of {} has shape {}, expected {} (the shape of {})", src, name,
               t.shape_str(), shape_str(want), name);
      const int64_t i = io::find_nan(t);
      AK_CHECK(i < 0, "{}: the gradient of {} (shape {}) has NaN at {}", src, name, t.shape_str(),
               shape_str(unravel_index(i, t.shape())));
      Shape batched = want;
      if (unbatched) batched.insert(batched.begin() + (name == "output" ? 0 : 1), 1);
      dst = tm && name == "output" ? transpose(t, {1, 0, 2}) : t.reshaped(batched);
    };
    if (g.is_tensor()) {
      take(g.tensor(), "output", out_shape, dy_out);
    } else {
      AK_CHECK(g.is_bundle(), "{}: expected a tensor shaped like output, or a bundle of output, h_n, c_n; got {}", src,
               g.why());
      for (const auto& [name, v] : g.members()) {  // the names first: a typo is named before any shape
        AK_CHECK(name == "output" || name == "h_n" || name == "c_n",
                 "{}: unexpected member \"{}\" (upstream gradients are output, h_n{})", src, name,
                 cfg.cell == CellKind::Lstm ? ", c_n" : "");
        AK_CHECK(name != "c_n" || cfg.cell == CellKind::Lstm, "{}: c_n is given, but a {} has no c_n", src,
                 ops::cell_name(cfg.cell));
      }
      for (const auto& [name, v] : g.members()) {
        const bool state = name == "h_n" || name == "c_n";
        AK_CHECK(v.is_tensor(), "{}: {} is not a tensor: {}", src, name, v.why());
        take(v.tensor(), name, state ? state_shape : out_shape,
             name == "output" ? dy_out : name == "h_n" ? dy_hn : dy_cn);
      }
    }
  }

  ops::RunOptions options;
  options.trace = req.trace;
  options.keep_cache = req.grad_output != nullptr;
  ops::RecurrentResult r = model.forward(in, options);

  auto drop_n = [&](Tensor t, int axis) {  // remove the batch axis of a [T, D] run
    if (!unbatched) return t;
    Shape s = t.shape();
    s.erase(s.begin() + axis);
    return t.reshaped(s);
  };
  io::Value out = io::Value::bundle();
  out.set("output", to_wire(drop_n(std::move(r.output), 0)));
  out.set("h_n", drop_n(std::move(r.h_n), 1));
  if (cfg.cell == CellKind::Lstm) out.set("c_n", drop_n(std::move(r.c_n), 1));
  if (req.trace) {
    for (int d = 0; d < cfg.directions(); ++d) {
      io::Value tb = trace_bundle(r.caches[d], cfg.cell, req.layout, req.lengths ? &lengths : nullptr);
      io::Value shaped = io::Value::bundle();
      for (const auto& [name, v] : tb.members()) shaped.set(name, to_wire(drop_n(v.tensor(), 0)));
      out.set(d == 0 ? "trace" : "trace_reverse", std::move(shaped));
    }
  }
  if (req.grad_output) {
    model.zero_grad();
    Tensor dx(x.shape()), dh0(h0 ? h0->shape() : Shape{0}), dc0(c0 ? c0->shape() : Shape{0});
    ops::RecurrentGradOutputs dy;
    dy.output = dy_out ? &*dy_out : nullptr;
    dy.h_n = dy_hn ? &*dy_hn : nullptr;
    dy.c_n = dy_cn ? &*dy_cn : nullptr;
    ops::RecurrentGradInputs gi;
    gi.x = &dx, gi.h0 = h0 ? &dh0 : nullptr, gi.c0 = c0 ? &dc0 : nullptr;
    model.backward(in, r, dy, gi);
    io::Value grad = io::Value::bundle();
    grad.set("input", to_wire(drop_n(std::move(dx), 0)));
    if (h0) grad.set("h0", drop_n(std::move(dh0), 1));
    if (c0) grad.set("c0", drop_n(std::move(dc0), 1));
    const io::Value weights = model.grad_bundle(req.layout);  // (kept alive for the loop)
    for (const auto& [name, v] : weights.members()) grad.set(name, v);
    out.set("grad", std::move(grad));
  }
  return out;
}

}  // namespace attnkit::app
