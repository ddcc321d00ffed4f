// Each gradient shard's batches from its own part of the training file (docs/distributed.md, "Data").
//
// With a training file and S gradient shards, the file is cut into S parts (train/data_part.hpp) and shard s
// draws its rows of every step from part s only, through a Batcher of its own over that part: batch size B / S
// (B the global batch), seed part_seed(seed, s). So a shard's data depends on the file, the seed, B and S, never
// on which process runs it or how many there are. A process holds the parts of its own shards only.
//
// Epochs: each shard's Batcher reshuffles its part when the part is used up, on its own; the run's epoch is the
// steps the largest part takes to pass once (every example then seen at least once):
//   steps_per_epoch = max_s ceil(examples_s / (B / S)),   epoch of step k (from 1) = (k − 1) / steps_per_epoch
// A part smaller than the largest starts its next pass earlier; a part's last batch of a pass may be smaller.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/train/batch.hpp"
#include "attnkit/train/data.hpp"

namespace attnkit::train {

// The data order's seed of shard s: the run's seed for shard 0.
uint64_t part_seed(uint64_t seed, int64_t shard);

class ShardBatches {
 public:
  // `parts`: the encoded parts of shards first .. first + parts.size() − 1 of `shards`; `part_sizes`: every
  // part's examples, in shard order (all processes'). Refuses a part without examples (naming `name`, the
  // file) and a batch the shards do not divide. maxi_batch: each shard's Batcher's (batch.hpp).
  ShardBatches(std::vector<EncodedCorpus> parts, int64_t first, int64_t shards, const std::vector<int64_t>& part_sizes,
               int64_t batch_size, uint64_t seed, const std::string& name, int64_t maxi_batch = 0);

  // The next batch of each of this process's shards, in shard order (rows index the shard's part).
  std::vector<Batch> next();
  int64_t first() const { return first_; }
  int64_t count() const { return static_cast<int64_t>(batchers_.size()); }
  int64_t shards() const { return shards_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // The epoch of step `step` (from 1).
  int64_t epoch_of(int64_t step) const { return (step - 1) / steps_per_epoch_; }

  // This process's shards' states, in shard order.
  std::vector<BatcherState> states() const;
  // Continues from every shard's state, in shard order (as saved): this process's shards take theirs. Refuses
  // a state for a part of another size (the file changed). `what` names the states in messages.
  void restore(const std::vector<BatcherState>& all, const std::string& what);

 private:
  std::vector<std::unique_ptr<EncodedCorpus>> parts_;  // the Batchers keep references
  std::vector<Batcher> batchers_;
  int64_t first_ = 0, shards_ = 1, steps_per_epoch_ = 1;
};

}  // namespace attnkit::train
