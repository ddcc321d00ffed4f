// Training a language model on plain text (train/text_data.hpp): the Transformer (models/transformer_lm.hpp) on
// random windows of C tokens, the recurrent one (models/recurrent_lm.hpp) on N contiguous streams with its state
// carried from batch to batch (truncated BPTT); forward, backward, clipping, an optimizer step under a schedule; validation over the whole
// validation file (loss in nats per token, perplexity, bits per byte); metrics as JSON lines; checkpoints and
// exact resume as the seq2seq Trainer's (train/trainer.hpp).
//
// Checkpoint (models/checkpoint.hpp's document, the model's one vocabulary stored as both sides):
//   "training":  {"optimizer", "lr", "batch", "schedule", "warmup", "clip", "seed", "steps", "context",
//                 "src_tokenizer", "tgt_tokenizer" (the text's tokenizer), "options" (the command line's)}
//   "rng":       {"state", "inc"}: the generator of the windows and the dropout masks after "step" steps
//   "step", "optimizer", "window" ({"loss", "steps"}: the training-loss sum since the last logged step)
//   "data_order": the recurrent model's streams: {"position"} and the carried state {"h", "c"} [L, N, H]
//   "spm":       with the spm tokenizer, its SentencePiece model (models/checkpoint.hpp)
// Resume: the model, optimizer state and generator come back and the loop continues from "step" up to the
// options' steps: the same metrics as an uninterrupted run (same thread count).
// Metrics line: {"step", "loss", "lr", "grad_norm", "tokens_per_s"} and, with a validation file,
// "valid_loss" (nats per token), "valid_ppl" (exp of it), "valid_bpb" (bits per byte).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/models/recurrent_lm.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/train/optimizer.hpp"
#include "attnkit/train/schedule.hpp"
#include "attnkit/train/text_data.hpp"
#include "attnkit/train/trainer.hpp"

namespace attnkit::train {

struct LmTrainerOptions {
  std::string family = "transformer-lm";  // or "recurrent-lm"
  models::TransformerLMConfig model;      // vocab set from the data
  models::RecurrentLMConfig recurrent;    // likewise
  int64_t context = 64;               // C: tokens per training row (at most the model's max_positions)
  int64_t steps = 1000;               // total optimizer steps
  int64_t batch_size = 12;
  OptimizerKind optimizer = OptimizerKind::AdamW;
  ScheduleOptions schedule;           // cosine with t_max 0: the run's length
  double clip = 1.0;                  // 0: no clipping
  uint64_t seed = 1;                  // the initialisation, the windows and the dropout masks
  int64_t log_every = 100;
  int64_t save_every = 0;
  int64_t keep_last = 0;  // numbered snapshots of the periodic and last saves, the newest N (train/snapshots.hpp)
  std::string save_path, metrics_path;
  std::vector<std::pair<std::string, std::string>> command_options;  // saved as "options" (train/trainer.hpp)
  std::function<bool()> stop_requested;
  std::function<void(const Progress&)> progress;
};

struct LmEvaluation {
  double loss = 0;           // nats per token predicted
  double perplexity = 0;     // exp(loss)
  double bits_per_byte = 0;  // loss * tokens / ln 2 / bytes predicted
  int64_t tokens = 0;        // tokens predicted
};

struct LmSummary {
  int64_t step = 0, start_step = 0;
  double train_loss = 0;
  std::optional<LmEvaluation> valid;
  int64_t parameters = 0;
  std::string checkpoint;
  bool interrupted = false;
  std::string to_json() const;
};

class LmTrainer {
 public:
  LmTrainer(const LmTrainerOptions& options, TextData data);
  // Continues the checkpoint at `path` (refusals name it: not a language model's, a vocabulary or tokenizer
  // that differs from the data's, a context past the model's positions).
  static std::unique_ptr<LmTrainer> resume(const std::string& path, const LmTrainerOptions& options, TextData data);
  // The SentencePiece model stored in the checkpoint at `path` (none: its tokenizer is not spm).
  static std::optional<models::SpmModel> stored_spm(const std::string& path);

  LmSummary run(const std::function<void(const std::string&)>& log = {});
  LmEvaluation evaluate(const TextCorpus& corpus);
  void save(const std::string& path) const;

  models::TranslationModel& model() { return *model_; }
  int64_t step() const { return step_; }
  int64_t total_steps() const { return options_.steps; }
  // After resume: what the run's --steps changes in a cosine schedule the checkpoint's run had another length
  // of (train::schedule_change_note), "" when nothing.
  std::string schedule_note() const;

 private:
  LmTrainer(const LmTrainerOptions& options, TextData&& data, bool fresh);
  models::TeacherForcedBatch next_batch();
  void save_checked(const std::string& path) const;

  LmTrainerOptions options_;
  TextData data_;
  std::unique_ptr<models::TranslationModel> model_;
  models::RecurrentLM* recurrent_ = nullptr;  // model_ when it is the recurrent one
  int64_t position_ = 0;                      // the recurrent model's place in its streams
  bool length_schedule_ = false;              // a cosine schedule as long as the run (t_max 0 given)
  int64_t checkpoint_run_steps_ = 0;          // after resume: the checkpoint's run's --steps
  std::unique_ptr<Optimizer> optimizer_;
  Rng rng_{1, 77};
  int64_t step_ = 0, start_step_ = 0;
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  mutable Snapshots snapshots_;
};

}  // namespace attnkit::train
