// Batches for teacher forcing, in a deterministic shuffled order that an interrupted run resumes exactly.
// A batch's members are models/inputs.hpp's (src, tgt_in, tgt_out, their lengths); `index` holds the example
// (an index into the EncodedCorpus) of each row.
//
// Order: epoch e visits every example once, in the order of a Fisher-Yates shuffle (i = n-1 .. 1: swap i
// with uniform_below(i + 1), tasks.hpp) drawn from Rng(splitmix64(seed + (e + 1) * 0x9E3779B97F4A7C15)),
// so an epoch's order is a function of (seed, epoch) alone and the whole state is {seed, epoch, position}:
// no generator state to save. Batches are consecutive runs of batch_size examples in that order; the last batch of an epoch is smaller unless drop_last (then the
// remainder is skipped). Without shuffle the order is 0, 1, 2, ... in every epoch.
// sort_by_length: within each batch, rows are ordered by source length, longest first (ties: earlier in
// the epoch's order first), the order nn::Recurrent is fastest with; `index` keeps the permutation.
// maxi_batch M > 1 (Marian's --maxi-batch, fairseq's length buckets): the shuffled order is cut into windows of
// M * batch_size examples, each window is sorted by (source length, target length) (stable), and the batches
// so formed are shuffled among themselves over the whole epoch (a Fisher-Yates shuffle of the full batches by
// Rng(splitmix64(seed + (e + 1) * 0x9E3779B97F4A7C15), 1); a smaller last batch stays last). A batch then holds
// examples of about one length, so less of it is padding; the order is still a function of (seed, epoch).
//
// State in a checkpoint (state_value / load_state): {"seed": "..", "epoch": "..", "position": "..",
// "examples": ".."}, integers as decimal strings (a JSON number would be read back as a float32 tensor and a
// 64-bit seed would not survive). load_state refuses a state written for a data set of another size.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/models/inputs.hpp"
#include "attnkit/train/data.hpp"

namespace attnkit::train {

// A teacher-forced batch (models/inputs.hpp: the model's input, built here from the data).
using Batch = models::TeacherForcedBatch;

// Rows `rows` of `data` (indices into it) as one batch, in the given order (or sorted by source length,
// longest first); refuses an empty list, an index out of range and an empty sequence.
Batch make_batch(const EncodedCorpus& data, const std::vector<int64_t>& rows, bool sort_by_length);

// The whole corpus in order, batch_size rows at a time (validation and test sets).
std::vector<Batch> batches_in_order(const EncodedCorpus& data, int64_t batch_size, bool sort_by_length);

constexpr int64_t kMaxMaxiBatch = int64_t{1} << 20;

struct BatcherOptions {
  int64_t batch_size = 64;       // >= 1
  bool shuffle = true;
  bool sort_by_length = false;
  bool drop_last = false;        // skip an epoch's last, smaller batch (needs batch_size <= data size)
  int64_t maxi_batch = 0;        // > 1: batches of similar lengths from windows of this many batches (above)
  uint64_t seed = 1;
};

struct BatcherState {
  uint64_t seed = 1;
  int64_t epoch = 0;     // from 0
  int64_t position = 0;  // examples of this epoch's order already handed out
  int64_t examples = 0;  // the data set's size, checked on restore
};

// A state as the checkpoint holds it (the form above), and back; `what` names the bundle in messages. The
// values are parsed, not checked against a data set (Batcher::restore does that).
io::Value batcher_state_value(const BatcherState& state);
BatcherState read_batcher_state(const io::Value& value, std::string_view what);

// Keeps a reference to `data`: the corpus must outlive the Batcher.
class Batcher {
 public:
  Batcher(const EncodedCorpus& data, const BatcherOptions& options);

  // The next batch; after an epoch's last one, the next epoch starts.
  Batch next();

  int64_t epoch() const { return state_.epoch; }
  int64_t position() const { return state_.position; }
  // True when the current epoch's batches have all been handed out (the next() call starts epoch + 1):
  // a trainer running for a number of epochs stops when epoch() == epochs - 1 and this holds.
  bool at_epoch_end() const;
  int64_t batches_per_epoch() const;
  // The order of epoch `e` (indices into the data).
  std::vector<int64_t> epoch_order(int64_t e) const;

  BatcherState state() const { return state_; }
  // Continues from `state` (as written by state()); its seed replaces the options' seed.
  // Refuses a state for another data size or a position past the end.
  void restore(const BatcherState& state);
  io::Value state_value() const;
  // `what` names the bundle in messages ("model.json: data_order").
  void load_state(const io::Value& value, std::string_view what);

 private:
  const EncodedCorpus& data_;
  BatcherOptions options_;
  BatcherState state_;
  std::vector<int64_t> order_;  // the current epoch's order
  int64_t order_epoch_ = -1;    // the epoch order_ was drawn for
};

}  // namespace attnkit::train
