// Small helpers shared by the unit tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit {
namespace ops {
enum class CellKind;
}
namespace models {
enum class AttentionKind;
}
namespace train {
struct TrainingData;
struct TrainerOptions;
}  // namespace train
}  // namespace attnkit

namespace attnkit::test {

// The message of the attnkit::Error that `f` throws, "" if it throws nothing: for checking
// messages verbatim (CHECK(error_of(f).empty()) for "no error"). The one helper of the unit tests.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A file $TMPDIR/attnkit_NAME (or /tmp) holding `text`, removed at the end of the scope.
struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& text)
      : path(std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/attnkit_" + name) {
    std::ofstream(path, std::ios::binary) << text;
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path.c_str()); }
};

// The text of tests/fixtures/NAME.
inline std::string fixture_text(const std::string& name) {
  std::string path = std::string(ATTNKIT_FIXTURES) + "/" + name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fills the buffers that freed tensors leave for Tensor::uninitialized (tensor/tensor.cpp keeps 8, from 2^18 floats
// on) with tensors of `floats` values `value`, so that the next big uninitialised tensors of that size start so.
inline void fill_recycled_buffers(int64_t floats, float value) {
  std::vector<Tensor> held;
  for (int i = 0; i < 8; ++i) {  // only uninitialized() buffers are kept when freed
    held.push_back(Tensor::uninitialized({floats}));
    std::fill(held.back().values().begin(), held.back().values().end(), value);
  }
}

// The training tests' data and model (test_util.cpp; declared here so that the tests without training need not
// include train/): the reverse task (train/tasks.hpp) with 40 training examples of tokens 0..vocab_size-1 and
// lengths min_len..max_len, `valid_size` validation examples, drawn from `seed`;
train::TrainingData tiny_reverse_data(int64_t vocab_size, int64_t min_len, int64_t max_len, int64_t valid_size,
                                      uint64_t seed);
// and a small recurrent model trained on batches of 8 at lr 0.01 for `steps` steps, a log line every `log_every`,
// saved to `save` ("" for none). The caller sets the rest (dropout, shards, snapshots).
train::TrainerOptions tiny_trainer_options(ops::CellKind cell, models::AttentionKind attention, int64_t embed,
                                           int64_t hidden, int64_t steps, int64_t log_every, const std::string& save);

}  // namespace attnkit::test
