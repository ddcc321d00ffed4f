// One training step's gradient over a global batch cut into shards (docs/distributed.md): the shards of this
// rank are run one at a time, their gradients summed with the other ranks' through a Communicator
// (train/distributed.hpp), so that every rank then holds the whole batch's gradient and takes the same
// optimizer step.
//
// Shard s of a global batch of N rows is rows [s * N / shards, (s + 1) * N / shards) (possibly empty, in the
// smaller last batch of an epoch); rank r runs shards [r * c, (r + 1) * c), c = shards / ranks. The loss is
// the mean over the whole batch's target tokens, as one process computes it:
//   loss = sum_s tokens_s * loss_s / tokens,   d loss = sum_s (tokens_s / tokens) * d loss_s
// so the backward of shard s starts from tokens_s / tokens instead of 1. Each shard draws its dropout masks
// and sampled tokens from its own Rng (stream 55 + s * 2^16 of the seed; shard 0's is the single-process
// run's), so the run is the same for every process count that divides the shards.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/models/model.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/batch.hpp"
#include "attnkit/train/distributed.hpp"

namespace attnkit::train {

class ShardedStep {
 public:
  // Refuses a shard count that is not a positive multiple of the communicator's size.
  ShardedStep(Communicator& comm, int64_t shards, bool deterministic, uint64_t seed);

  int64_t shards() const { return shards_; }
  // Wall time spent summing gradients over the processes (in sum_shards), since construction.
  double reduce_seconds() const { return reduce_seconds_; }
  // Forward and backward of this rank's shards of `batch` (rows of `data`); afterwards every parameter's grad
  // holds the whole batch's gradient, on every rank. Returns the whole batch's loss. Collective.
  float forward_backward(models::TranslationModel& model, const Batch& batch, const EncodedCorpus& data,
                         models::ForwardOptions options);
  // The same when each shard has its own batch (train/shard_batches.hpp: each shard's rows from its part of
  // the file): `mine` holds this rank's shards' batches, in shard order, and the global batch is every shard's
  // together. Its target tokens (the loss's denominator) are summed over the ranks before any backward, so the
  // loss and gradient are the global batch's mean as above. Collective.
  float forward_backward(models::TranslationModel& model, const std::vector<Batch>& mine,
                         models::ForwardOptions options);
  // The global batch's target tokens in the last forward_backward.
  int64_t last_tokens() const { return last_tokens_; }

  // Every shard's Rng state, in shard order, on every rank. Collective.
  std::vector<Rng::State> rng_states();
  // This rank's shards continue from `states` (every shard's, in shard order, as saved); a shard beyond
  // them starts its own stream afresh.
  void set_rng_states(const std::vector<Rng::State>& states);

 private:
  Communicator& comm_;
  int64_t shards_, first_, count_;  // all shards; this rank's first and how many
  bool deterministic_;
  double reduce_seconds_ = 0;
  uint64_t seed_;
  int64_t last_tokens_ = 0;
  std::vector<Rng> rngs_;     // this rank's shards'
  std::vector<float> local_;  // [count_, P]: each shard's weighted gradient
  std::vector<float> sum_;    // [P]

  // The step over this rank's shards' batches (null: a shard without rows) of a global batch of `tokens`
  // target tokens.
  float run(models::TranslationModel& model, const std::vector<const Batch*>& mine, int64_t tokens,
            models::ForwardOptions options);
};

}  // namespace attnkit::train
