#include "attnkit/train/data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {
Rng shard_rng(uint64_t seed, int64_t shard) { return Rng(seed, 55 + static_cast<uint64_t>(shard) * 0x10000); }
}  // namespace

ShardedStep::ShardedStep(Communicator& comm, int64_t shards, bool deterministic, uint64_t seed)
    : comm_(comm), shards_(shards), deterministic_(deterministic), seed_(seed) {
  AK_CHECK(shards >= 1 && shards % comm.size() == 0,
           "trainer: {} gradient shards: must be a positive multiple of the {} processes", shards, comm.size());
  count_ = shards / comm.size();
  first_ = comm.rank() * count_;
  for (int64_t s = 0; s < count_; ++s) rngs_.push_back(shard_rng(seed_, first_ + s));
}

float ShardedStep::forward_backward(models::TranslationModel& model, const Batch& batch, const EncodedCorpus& data,
                                    models::ForwardOptions options) {
  std::vector<Batch> shards;
  shards.reserve(static_cast<size_t>(count_));
  std::vector<const Batch*> mine;
  for (int64_t c = 0; c < count_; ++c) {
    const int64_t s = first_ + c;
    const int64_t lo = s * batch.N / shards_, hi = (s + 1) * batch.N / shards_;
    if (lo == hi) {  // no rows: no loss, a zero gradient
      mine.push_back(nullptr);
      continue;
    }
    shards.push_back(make_batch(data, std::vector<int64_t>(batch.index.begin() + lo, batch.index.begin() + hi), false));
    mine.push_back(&shards.back());
  }
  return run(model, mine, batch.target_tokens(), options);
}

float ShardedStep::forward_backward(models::TranslationModel& model, const std::vector<Batch>& mine,
                                    models::ForwardOptions options) {
  AK_ASSERT(static_cast<int64_t>(mine.size()) == count_, "sharded step: {} batches for {} shards", mine.size(), count_);
  std::vector<const Batch*> batches;
  uint64_t own = 0;
  for (const Batch& b : mine) {
    batches.push_back(&b);
    own += static_cast<uint64_t>(b.target_tokens());
  }
  std::vector<uint64_t> all(static_cast<size_t>(comm_.size()));
  comm_.allgather(&own, 1, all.data());
  uint64_t tokens = 0;
  for (uint64_t t : all) tokens += t;
  return run(model, batches, static_cast<int64_t>(tokens), options);
}

float ShardedStep::run(models::TranslationModel& model, const std::vector<const Batch*>& mine, int64_t batch_tokens,
                       models::ForwardOptions options) {
  const std::vector<Parameter*> params = model.named_parameters();
  int64_t P = 0;
  for (const Parameter* p : params) P += p->value.numel();
  local_.assign(static_cast<size_t>(count_ * P), 0.0f);
  sum_.resize(static_cast<size_t>(P));
  last_tokens_ = batch_tokens;
  const double tokens = static_cast<double>(batch_tokens);
  std::vector<double> weighted(static_cast<size_t>(count_), 0.0);  // tokens_s * loss_s
  for (int64_t c = 0; c < count_; ++c) {
    const Batch* shard = mine[size_t(c)];
    if (shard == nullptr) continue;
    for (Parameter* p : params) p->zero_grad();
    options.rng = &rngs_[size_t(c)];
    auto r = model.forward(*shard, options);
    const double shard_tokens = static_cast<double>(shard->target_tokens());
    weighted[size_t(c)] = shard_tokens * double(r.loss.value()[0]);
    Tensor seed(r.loss.value().shape());
    std::fill(seed.values().begin(), seed.values().end(), static_cast<float>(shard_tokens / tokens));
    autograd::backward(r.loss, &seed);
    float* out = local_.data() + c * P;
    for (Parameter* p : params) {
      const Tensor& g = p->grad_buffer();
      std::copy(g.data(), g.data() + g.numel(), out);
      out += g.numel();
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  comm_.sum_shards(local_.data(), count_, P, deterministic_, sum_.data());
  reduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const float* in = sum_.data();
  for (Parameter* p : params) {
    Tensor& g = p->grad_buffer();
    std::copy(in, in + g.numel(), g.data());
    in += g.numel();
  }
  std::vector<double> all(static_cast<size_t>(shards_));
  comm_.allgather(weighted.data(), count_, all.data());
  double loss = 0;
  for (double x : all) loss += x;  // in shard order: the same sum on every rank and for every process count
  return static_cast<float>(loss / tokens);
}

std::vector<Rng::State> ShardedStep::rng_states() {
  std::vector<uint64_t> mine;
  for (const Rng& r : rngs_) mine.push_back(r.state().state), mine.push_back(r.state().inc);
  std::vector<uint64_t> all(static_cast<size_t>(2 * shards_));
  comm_.allgather(mine.data(), 2 * count_, all.data());
  std::vector<Rng::State> out(static_cast<size_t>(shards_));
  for (size_t s = 0; s < out.size(); ++s) out[s].state = all[2 * s], out[s].inc = all[2 * s + 1];
  return out;
}

void ShardedStep::set_rng_states(const std::vector<Rng::State>& states) {
  for (int64_t c = 0; c < count_; ++c) {
    const size_t s = static_cast<size_t>(first_ + c);
    rngs_[size_t(c)] = shard_rng(seed_, first_ + c);
    if (s < states.size()) rngs_[size_t(c)].set_state(states[s]);
  }
}

}  // namespace attnkit::train
