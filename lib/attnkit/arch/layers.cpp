#include "attnkit/arch/layers.hpp"

#include <cmath>

#include "attnkit/autograd/attention.hpp"
#include "attnkit/autograd/conv1d.hpp"
#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/recurrent.hpp"

namespace attnkit::arch {

using autograd::Var;

namespace {

// Dilated causal convolutions d -> d, ReLU between them (none after the last).
class ConvLayers : public SequenceLayer {
 public:
  ConvLayers(const Sizes& s, int64_t depth, Rng& rng) {
    const float bound = 1.0f / std::sqrt(float(s.d * s.k));
    int64_t dilation = 1;
    for (int64_t l = 0; l < depth; ++l, dilation *= s.k) {
      weights_.push_back(Parameter{"conv" + std::to_string(l) + ".weight", rand_uniform({s.d, s.d, s.k}, rng, -bound, bound)});
      biases_.push_back(Parameter{"conv" + std::to_string(l) + ".bias", rand_uniform({s.d}, rng, -bound, bound)});
      options_.push_back({ops::ConvPadding::Causal, dilation});
    }
  }
  Var forward(const Var& x) override {
    Var h = x;
    for (size_t l = 0; l < weights_.size(); ++l) {
      h = autograd::conv1d(h, Var::param(weights_[l]), Var::param(biases_[l]), options_[l]);  // [B, n, d]
      if (l + 1 < weights_.size()) h = autograd::relu(h);
    }
    return h;
  }
  std::vector<Parameter*> parameters() override {
    std::vector<Parameter*> p;
    for (size_t l = 0; l < weights_.size(); ++l) p.insert(p.end(), {&weights_[l], &biases_[l]});
    return p;
  }

 private:
  std::vector<Parameter> weights_, biases_;  // [d, d, k], [d]
  std::vector<ops::Conv1dOptions> options_;
};

class RecurrentLayer : public SequenceLayer {
 public:
  RecurrentLayer(const Sizes& s, ops::CellKind cell, Rng& rng)
      : rnn_(nn::Recurrent::random(ops::RecurrentConfig{cell, s.d, s.d, 1, false}, rng)) {}
  Var forward(const Var& x) override { return rnn_.forward(x).output; }  // [B, n, d]
  std::vector<Parameter*> parameters() override { return rnn_.named_parameters(); }

 private:
  nn::Recurrent rnn_;
};

// Single-head self-attention: q, k, v projections, attention, output projection.
class AttentionLayer : public SequenceLayer {
 public:
  AttentionLayer(const Sizes& s, Layer kind, Rng& rng)
      : kind_(kind), r_(s.r), q_(s.d, s.d, rng, true, "q"), k_(s.d, s.d, rng, true, "k"), v_(s.d, s.d, rng, true, "v"),
        o_(s.d, s.d, rng, true, "out") {}
  Var forward(const Var& x) override {
    const Var q = q_.forward(x), k = k_.forward(x), v = v_.forward(x);  // [B, n, d] each
    Var context;
    if (kind_ == Layer::LocalAttention) {
      context = autograd::local_attention(q, k, v, ops::centred_window(r_));  // [B, n, d]
    } else {
      autograd::AttentionOptions o;
      o.keep = kind_ == Layer::Attention ? ops::KeepWeights::Yes : ops::KeepWeights::No;
      context = autograd::attention(q, k, v, o).context;  // [B, n, d]
    }
    return o_.forward(context);  // [B, n, d]
  }
  std::vector<Parameter*> parameters() override {
    std::vector<Parameter*> p;
    for (nn::Linear* l : {&q_, &k_, &v_, &o_})
      for (Parameter* x : l->named_parameters()) p.push_back(x);
    return p;
  }

 private:
  Layer kind_;
  int64_t r_;
  nn::Linear q_, k_, v_, o_;
};

}  // namespace

std::unique_ptr<SequenceLayer> make_layer(Layer layer, const Sizes& s, Rng& rng) {
  check_sizes(s);
  switch (layer) {
    case Layer::Conv: return std::make_unique<ConvLayers>(s, 1, rng);
    case Layer::ConvStack: return std::make_unique<ConvLayers>(s, conv_stack_depth(s.n, s.k), rng);
    case Layer::Rnn: return std::make_unique<RecurrentLayer>(s, ops::CellKind::RnnTanh, rng);
    case Layer::Lstm: return std::make_unique<RecurrentLayer>(s, ops::CellKind::Lstm, rng);
    case Layer::Attention:
    case Layer::AttentionTiled:
    case Layer::LocalAttention: return std::make_unique<AttentionLayer>(s, layer, rng);
  }
  return nullptr;
}

}  // namespace attnkit::arch
