#include "attnkit/train/shard_batches.hpp"

#include <algorithm>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

uint64_t part_seed(uint64_t seed, int64_t shard) { return seed + static_cast<uint64_t>(shard) * 0xD1B54A32D192ED03ULL; }

ShardBatches::ShardBatches(std::vector<EncodedCorpus> parts, int64_t first, int64_t shards,
                           const std::vector<int64_t>& part_sizes, int64_t batch_size, uint64_t seed,
                           const std::string& name, int64_t maxi_batch)
    : first_(first), shards_(shards) {
  AK_CHECK(shards >= 1 && first >= 0 && first + static_cast<int64_t>(parts.size()) <= shards && !parts.empty() &&
               static_cast<int64_t>(part_sizes.size()) == shards,
           "{}: parts {} .. {} of {} shards ({} sizes)", name, first, first + int64_t(parts.size()) - 1, shards,
           part_sizes.size());
  AK_CHECK(batch_size >= shards && batch_size % shards == 0,
           "trainer: the batch size {} is not a multiple of the {} gradient shards", batch_size, shards);
  const int64_t each = batch_size / shards;
  for (int64_t s = 0; s < shards; ++s) {
    AK_CHECK(part_sizes[size_t(s)] > 0,
             "{}: the part of gradient shard {} (of {}) holds no example: each shard trains on its own part of the "
             "file (a line belongs to the part holding its first byte); give fewer shards (--grad-shards, "
             "processes) for so small a file", name, s, shards);
    steps_per_epoch_ = std::max(steps_per_epoch_, (part_sizes[size_t(s)] + each - 1) / each);
  }
  for (size_t c = 0; c < parts.size(); ++c) {
    AK_CHECK(parts[c].size() == part_sizes[size_t(first) + c], "{}: the part of shard {} has {} examples, not {}", name,
             first + int64_t(c), parts[c].size(), part_sizes[size_t(first) + c]);
    parts_.push_back(std::make_unique<EncodedCorpus>(std::move(parts[c])));
  }
  batchers_.reserve(parts_.size());
  for (size_t c = 0; c < parts_.size(); ++c) {
    BatcherOptions o;
    o.batch_size = each;
    o.seed = part_seed(seed, first + int64_t(c));
    o.maxi_batch = maxi_batch;
    batchers_.emplace_back(*parts_[c], o);
  }
}

std::vector<Batch> ShardBatches::next() {
  std::vector<Batch> out;
  for (Batcher& b : batchers_) out.push_back(b.next());
  return out;
}

std::vector<BatcherState> ShardBatches::states() const {
  std::vector<BatcherState> out;
  for (const Batcher& b : batchers_) out.push_back(b.state());
  return out;
}

void ShardBatches::restore(const std::vector<BatcherState>& all, const std::string& what) {
  AK_CHECK(static_cast<int64_t>(all.size()) == shards_, "{}: {} data orders for {} shards", what, all.size(), shards_);
  for (size_t c = 0; c < batchers_.size(); ++c) {
    try {
      batchers_[c].restore(all[size_t(first_) + c]);
    } catch (const Error& e) {
      fail("{}: shard {}: {}", what, first_ + int64_t(c), e.what());
    }
  }
}

}  // namespace attnkit::train
