// What a translation model reads: the sources of a batch, and for teacher forcing their targets too.
// Legend: N batch size (rows), S longest source in the batch, T longest target in the batch + 1.
//
//   src      [N, S]  source ids, padded with <pad> after each row's length
//   tgt_in   [N, T]  <bos> y_1 .. y_m, padded      (the decoder's inputs)
//   tgt_out  [N, T]  y_1 .. y_m <eos>, padded      (what it must predict; <pad> positions are ignored
//                                                   by the loss: cross-entropy's ignore_index = kPad)
//   src_lengths [N], tgt_lengths [N] (= m + 1: the target's tokens plus <eos>, also <bos> plus the tokens)
//   index       [N]  the example of each row, and epoch the pass it belongs to: the Transformer seeds each
//                    batch's dropout masks from them (models/transformer.hpp)
// Decoding reads a SourceBatch only; training (train/batch.hpp builds them) a TeacherForcedBatch.
#pragma once
#include <cstdint>
#include <numeric>
#include <vector>

namespace attnkit::models {

struct SourceBatch {
  int64_t N = 0;
  int64_t S = 0;
  std::vector<int64_t> src;          // [N, S]
  std::vector<int64_t> src_lengths;  // [N]
};

struct TeacherForcedBatch : SourceBatch {
  int64_t T = 0;
  std::vector<int64_t> tgt_in;       // [N, T]
  std::vector<int64_t> tgt_out;      // [N, T]
  std::vector<int64_t> tgt_lengths;  // [N]
  std::vector<int64_t> index;        // [N]
  int64_t epoch = 0;                 // the epoch the batch belongs to
  // Target tokens predicted (sum of tgt_lengths: each <eos> included): tokens/s counts these.
  int64_t target_tokens() const {
    return std::accumulate(tgt_lengths.begin(), tgt_lengths.end(), int64_t{0});
  }
};

}  // namespace attnkit::models
