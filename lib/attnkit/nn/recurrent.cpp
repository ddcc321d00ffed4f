// Recurrent layers: weight loading (two layouts), packing, and the sequence runner.
// Legend: N batch, T steps, D input size, H hidden size, L layers, G gates, dirs 1 or 2.
// GCC 12 reports false "may be used uninitialized" inside Eigen's AVX-512 packet code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "attnkit/nn/recurrent.hpp"

#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/large_buffer.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

using ops::CellKind;
using ops::gate_count;

const char* layout_name(WeightLayout layout) { return layout == WeightLayout::Torch ? "torch" : "cs231n"; }

namespace {

// cs231n column block of each PyTorch gate: LSTM torch i, f, g, o -> cs231n i, f, o, g.
int cs231n_gate(CellKind cell, int torch_gate) {
  static const int lstm[4] = {0, 1, 3, 2};
  return cell == CellKind::Lstm ? lstm[torch_gate] : torch_gate;
}

std::string gates_str(int G) { return G == 1 ? "H" : fmt::format("{}*H", G); }

struct Expect {
  Shape shape;
  std::string legend;  // "(4*H, D)"
};

// The tensor `name` in `bundle`; nullptr when absent. A member that is there but is not a
// tensor is refused with the reason (not reported as missing).
const Tensor* find_weight(const io::Value& bundle, const std::string& name) {
  const io::Value* v = bundle.find(name);
  if (!v) return nullptr;
  if (v->is_bundle()) fail("weights: {} is a bundle, not a tensor", name);
  AK_CHECK(v->is_tensor(), "weights: {} is not a tensor: {}", name, v->why());
  return &v->tensor();
}

void check_shape(const Tensor& t, const std::string& name, const Expect& e, int64_t H) {
  AK_CHECK(t.shape() == e.shape, "{} has shape {}, expected {} {} for hidden size {}", name, t.shape_str(),
           shape_str(e.shape), e.legend, H);
}

std::string known_names(const io::Value& bundle) {
  std::string s;
  for (const auto& n : bundle.names()) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

// "weight_ih_l3_reverse" -> kind "weight_ih", layer 3, reverse; false if not of that form.
bool parse_name(const std::string& name, const std::vector<std::string>& kinds, bool layer0_bare, std::string& kind,
                int& layer, bool& reverse) {
  for (const auto& k : kinds) {
    if (name.compare(0, k.size(), k) != 0) continue;
    std::string rest = name.substr(k.size());
    reverse = false;
    const std::string rev = "_reverse";
    if (rest.size() >= rev.size() && rest.compare(rest.size() - rev.size(), rev.size(), rev) == 0) {
      reverse = true;
      rest.resize(rest.size() - rev.size());
    }
    if (rest.empty()) {
      if (!layer0_bare) continue;
      kind = k, layer = 0;
      return true;
    }
    if (rest.size() < 3 || rest.compare(0, 2, "_l") != 0) continue;
    std::string digits = rest.substr(2);
    if (digits.empty() || digits.size() > 4 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    if (digits.size() > 1 && digits[0] == '0') continue;
    layer = std::stoi(digits);
    if (layer == 0 && layer0_bare) continue;  // cs231n's first layer has no suffix
    kind = k;
    return true;
  }
  return false;
}

// Layers and directions from the names present; refuses tensors that are not weights.
void scan_names(const io::Value& bundle, const std::vector<std::string>& kinds, bool layer0_bare,
                const std::string& layout_help, int& layers, bool& bidirectional) {
  if (!bundle.is_bundle() && !bundle.is_tensor())  // a duplicate key, a string, ...
    fail("weights: expected a bundle of named tensors ({}), got something else: {}", layout_help, bundle.why());
  AK_CHECK(bundle.is_bundle(), "weights: expected a bundle of named tensors ({}), got a single tensor",
           layout_help);
  layers = 0;
  bidirectional = false;
  for (const auto& [name, value] : bundle.members()) {
    if (!value.is_tensor()) continue;  // metadata such as {"cell": "lstm"}
    std::string kind;
    int layer = 0;
    bool reverse = false;
    AK_CHECK(parse_name(name, kinds, layer0_bare, kind, layer, reverse),
             "weights: unexpected member \"{}\" (the {} layout names its weights {})", name,
             layer0_bare ? "cs231n" : "torch", layout_help);
    layers = std::max(layers, layer + 1);
    bidirectional = bidirectional || reverse;
  }
}

Tensor zeros_like_bias(int64_t n) { return Tensor({n}); }

}  // namespace

Recurrent::Recurrent(RecurrentConfig config, std::vector<DirectionWeights> weights)
    : config_(config), weights_(std::move(weights)), pack_cache_(std::make_shared<PackCache>()) {
  const int G = gate_count(config_.cell), dirs = config_.directions();
  const int64_t H = config_.hidden_size;
  AK_CHECK(H > 0 && config_.input_size > 0 && config_.layers > 0, "recurrent: sizes must be positive (D {}, H {}, L {})",
           config_.input_size, H, config_.layers);
  AK_CHECK(weights_.size() == size_t(config_.layers * dirs), "recurrent: {} weight sets for {} layers x {} directions",
           weights_.size(), config_.layers, dirs);
  // Convert once into the internal layout: transposed, blocked columns, folded biases.
  for (size_t i = 0; i < weights_.size(); ++i) {
    const DirectionWeights& w = weights_[i];
    const int64_t Din = w.w_ih.dim(1);
    Packed p{Tensor({Din, G * H}), Tensor({H, G * H}), Tensor({G * H}), Tensor({H})};
    for (int g = 0; g < G; ++g) {
      for (int64_t u = 0; u < H; ++u) {
        const int64_t col = ops::blocked_column(u, g, H, G), row = g * H + u;
        for (int64_t d = 0; d < Din; ++d) p.wx[d * G * H + col] = w.w_ih[row * Din + d];
        for (int64_t k = 0; k < H; ++k) p.wh[k * G * H + col] = w.w_hh[row * H + k];
        const bool hn = config_.cell == CellKind::Gru && g == 2;  // b_hn stays inside r ⊙ (W_hn h + b_hn)
        p.bias[col] = w.b_ih[row] + (hn ? 0.0f : w.b_hh[row]);
        if (hn) p.b_hn[u] = w.b_hh[row];
      }
    }
    packed_.push_back(std::move(p));
  }
}

Recurrent Recurrent::from_bundle(const io::Value& bundle, CellKind cell, WeightLayout layout) {
  const int G = gate_count(cell);
  const std::string gh = gates_str(G);
  RecurrentConfig config;
  config.cell = cell;
  std::vector<DirectionWeights> weights;
  auto suffix = [](int k, bool rev, bool bare0) {
    return (k == 0 && bare0 ? std::string() : fmt::format("_l{}", k)) + (rev ? "_reverse" : "");
  };
  // Layer k reads D (k = 0) or the layer below, dirs*H: its size and its name in messages.
  auto layer_input = [&](int k) -> std::pair<int64_t, std::string> {
    if (k == 0) return {config.input_size, "D"};
    return {config.directions() * config.hidden_size, config.bidirectional ? "2*H" : "H"};
  };
  auto require = [&](const std::string& name, const Expect& e) -> const Tensor& {
    const Tensor* t = find_weight(bundle, name);
    AK_CHECK(t, "missing weight {} (expected shape {} {}); the weights hold: {}", name, shape_str(e.shape), e.legend,
             known_names(bundle));
    check_shape(*t, name, e, config.hidden_size);
    return *t;
  };

  if (layout == WeightLayout::Torch) {
    scan_names(bundle, {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}, false,
               "weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} (+ _reverse)", config.layers,
               config.bidirectional);
    const Tensor* whh0 = find_weight(bundle, "weight_hh_l0");
    const Tensor* wih0 = find_weight(bundle, "weight_ih_l0");
    AK_CHECK(whh0 && wih0, "missing weight {} (a torch-layout {} needs weight_ih_l0 [{}, D] and weight_hh_l0 [{}, H]); the weights hold: {}",
             whh0 ? "weight_ih_l0" : "weight_hh_l0", ops::cell_name(cell), gh, gh, known_names(bundle));
    AK_CHECK(whh0->rank() == 2 && whh0->dim(1) > 0, "weight_hh_l0 has shape {}, expected [{}, H] (a matrix)",
             whh0->shape_str(), gh);
    AK_CHECK(wih0->rank() == 2 && wih0->dim(1) > 0, "weight_ih_l0 has shape {}, expected [{}, D] (a matrix)",
             wih0->shape_str(), gh);
    config.hidden_size = whh0->dim(1);
    config.input_size = wih0->dim(1);
    const int64_t H = config.hidden_size;
    if (whh0->dim(0) != G * H) {
      std::string hint;
      for (CellKind other : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh})
        if (whh0->dim(0) == gate_count(other) * H && gate_count(other) != G)
          hint = fmt::format(" (its {} rows fit --cell {})", whh0->dim(0), ops::cell_name(other));
      fail("weight_hh_l0 has shape {}, expected {} ({}, H) for hidden size {}: a {} has {} gate{}{}", whh0->shape_str(),
           shape_str({G * H, H}), gh, H, ops::cell_name(cell), G, G > 1 ? "s" : "", hint);
    }
    bool has_bias = false;
    for (const auto& n : bundle.names()) has_bias = has_bias || n.rfind("bias_", 0) == 0;
    const int dirs = config.directions();
    for (int k = 0; k < config.layers; ++k) {
      for (int d = 0; d < dirs; ++d) {
        const std::string sfx = suffix(k, d == 1, false);
        const auto [Din, din] = layer_input(k);
        DirectionWeights w;
        w.w_ih = require("weight_ih" + sfx, {{G * H, Din}, fmt::format("({}, {})", gh, din)});
        w.w_hh = require("weight_hh" + sfx, {{G * H, H}, fmt::format("({}, H)", gh)});
        if (has_bias) {
          w.b_ih = require("bias_ih" + sfx, {{G * H}, fmt::format("({})", gh)});
          w.b_hh = require("bias_hh" + sfx, {{G * H}, fmt::format("({})", gh)});
        } else {
          w.b_ih = zeros_like_bias(G * H);
          w.b_hh = zeros_like_bias(G * H);
        }
        weights.push_back(std::move(w));
      }
    }
  } else {
    AK_CHECK(cell != CellKind::Gru,
             "the cs231n layout covers rnn, rnn-relu and lstm (the documents have no GRU); use the torch layout");
    scan_names(bundle, {"Wx", "Wh", "b"}, true, "Wx, Wh, b (layer 0), Wx_l{k}, Wh_l{k}, b_l{k} (+ _reverse)",
               config.layers, config.bidirectional);
    const Tensor* wh0 = find_weight(bundle, "Wh");
    const Tensor* wx0 = find_weight(bundle, "Wx");
    AK_CHECK(wh0 && wx0, "missing weight {} (a cs231n-layout {} needs Wx [D, {}] and Wh [H, {}]); the weights hold: {}",
             wx0 ? "Wh" : "Wx", ops::cell_name(cell), gh, gh, known_names(bundle));
    AK_CHECK(wh0->rank() == 2 && wh0->dim(0) > 0, "Wh has shape {}, expected [H, {}] (a matrix)", wh0->shape_str(), gh);
    AK_CHECK(wx0->rank() == 2 && wx0->dim(0) > 0, "Wx has shape {}, expected [D, {}] (a matrix)", wx0->shape_str(), gh);
    config.hidden_size = wh0->dim(0);
    config.input_size = wx0->dim(0);
    const int64_t H = config.hidden_size;
    if (wh0->dim(1) != G * H) {
      std::string hint;
      if (wh0->dim(1) == H && G == 4) hint = " (it fits --cell rnn)";
      if (wh0->dim(1) == 4 * H && G == 1) hint = " (it fits --cell lstm)";
      fail("Wh has shape {}, expected {} (H, {}) for hidden size {}: a {} has {} gate{}{}", wh0->shape_str(),
           shape_str({H, G * H}), gh, H, ops::cell_name(cell), G, G > 1 ? "s" : "", hint);
    }
    bool has_bias = false;
    for (const auto& n : bundle.names()) has_bias = has_bias || n == "b" || n.rfind("b_", 0) == 0;
    const int dirs = config.directions();
    for (int k = 0; k < config.layers; ++k) {
      for (int d = 0; d < dirs; ++d) {
        const std::string sfx = suffix(k, d == 1, true);
        const auto [Din, din] = layer_input(k);
        const Tensor& wx = require("Wx" + sfx, {{Din, G * H}, fmt::format("({}, {})", din, gh)});
        const Tensor& wh = require("Wh" + sfx, {{H, G * H}, fmt::format("(H, {})", gh)});
        Tensor b = has_bias ? require("b" + sfx, {{G * H}, fmt::format("({})", gh)}) : zeros_like_bias(G * H);
        DirectionWeights w{Tensor({G * H, Din}), Tensor({G * H, H}), Tensor({G * H}), Tensor({G * H})};
        for (int g = 0; g < G; ++g) {
          const int gc = cs231n_gate(cell, g);
          for (int64_t u = 0; u < H; ++u) {
            for (int64_t i = 0; i < Din; ++i) w.w_ih[(g * H + u) * Din + i] = wx[i * G * H + gc * H + u];
            for (int64_t i = 0; i < H; ++i) w.w_hh[(g * H + u) * H + i] = wh[i * G * H + gc * H + u];
            w.b_ih[g * H + u] = b[gc * H + u];
          }
        }
        weights.push_back(std::move(w));
      }
    }
  }
  return Recurrent(config, std::move(weights));
}

Recurrent Recurrent::random(const RecurrentConfig& config, Rng& rng) {
  const int G = gate_count(config.cell), dirs = config.directions();
  const int64_t H = config.hidden_size;
  AK_CHECK(H > 0 && config.input_size > 0 && config.layers > 0, "recurrent: sizes must be positive (D {}, H {}, L {})",
           config.input_size, H, config.layers);
  const float k = 1.0f / std::sqrt(static_cast<float>(H));
  std::vector<DirectionWeights> weights;
  for (int l = 0; l < config.layers; ++l) {
    for (int d = 0; d < dirs; ++d) {
      const int64_t Din = l == 0 ? config.input_size : dirs * H;
      DirectionWeights w;
      w.w_ih = rand_uniform({G * H, Din}, rng, -k, k);
      w.w_hh = rand_uniform({G * H, H}, rng, -k, k);
      w.b_ih = rand_uniform({G * H}, rng, -k, k);
      w.b_hh = rand_uniform({G * H}, rng, -k, k);
      weights.push_back(std::move(w));
    }
  }
  return Recurrent(config, std::move(weights));
}

io::Value Recurrent::to_bundle(WeightLayout layout) const {
  const int G = gate_count(config_.cell), dirs = config_.directions();
  const int64_t H = config_.hidden_size;
  io::Value b = io::Value::bundle();
  for (int k = 0; k < config_.layers; ++k) {
    for (int d = 0; d < dirs; ++d) {
      const DirectionWeights& w = weights_[k * dirs + d];
      if (layout == WeightLayout::Torch) {
        const std::string sfx = fmt::format("_l{}{}", k, d ? "_reverse" : "");
        b.set("weight_ih" + sfx, w.w_ih);
        b.set("weight_hh" + sfx, w.w_hh);
        b.set("bias_ih" + sfx, w.b_ih);
        b.set("bias_hh" + sfx, w.b_hh);
        continue;
      }
      AK_CHECK(config_.cell != CellKind::Gru, "the cs231n layout has no GRU (GRU's b_hn cannot fold into b)");
      const std::string sfx = (k == 0 ? std::string() : fmt::format("_l{}", k)) + (d ? "_reverse" : "");
      const int64_t Din = w.w_ih.dim(1);
      Tensor wx({Din, G * H}), wh({H, G * H}), bias({G * H});
      for (int g = 0; g < G; ++g) {
        const int gc = cs231n_gate(config_.cell, g);
        for (int64_t u = 0; u < H; ++u) {
          for (int64_t i = 0; i < Din; ++i) wx[i * G * H + gc * H + u] = w.w_ih[(g * H + u) * Din + i];
          for (int64_t i = 0; i < H; ++i) wh[i * G * H + gc * H + u] = w.w_hh[(g * H + u) * H + i];
          bias[gc * H + u] = w.b_ih[g * H + u] + w.b_hh[g * H + u];
        }
      }
      b.set("Wx" + sfx, wx);
      b.set("Wh" + sfx, wh);
      b.set("b" + sfx, bias);
    }
  }
  return b;
}

// ---- the sequence runner ----

namespace {

// One layer and direction over the whole batch.
struct DirectionJob {
  const Recurrent::Packed* packed = nullptr;
  CellKind cell = CellKind::Lstm;
  int64_t N = 0, T = 0, Din = 0, H = 0;
  bool reverse = false;
  const float* x = nullptr;  // [N, T, Din]
  const int64_t* lengths = nullptr;
  const float* h0 = nullptr;  // [N, H] or nullptr
  const float* c0 = nullptr;
  float* out = nullptr;  // column dir*H of [N, T, dirs*H]
  int64_t out_width = 0;  // dirs*H
  float* h_n = nullptr;  // [N, H]
  float* c_n = nullptr;
  ops::RecurrentCache* cache = nullptr;
  bool keep_pre = false;
};

// Threads worth using for a time loop of N x H x G*H multiply-adds a step.
int team_size(int threads, int64_t N, int64_t H, int G, int64_t min_macs) {
  const int64_t work = N * H * G * H;
  const int64_t blocks = (H + ops::kUnitBlock - 1) / ops::kUnitBlock;
  int64_t useful = std::max<int64_t>(1, work / std::max<int64_t>(1, min_macs));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({threads, useful, blocks})));
}

// The barrier between time steps: StepBarrier (tensor/barrier.hpp) spins briefly (the threads'
// halves of a step are even, so on an idle machine the other arrives within microseconds), then sleeps.

// LargeBuffer (tensor/large_buffer.hpp): the [N*T, G*H] pre-activations of a big layer are tens of
// MB; on transparent huge pages they fault in 2 MB at a time.


// h_prev W_hh^T for a run of columns, with W_hh's columns packed once for Eigen's GEMM micro-kernel
// (gebp) instead of once per step: only h_prev (small) is packed each step, and the product is
// added in place into the pre-activations, so the time loop allocates and copies nothing else.
// In gebp's column-major view: C^T [nc, N] += A [nc, H] (W_hh^T rows c0..) x B [H, N] (h_prev^T).
// Immutable once built: kept by the model (PackCache) and shared by concurrent forward calls.
class PackedColumns {
 public:
  using Traits = Eigen::internal::gebp_traits<float, float>;
  using Mapper = Eigen::internal::const_blas_data_mapper<float, Eigen::Index, Eigen::ColMajor>;
  using ResMapper = Eigen::internal::blas_data_mapper<float, Eigen::Index, Eigen::ColMajor, Eigen::Unaligned, 1>;

  // wh [H, GH] row-major; the columns [c0, c0 + nc).
  PackedColumns(const float* wh, int64_t H, int64_t GH, int64_t c0, int64_t nc)
      : H_(H), nc_(nc), c0_(c0), a_(size_t(std::max<int64_t>(1, H * nc))) {
    Eigen::internal::gemm_pack_lhs<float, Eigen::Index, Mapper, Traits::mr, Traits::LhsProgress,
                                   Traits::LhsPacket4Packing, Eigen::ColMajor>
        pack;
    for (int64_t k0 = 0; k0 < H && nc > 0; k0 += kDepth)
      pack(a_.data() + k0 * nc, Mapper(wh + c0 + k0 * GH, GH), std::min(kDepth, H - k0), nc);
  }
  // res[n * ld + c0 + j] += sum_k h[n * H + k] * wh[k, c0 + j] for n < N; `scratch` holds H*N floats
  // (64-byte aligned) for the packed h.
  void multiply_add(const float* h, int64_t N, float* scratch, float* res, int64_t ld) const {
    Eigen::internal::gemm_pack_rhs<float, Eigen::Index, Mapper, Traits::nr, Eigen::ColMajor> pack;
    Eigen::internal::gebp_kernel<float, float, Eigen::Index, ResMapper, Traits::mr, Traits::nr, false, false> gebp;
    for (int64_t k0 = 0; k0 < H_; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, H_ - k0);
      pack(scratch + k0 * N, Mapper(h + k0, H_), kc, N);
      gebp(ResMapper(res + c0_, ld), a_.data() + k0 * nc_, scratch + k0 * N, nc_, kc, N, 1.0f);
    }
  }

 private:
  static constexpr int64_t kDepth = 256;  // depth block: a 48 x 256 panel of W is 48 KB (L1)
  int64_t H_, nc_, c0_;
  std::vector<float, Eigen::aligned_allocator<float>> a_;  // packed W_hh^T
};

// C [rows, cols] = A [rows, depth] x B [depth, cols], all row-major and contiguous, computed by
// Eigen's blocked GEMM on the calling thread only, whatever Eigen's global thread count says.
void gemm_on_this_thread(const float* A, const float* B, float* C, int64_t rows, int64_t depth, int64_t cols) {
  using namespace Eigen::internal;
  as_matrix(C, rows, cols).setZero();
  if (rows == 0 || cols == 0 || depth == 0) return;
  gemm_blocking_space<Eigen::RowMajor, float, float, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic> blocking(
      rows, cols, depth, 1, true);
  general_matrix_matrix_product<Eigen::Index, float, Eigen::RowMajor, false, float, Eigen::RowMajor, false,
                                Eigen::RowMajor, 1>::run(rows, cols, depth, A, depth, B, cols, C, 1, cols, 1.0f,
                                                         blocking, nullptr);
}

// A team's split of the hidden units: part c = units [u0, u1) and their packed columns.
struct TeamParts {
  std::vector<std::pair<int64_t, int64_t>> units;
  std::vector<PackedColumns> columns;
};

TeamParts make_parts(const Recurrent::Packed& p, int64_t H, int G, int team) {
  const int64_t blocks = (H + ops::kUnitBlock - 1) / ops::kUnitBlock;
  TeamParts parts;
  for (int c = 0; c < team; ++c) {
    const int64_t u0 = blocks * c / team * ops::kUnitBlock, u1 = std::min(H, blocks * (c + 1) / team * ops::kUnitBlock);
    parts.units.emplace_back(u0, u1);
    parts.columns.emplace_back(p.wh.data(), H, G * H, G * u0, G * (u1 - u0));
  }
  return parts;
}

}  // namespace

// The packed W_hh of every layer and direction, per team size, built on first use and kept.
struct PackCache {
  const TeamParts& parts(int index, int team, const Recurrent::Packed& p, int64_t H, CellKind cell) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = built.find({index, team});
    if (it == built.end()) it = built.emplace(std::make_pair(index, team), make_parts(p, H, gate_count(cell), team)).first;
    return it->second;
  }
  std::mutex mutex;
  std::map<std::pair<int, int>, TeamParts> built;  // (layer*dirs + dir, team) -> parts
};

namespace {

// A float scratch buffer (64-byte aligned, uninitialised): up to 4 MB it is this thread's buffer
// for `slot`, kept from call to call (the latency case would otherwise map and fault fresh pages
// every call); larger ones come and go (LargeBuffer, huge pages).
class Scratch {
 public:
  Scratch(size_t floats, int slot) {
    if (floats > kSmall) {
      large_.emplace(static_cast<int64_t>(floats));
      data_ = large_->data();
      return;
    }
    thread_local std::vector<float, Eigen::aligned_allocator<float>> kept[2];
    if (kept[slot].size() < floats) kept[slot].resize(floats);
    data_ = kept[slot].data();
  }
  float* data() { return data_; }

 private:
  static constexpr size_t kSmall = size_t(1) << 20;  // floats (4 MB)
  std::optional<LargeBuffer> large_;
  float* data_ = nullptr;
};

void run_direction(const DirectionJob& job, const TeamParts& parts) {
  const int G = gate_count(job.cell);
  const int64_t N = job.N, T = job.T, H = job.H, GH = G * H;
  const Recurrent::Packed& p = *job.packed;
  const bool gru = job.cell == CellKind::Gru;

  // Input projection for every step at once: one GEMM, hoisted out of the time loop. For LSTM and
  // RNN the hidden products are then added into it in place (GRU keeps them apart: r ⊙ (W_hn h)).
  const int team = static_cast<int>(parts.units.size());
  Scratch xproj_buf(size_t(N * T * GH), 0);
  MapRM xproj(xproj_buf.data(), N * T, GH);  // [N*T, G*H] row n*T + t, blocked columns
  // packed h_prev for each part: H*N floats each, 64-byte aligned (16 floats)
  const int64_t hpack = (H * N + 15) / 16 * 16;
  Scratch hpacked_buf(size_t(hpack * team), 1);
  float* hpacked = hpacked_buf.data();
  {
    // The team's threads take runs of rows, each running Eigen's blocked GEMM on its own (no global
    // Eigen setting is read or touched). A small GEMM stays on one thread: forking costs more than
    // it saves (and far more when the cores are shared with other work).
    const int64_t rows = N * T, Din = job.Din;
    const int gemm_team = rows * Din * GH < (int64_t(1) << 25) ? 1 : static_cast<int>(std::min<int64_t>(team, rows));
    if (gemm_team <= 1) {
      gemm_on_this_thread(job.x, p.wx.data(), xproj.data(), rows, Din, GH);
    } else {
#pragma omp parallel num_threads(gemm_team)
      {
        const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t r0 = rows * id / nt, r1 = rows * (id + 1) / nt;
        gemm_on_this_thread(job.x + r0 * Din, p.wx.data(), xproj.data() + r0 * GH, r1 - r0, Din, GH);
      }
    }
  }

  MatrixRM hproj(gru ? N : 0, GH);          // GRU: [N, G*H] W_hh h_prev, blocked columns
  MatrixRM hbuf(2 * N, H), cbuf(2 * N, H);  // double-buffered state [N, H] x 2
  MatrixRM init = MatrixRM::Zero(2 * N, H);  // h0; c0 (rows N..2N)
  if (job.h0) init.topRows(N) = as_matrix(job.h0, N, H);
  if (job.c0) init.bottomRows(N) = as_matrix(job.c0, N, H);

  ops::RecurrentCache* cache = job.cache;
  if (cache) {
    if (job.cell != CellKind::RnnTanh && job.cell != CellKind::RnnRelu) cache->gates = Tensor({T, N, GH});
    if (job.keep_pre) cache->pre = Tensor({T, N, GH});
    if (job.cell == CellKind::Lstm) cache->c = Tensor({T, N, H}), cache->tanh_c = Tensor({T, N, H});
    if (gru) cache->hn = Tensor({T, N, H});
    cache->h = Tensor({T, N, H});
  }
  // State after step i (i = -1: the initial state). With a cache, the states live in it.
  auto time_of = [&](int64_t i) { return job.reverse ? T - 1 - i : i; };
  auto h_at = [&](int64_t i) -> float* {
    if (i < 0) return init.data();
    return cache ? cache->h.data() + time_of(i) * N * H : hbuf.data() + (i & 1) * N * H;
  };
  auto c_at = [&](int64_t i) -> float* {
    if (i < 0) return init.data() + N * H;
    return cache && job.cell == CellKind::Lstm ? cache->c.data() + time_of(i) * N * H : cbuf.data() + (i & 1) * N * H;
  };

  // Step i for the units [u0, u1): h_prev times their columns of W_hh, then the cell on them.
  // Lengths sorted longest first (PyTorch's enforce_sorted order): the rows still running at step
  // t are a prefix, and the hidden product skips the finished ones (the cell carries their state).
  const bool sorted = job.lengths && std::is_sorted(job.lengths, job.lengths + N, std::greater<int64_t>());
  auto running = [&](int64_t t) {
    if (!sorted) return N;
    return static_cast<int64_t>(std::partition_point(job.lengths, job.lengths + N, [&](int64_t l) { return l > t; }) -
                                job.lengths);
  };
  auto step = [&](int c, int64_t i) {
    const int64_t t = time_of(i);
    const auto [u0, u1] = parts.units[c];
    if (u0 >= u1) return;
    const PackedColumns& wh = parts.columns[c];
    float* scratch = hpacked + c * hpack;
    const int64_t rows = running(t);
    if (gru) {
      hproj.middleCols(G * u0, G * (u1 - u0)).setZero();
      wh.multiply_add(h_at(i - 1), rows, scratch, hproj.data(), GH);
    } else {
      wh.multiply_add(h_at(i - 1), rows, scratch, xproj.data() + t * GH, T * GH);  // rows n*T + t
    }
    ops::CellStep s;
    s.cell = job.cell;
    s.rows = N, s.hidden = H, s.unit_begin = u0, s.unit_end = u1;
    s.lengths = job.lengths, s.t = t;
    s.xproj = xproj.data() + t * GH, s.xproj_stride = T * GH;
    if (gru) s.hproj = hproj.data(), s.hproj_stride = GH;
    s.bias = p.bias.data();
    s.b_hn = p.b_hn.data();
    s.h_prev = h_at(i - 1), s.h_prev_stride = H;
    s.h = h_at(i), s.h_stride = H;
    if (job.cell == CellKind::Lstm) {
      s.c_prev = c_at(i - 1), s.c_prev_stride = H;
      s.c = c_at(i), s.c_stride = H;
    }
    s.out = job.out + t * job.out_width, s.out_stride = T * job.out_width;
    if (cache) {
      if (!cache->gates.empty()) s.gates = cache->gates.data() + t * N * GH, s.gates_stride = GH;
      if (!cache->pre.empty()) s.pre = cache->pre.data() + t * N * GH, s.pre_stride = GH;
      if (!cache->tanh_c.empty()) s.tanh_c = cache->tanh_c.data() + t * N * H, s.tanh_c_stride = H;
      if (!cache->hn.empty()) s.hn = cache->hn.data() + t * N * H, s.hn_stride = H;
    }
    ops::cell_forward(s);
  };

  if (team <= 1) {
    for (int64_t i = 0; i < T; ++i) step(0, i);
  } else {
    // One parallel region for the whole loop; part c (a run of unit blocks) belongs to thread c, its
    // packed columns of W_hh stay in that thread's cache, and the steps meet at one barrier each.
    // Nothing is allocated inside the region (nothing may throw there).
    StepBarrier barrier(team);
#pragma omp parallel num_threads(team)
    {
      const int id = omp_get_thread_num(), nt = omp_get_num_threads();  // OpenMP may give fewer
#pragma omp single
      barrier.resize(nt);
      for (int64_t i = 0; i < T; ++i) {
        for (int c = id; c < team; c += nt) step(c, i);
        barrier.wait();
      }
    }
  }
  const float* hl = h_at(T - 1);
  std::memcpy(job.h_n, hl, sizeof(float) * N * H);
  if (job.c_n) std::memcpy(job.c_n, c_at(T - 1), sizeof(float) * N * H);
}

}  // namespace

RecurrentResult Recurrent::forward(const RecurrentInputs& in, const RunOptions& options) const {
  const int dirs = config_.directions(), L = config_.layers;
  const int64_t H = config_.hidden_size, D = config_.input_size;
  AK_CHECK(in.x, "recurrent: no input");
  const Tensor& x = *in.x;
  AK_CHECK(x.rank() == 3 && x.dim(2) == D, "input has shape {}, expected [N, T, {}] (the weights' input size D is {})",
           x.shape_str(), D, D);
  const int64_t N = x.dim(0), T = x.dim(1);
  const Shape state_shape{L * dirs, N, H};
  auto check_state = [&](const Tensor* t, const char* name) {
    AK_CHECK(!t || t->shape() == state_shape, "{} has shape {}, expected {} (layers*dirs, N, H)", name,
             t ? t->shape_str() : "", shape_str(state_shape));
  };
  check_state(in.h0, "h0");
  AK_CHECK(!in.c0 || config_.cell == CellKind::Lstm, "c0 is given, but a {} has no cell state (c0 is for lstm)",
           ops::cell_name(config_.cell));
  check_state(in.c0, "c0");
  if (in.lengths) {
    AK_CHECK(int64_t(in.lengths->size()) == N, "lengths has {} values, expected {} (one per sequence)",
             in.lengths->size(), N);
    for (size_t n = 0; n < in.lengths->size(); ++n)
      AK_CHECK((*in.lengths)[n] >= 0 && (*in.lengths)[n] <= T, "lengths[{}] is {}, expected 0 <= length <= T = {}",
               n, (*in.lengths)[n], T);
  }

  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  RecurrentResult r;
  r.h_n = Tensor(state_shape);
  if (config_.cell == CellKind::Lstm) r.c_n = Tensor(state_shape);
  if (options.keep_cache) r.caches.resize(L * dirs);
  else if (options.trace) r.caches.resize(dirs);

  Tensor layer_in, layer_out;
  for (int k = 0; k < L; ++k) {
    const Tensor& input = k == 0 ? x : layer_in;
    layer_out = Tensor({N, T, dirs * H});
    std::vector<DirectionJob> jobs(dirs);
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      DirectionJob& j = jobs[d];
      j.packed = &packed_[idx];
      j.cell = config_.cell;
      j.N = N, j.T = T, j.Din = input.dim(2), j.H = H;
      j.reverse = d == 1;
      j.x = input.data();
      j.lengths = in.lengths ? in.lengths->data() : nullptr;
      j.h0 = in.h0 ? in.h0->data() + idx * N * H : nullptr;
      j.c0 = in.c0 ? in.c0->data() + idx * N * H : nullptr;
      j.out = layer_out.data() + d * H, j.out_width = dirs * H;
      j.h_n = r.h_n.data() + idx * N * H;
      j.c_n = config_.cell == CellKind::Lstm ? r.c_n.data() + idx * N * H : nullptr;
      if (options.keep_cache) j.cache = &r.caches[idx];
      else if (options.trace && k == 0) j.cache = &r.caches[d];
      j.keep_pre = options.trace && k == 0;
    }
    // The two directions are independent: with 2 threads, one each and no barrier at all.
    const bool side_by_side = dirs == 2 && threads >= 2;
    const int team = side_by_side ? 1 : team_size(threads, N, H, ops::gate_count(config_.cell), options.min_macs_per_thread);
    std::vector<const TeamParts*> parts(dirs);
    for (int d = 0; d < dirs; ++d) parts[d] = &pack_cache_->parts(k * dirs + d, team, packed_[k * dirs + d], H, config_.cell);
    if (side_by_side) {
      std::exception_ptr failed[2];  // an exception must not leave an OpenMP region
#pragma omp parallel for num_threads(2) schedule(static, 1)
      for (int d = 0; d < 2; ++d) {
        try {
          run_direction(jobs[d], *parts[d]);
        } catch (...) {
          failed[d] = std::current_exception();
        }
      }
      for (auto& e : failed)
        if (e) std::rethrow_exception(e);
    } else {
      for (int d = 0; d < dirs; ++d) run_direction(jobs[d], *parts[d]);
    }
    layer_in = std::move(layer_out);
  }
  r.output = std::move(layer_in);
  return r;
}

io::Value trace_bundle(const ops::RecurrentCache& cache, CellKind cell, WeightLayout layout,
                       const std::vector<int64_t>* lengths) {
  const int G = gate_count(cell);
  const int64_t T = cache.h.dim(0), N = cache.h.dim(1), H = cache.h.dim(2);
  // [T, N, W] time-major -> [N, T, W] batch-first, taking W columns from `from` starting at col0
  auto batch_first = [&](const Tensor& src, int64_t col0, int64_t width) {
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
          std::memcpy(re.data() + row * G * H + cs231n_gate(cell, g) * H, a.data() + row * G * H + g * H,
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

std::vector<int64_t> lengths_from_tensor(const Tensor& t, int64_t batch, int64_t steps, const std::string& what) {
  AK_CHECK(t.rank() <= 1 && t.numel() == batch, "{} has shape {}, expected [{}] (one length per sequence)", what,
           t.shape_str(), batch);
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t n = 0; n < batch; ++n) {
    const float v = t[n];
    AK_CHECK(std::isfinite(v) && v == std::floor(v), "{}[{}] is {}, expected a whole number", what, n, v);
    AK_CHECK(v >= 0 && v <= static_cast<float>(steps), "{}[{}] is {}, expected 0 <= length <= T = {}", what, n, v, steps);
    out[static_cast<size_t>(n)] = static_cast<int64_t>(v);
  }
  return out;
}

io::Value run_sequence(const Recurrent& model, const SequenceRequest& req) {
  const RecurrentConfig& cfg = model.config();
  const int64_t LD = cfg.layers * cfg.directions(), H = cfg.hidden_size, D = cfg.input_size;
  AK_CHECK(req.x.rank() == 3 || req.x.rank() == 2, "input has shape {}, expected [N, T, {}] or [T, {}] (D = {})",
           req.x.shape_str(), D, D, D);
  const bool unbatched = req.x.rank() == 2;
  AK_CHECK(req.x.dim(-1) == D, "input has shape {}, expected {} (the weights' input size D is {})", req.x.shape_str(),
           unbatched ? fmt::format("[T, {}]", D) : fmt::format("[N, T, {}]", D), D);
  const int64_t N = unbatched ? 1 : req.x.dim(0), T = req.x.dim(-2);
  Tensor x = unbatched ? req.x.reshaped({1, T, D}) : req.x;
  // States: [L*dirs, H] for a [T, D] input, [L*dirs, N, H] otherwise.
  std::optional<Tensor> h0, c0;
  auto state = [&](const Tensor* t, const char* name, std::optional<Tensor>& dst) {
    if (!t) return;
    const Shape want = unbatched ? Shape{LD, H} : Shape{LD, N, H};
    AK_CHECK(t->shape() == want, "{} has shape {}, expected {} ({}) for {} layer{} x {} direction{} and hidden size {}",
             name, t->shape_str(), shape_str(want), unbatched ? "layers*dirs, H" : "layers*dirs, N, H", cfg.layers,
             cfg.layers > 1 ? "s" : "", cfg.directions(), cfg.directions() > 1 ? "s" : "", H);
    dst = t->reshaped({LD, N, H});
  };
  state(req.h0, "h0", h0);
  AK_CHECK(!req.c0 || cfg.cell == CellKind::Lstm, "c0 is given, but a {} has no cell state (c0 is for lstm)",
           ops::cell_name(cfg.cell));
  state(req.c0, "c0", c0);
  std::vector<int64_t> lengths;
  if (req.lengths) lengths = lengths_from_tensor(*req.lengths, N, T, "lengths");

  RecurrentInputs in;
  in.x = &x;
  in.h0 = h0 ? &*h0 : nullptr;
  in.c0 = c0 ? &*c0 : nullptr;
  in.lengths = req.lengths ? &lengths : nullptr;
  RunOptions options;
  options.threads = req.threads;
  options.trace = req.trace;
  RecurrentResult r = model.forward(in, options);

  auto drop_n = [&](Tensor t, int axis) {  // remove the batch axis of a [T, D] run
    if (!unbatched) return t;
    Shape s = t.shape();
    s.erase(s.begin() + axis);
    return t.reshaped(s);
  };
  io::Value out = io::Value::bundle();
  out.set("output", drop_n(std::move(r.output), 0));
  out.set("h_n", drop_n(std::move(r.h_n), 1));
  if (cfg.cell == CellKind::Lstm) out.set("c_n", drop_n(std::move(r.c_n), 1));
  if (req.trace) {
    for (int d = 0; d < cfg.directions(); ++d) {
      io::Value tb = trace_bundle(r.caches[d], cfg.cell, req.layout, req.lengths ? &lengths : nullptr);
      io::Value shaped = io::Value::bundle();
      for (const auto& [name, v] : tb.members()) shaped.set(name, drop_n(v.tensor(), 0));
      out.set(d == 0 ? "trace" : "trace_reverse", std::move(shaped));
    }
  }
  return out;
}

}  // namespace attnkit::nn
