// libFuzzer target: the seq2seq checkpoint reader (train::Trainer::resume_text, what `seq2seq-train --resume`
// reads) against a fixed tiny data set (the task reverse over 3 tokens; the seeds in corpus/checkpoint are
// checkpoints of it, written by seq2seq-train, as JSON and as .safetensors / .npz: resume_text tells them
// apart by their first bytes).
// Properties: any input is refused with attnkit::Error (never anything else, never a crash, never an
// allocation far beyond the input's own numbers); one that loads evaluates (run() with no step left) to
// finite figures, at the checkpoint's step.
#include <cmath>
#include <string_view>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/trainer.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

namespace {

const train::TrainingData& tiny_data() {
  static const train::TrainingData data = [] {
    train::DataSpec spec;
    train::TaskOptions t;
    t.name = "reverse";
    t.vocab_size = 3;
    t.min_len = 1;
    t.max_len = 3;
    t.train_size = 4;
    t.valid_size = 2;
    t.seed = 1;
    spec.task = t;
    return train::load_training_data(spec);
  }();
  return data;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  set_num_threads(1);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  train::TrainerOptions o;
  o.steps = 0;  // no training: load, then evaluate
  o.log_every = 1;
  std::unique_ptr<train::Trainer> trainer;
  try {
    trainer = train::Trainer::resume_text(text, "checkpoint.json", o, tiny_data());
  } catch (const Error&) {
    return 0;
  }
  const int64_t step = trainer->step();
  train::TrainSummary s;
  try {
    s = trainer->run();
  } catch (const Error&) {
    return 0;  // e.g. weights so large that the validation loss is not finite
  }
  if (s.step != step || s.start_step != step) fuzz::broken("a loaded checkpoint ran steps it was not asked for");
  if (!s.valid || s.valid->examples != 2) fuzz::broken("a loaded checkpoint was not evaluated on the validation set");
  return 0;
}
