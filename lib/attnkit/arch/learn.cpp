#include "attnkit/arch/learn.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "attnkit/arch/layers.hpp"
#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/optimizer.hpp"

namespace attnkit::arch {

using autograd::Var;

namespace {

struct Batch {
  std::vector<int64_t> ids;      // [B * n]
  std::vector<int64_t> targets;  // [B]
};

Batch make_batch(int64_t B, int64_t n, const LearnOptions& o, Rng& rng) {
  Batch b;
  b.ids.resize(size_t(B * n));
  b.targets.resize(size_t(B));
  for (int64_t i = 0; i < B; ++i) {
    const int64_t key = int64_t(rng.next_u32() % uint32_t(o.keys));
    b.targets[size_t(i)] = key;
    b.ids[size_t(i * n)] = key;
    for (int64_t t = 1; t < n; ++t) b.ids[size_t(i * n + t)] = o.keys + int64_t(rng.next_u32() % uint32_t(o.distractors));
  }
  return b;
}

// Logits [B, K] at the last position.
Var logits_of(SequenceLayer& layer, Parameter& embedding, nn::Linear& readout, const Batch& b, int64_t n) {
  const int64_t B = int64_t(b.targets.size());
  const Var x = autograd::embedding(Var::param(embedding), b.ids, {B, n});  // [B, n, d]
  const Var y = layer.forward(x);                                              // [B, n, d]
  const Var last = autograd::reshape(autograd::slice(y, 1, n - 1, n), {B, -1});  // [B, d]
  return readout.forward(last);                                                  // [B, K]
}

}  // namespace

std::vector<LearnResult> learn(const Sizes& sizes, const LearnOptions& o) {
  AK_CHECK(!o.lengths.empty(), "learn: no sequence lengths");
  AK_CHECK(o.keys >= 2 && o.distractors >= 1, "learn: {} keys and {} distractors, expected >= 2 and >= 1", o.keys,
           o.distractors);
  AK_CHECK(o.steps >= 1 && o.batch >= 1 && o.eval >= 1, "learn: steps {}, batch {}, eval {}: each must be >= 1", o.steps,
           o.batch, o.eval);
  for (int64_t n : o.lengths) AK_CHECK(n >= 2, "learn: sequence length {}, expected at least 2", n);
  std::vector<LearnResult> results;
  const int64_t total = int64_t(o.lengths.size() * o.layers.size()) * o.steps;
  int64_t done = 0;
  for (int64_t n : o.lengths) {
    Sizes s = sizes;
    s.n = n;
    s.d = o.d;
    check_sizes(s);
    for (Layer l : o.layers) {
      if (o.progress) o.progress(fmt::format("learn: {} at n={}", layer_name(l), n), done, total);
      Rng init(o.seed + 1);
      Parameter embedding{"embedding.weight", rand_normal({o.keys + o.distractors, o.d}, init)};  // [V, d]
      auto layer = make_layer(l, s, init);
      nn::Linear readout(o.d, o.keys, init, true, "readout");
      std::vector<Parameter*> params{&embedding};
      for (Parameter* p : layer->parameters()) params.push_back(p);
      for (Parameter* p : readout.named_parameters()) params.push_back(p);
      train::AdamOptions adam;
      adam.lr = o.lr;
      train::Adam optimizer(params, adam);
      Rng data(o.seed + 2);  // the same training sequences for every architecture
      const auto t0 = std::chrono::steady_clock::now();
      double tail_loss = 0;
      int tail = 0;
      for (int step = 0; step < o.steps; ++step) {
        const Batch b = make_batch(o.batch, n, o, data);
        optimizer.zero_grad();
        const Var loss = autograd::cross_entropy(logits_of(*layer, embedding, readout, b, n), b.targets);
        if (step >= o.steps - std::max(1, o.steps / 10)) {
          tail_loss += loss.value()[0];
          ++tail;
        }
        autograd::backward(loss);
        optimizer.step();
        ++done;
      }
      LearnResult r{l, n};
      r.steps = o.steps;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.final_loss = tail_loss / std::max(1, tail);
      Rng eval_rng(o.seed + 3);
      const Batch e = make_batch(o.eval, n, o, eval_rng);
      autograd::NoGrad no_grad;
      const Tensor logits = logits_of(*layer, embedding, readout, e, n).value();  // [eval, K]
      int64_t right = 0;
      for (int64_t i = 0; i < o.eval; ++i) {
        const float* row = logits.data() + i * o.keys;
        right += (std::max_element(row, row + o.keys) - row) == e.targets[size_t(i)];
      }
      r.accuracy = double(right) / double(o.eval);
      results.push_back(r);
    }
  }
  if (o.progress) o.progress("learn: done", total, total);
  return results;
}

}  // namespace attnkit::arch
