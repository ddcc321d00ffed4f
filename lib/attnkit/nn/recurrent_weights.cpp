// Recurrent layers: the weights in both layouts (torch state_dict, cs231n) and their checks. The runs
// (the derived layout, forward, backward) are recurrent.cpp.
// Legend: N batch, T steps, D input size, H hidden size, L layers, G gates, dirs 1 or 2.
#include "attnkit/nn/recurrent.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

using ops::CellKind;
using ops::gate_count;

const char* layout_name(WeightLayout layout) { return layout == WeightLayout::Torch ? "torch" : "cs231n"; }

int cs231n_gate(CellKind cell, int torch_gate) {
  static const int lstm[4] = {0, 1, 3, 2};  // LSTM torch i, f, g, o -> cs231n i, f, o, g
  return cell == CellKind::Lstm ? lstm[torch_gate] : torch_gate;
}

namespace {

std::string gates_str(int G) { return G == 1 ? "H" : fmt::format("{}*H", G); }

struct Expect {
  Shape shape;
  std::string legend;  // "(4*H, D)"
};

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

namespace {

// "_l1_reverse": the state_dict suffix of direction `index`.
std::string torch_suffix(int index, int dirs) {
  return fmt::format("_l{}{}", index / dirs, index % dirs ? "_reverse" : "");
}

}  // namespace

Recurrent::Recurrent(ops::RecurrentConfig config, std::vector<DirectionWeights> weights) : config_(config) {
  const int dirs = config_.directions();
  const int64_t H = config_.hidden_size;
  AK_CHECK(H > 0 && config_.input_size > 0 && config_.layers > 0, "recurrent: sizes must be positive (D {}, H {}, L {})",
           config_.input_size, H, config_.layers);
  AK_CHECK(weights.size() == size_t(config_.layers * dirs), "recurrent: {} weight sets for {} layers x {} directions",
           weights.size(), config_.layers, dirs);
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::string sfx = torch_suffix(int(i), dirs);
    DirectionWeights& w = weights[i];
    params_.push_back({Parameter("weight_ih" + sfx, std::move(w.w_ih)), Parameter("weight_hh" + sfx, std::move(w.w_hh)),
                       Parameter("bias_ih" + sfx, std::move(w.b_ih)), Parameter("bias_hh" + sfx, std::move(w.b_hh))});
  }
  check_parameters();
  packed_.resize(params_.size());
}

std::vector<Parameter*> Recurrent::named_parameters() {
  std::vector<Parameter*> out;
  for (DirectionParams& w : params_)
    for (Parameter* p : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh}) out.push_back(p);
  return out;
}

// Every parameter's shape: w_ih [G*H, D_k], w_hh [G*H, H], b_ih and b_hh [G*H] (also after a caller
// changed a value in place: checked again before each repack).
void Recurrent::check_parameters() const {
  const int G = gate_count(config_.cell), dirs = config_.directions();
  const int64_t H = config_.hidden_size, GH = G * H;
  const std::string gh = gates_str(G);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int k = int(i) / dirs;
    const int64_t Din = k == 0 ? config_.input_size : dirs * H;
    const std::string din = k == 0 ? "D" : dirs == 2 ? "2*H" : "H";
    const DirectionParams& w = params_[i];
    auto check = [&](const Parameter& p, const Shape& want, const std::string& legend) {
      AK_CHECK(p.value.shape() == want, "recurrent: {} has shape {}, expected {} {} for a {} with D {} and H {}", p.name,
               p.value.shape_str(), shape_str(want), legend, ops::cell_name(config_.cell), config_.input_size, H);
    };
    check(w.w_ih, {GH, Din}, fmt::format("({}, {})", gh, din));
    check(w.w_hh, {GH, H}, fmt::format("({}, H)", gh));
    check(w.b_ih, {GH}, fmt::format("({}) (a bias-free model passes zeros)", gh));
    check(w.b_hh, {GH}, fmt::format("({}) (a bias-free model passes zeros)", gh));
  }
}

Recurrent Recurrent::from_bundle(const io::Value& bundle, CellKind cell, WeightLayout layout) {
  const int G = gate_count(cell);
  const std::string gh = gates_str(G);
  ops::RecurrentConfig config;
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
    const Tensor* t = io::find_tensor(bundle, name, "weights");
    AK_CHECK(t, "missing weight {} (expected shape {} {}); the weights hold: {}", name, shape_str(e.shape), e.legend,
             known_names(bundle));
    check_shape(*t, name, e, config.hidden_size);
    return *t;
  };

  if (layout == WeightLayout::Torch) {
    scan_names(bundle, {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}, false,
               "weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} (+ _reverse)", config.layers,
               config.bidirectional);
    const Tensor* whh0 = io::find_tensor(bundle, "weight_hh_l0", "weights");
    const Tensor* wih0 = io::find_tensor(bundle, "weight_ih_l0", "weights");
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
    const Tensor* wh0 = io::find_tensor(bundle, "Wh", "weights");
    const Tensor* wx0 = io::find_tensor(bundle, "Wx", "weights");
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

namespace {

std::vector<DirectionWeights> zero_weights(const ops::RecurrentConfig& config) {
  const int G = gate_count(config.cell), dirs = config.directions();
  const int64_t H = config.hidden_size;
  AK_CHECK(H > 0 && config.input_size > 0 && config.layers > 0, "recurrent: sizes must be positive (D {}, H {}, L {})",
           config.input_size, H, config.layers);
  std::vector<DirectionWeights> weights;
  for (int l = 0; l < config.layers; ++l) {
    for (int d = 0; d < dirs; ++d) {
      const int64_t Din = l == 0 ? config.input_size : dirs * H;
      weights.push_back({Tensor({G * H, Din}), Tensor({G * H, H}), Tensor({G * H}), Tensor({G * H})});
    }
  }
  return weights;
}

}  // namespace

Recurrent::Recurrent(const ops::RecurrentConfig& config) : Recurrent(config, zero_weights(config)) {}

Recurrent Recurrent::random(const ops::RecurrentConfig& config, Rng& rng) {
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

io::Value Recurrent::to_bundle(WeightLayout layout) const { return layout_bundle(layout, false); }

io::Value Recurrent::grad_bundle(WeightLayout layout) const { return layout_bundle(layout, true); }

// The weights (or their gradients) in a layout. cs231n: Wx = W_ih^T and Wh = W_hh^T with the
// columns in cs231n gate order; b = b_ih + b_hh for values, and for gradients d b = d b_ih (the
// folded b enters every gate argument exactly as b_ih does).
io::Value Recurrent::layout_bundle(WeightLayout layout, bool grads) const {
  const int G = gate_count(config_.cell), dirs = config_.directions();
  const int64_t H = config_.hidden_size;
  auto of = [&](const Parameter& q) -> Tensor {
    if (!grads) return q.value;
    return q.grad.shape() == q.value.shape() ? q.grad : Tensor(q.value.shape());  // no backward yet: zeros
  };
  io::Value b = io::Value::bundle();
  for (int k = 0; k < config_.layers; ++k) {
    for (int d = 0; d < dirs; ++d) {
      const DirectionParams& p = params_[k * dirs + d];
      if (layout == WeightLayout::Torch) {
        for (const Parameter* q : {&p.w_ih, &p.w_hh, &p.b_ih, &p.b_hh}) b.set(q->name, of(*q));
        continue;
      }
      AK_CHECK(config_.cell != CellKind::Gru, "the cs231n layout has no GRU (GRU's b_hn cannot fold into b)");
      const Tensor w_ih = of(p.w_ih), w_hh = of(p.w_hh), b_ih = of(p.b_ih);
      const Tensor b_hh = grads ? Tensor(p.b_hh.value.shape()) : of(p.b_hh);
      const std::string sfx = (k == 0 ? std::string() : fmt::format("_l{}", k)) + (d ? "_reverse" : "");
      const int64_t Din = w_ih.dim(1);
      Tensor wx({Din, G * H}), wh({H, G * H}), bias({G * H});
      for (int g = 0; g < G; ++g) {
        const int gc = cs231n_gate(config_.cell, g);
        for (int64_t u = 0; u < H; ++u) {
          for (int64_t i = 0; i < Din; ++i) wx[i * G * H + gc * H + u] = w_ih[(g * H + u) * Din + i];
          for (int64_t i = 0; i < H; ++i) wh[i * G * H + gc * H + u] = w_hh[(g * H + u) * H + i];
          bias[gc * H + u] = b_ih[g * H + u] + b_hh[g * H + u];
        }
      }
      b.set("Wx" + sfx, wx);
      b.set("Wh" + sfx, wh);
      b.set("b" + sfx, bias);
    }
  }
  return b;
}

}  // namespace attnkit::nn
