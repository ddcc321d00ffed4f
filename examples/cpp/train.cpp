// A training loop: a two-layer network learns y = sin(x . w) from generated data with AdamW under a cosine
// schedule with linear warmup, gradients clipped to norm 1. Prints the loss on held-out data every 100 steps;
// the weights and the data come from a seeded attnkit::Rng.
//   usage: train
#include <cmath>
#include <cstdio>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/clip.hpp"
#include "attnkit/train/optimizer.hpp"
#include "attnkit/train/schedule.hpp"

using namespace attnkit;
using autograd::Var;

struct Batch {
  Tensor x, y;  // x [B, 4] ~ N(0, 1), y [B, 1] = sin(x w)
  Batch(int64_t B, const Tensor& w, Rng& rng) : x(rand_normal({B, 4}, rng)), y({B, 1}) {
    for (int64_t i = 0; i < B; ++i) {
      float dot = 0;
      for (int64_t k = 0; k < 4; ++k) dot += x.data()[i * 4 + k] * w.data()[k];
      y.data()[i] = std::sin(dot);
    }
  }
};

struct Network {
  nn::Linear hidden, out;  // parameters hidden.weight, hidden.bias, out.weight, out.bias
  explicit Network(Rng& rng) : hidden(4, 32, rng, true, "hidden"), out(32, 1, rng, true, "out") {}
  std::vector<Parameter*> parameters() {
    std::vector<Parameter*> p = hidden.named_parameters();
    for (Parameter* q : out.named_parameters()) p.push_back(q);
    return p;
  }
  Var loss(const Batch& b) {  // mean squared error
    const Var error = autograd::sub(out.forward(autograd::relu(hidden.forward(Var(b.x)))), Var(b.y));  // [B, 1]
    return autograd::mean(autograd::mul(error, error));
  }
};

int main() {
  try {
    Rng rng(2026);  // every draw (weights and data) from this seed
    Network net(rng);
    const std::vector<Parameter*> params = net.parameters();
    train::AdamWOptions adam;
    adam.weight_decay = 0.0;
    train::AdamW optimizer(params, adam);
    train::ScheduleOptions schedule;
    schedule.kind = train::ScheduleKind::Cosine, schedule.lr = 0.01, schedule.warmup_steps = 50, schedule.t_max = 600;

    const Tensor w = rand_normal({4, 1}, rng);  // the function to learn
    const Batch valid(512, w, rng);             // held out
    for (int64_t step = 0; step <= 600; ++step) {
      if (step % 100 == 0) {
        autograd::NoGrad no_grad;  // evaluation: nothing recorded
        std::printf("step %3lld  validation loss %.5f\n", static_cast<long long>(step),
                    net.loss(valid).value().data()[0]);
      }
      if (step == 600) break;
      const Var loss = net.loss(Batch(64, w, rng));  // recorded
      optimizer.zero_grad();
      autograd::backward(loss);                                // gradients into each Parameter's grad
      train::clip_grad_norm(params, train::ClipOptions{});    // to a global norm of at most 1
      optimizer.set_lr(train::learning_rate(schedule, step));  // 0 at step 0, 0.01 at step 50, then cosine to 0
      optimizer.step();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
  return 0;
}
