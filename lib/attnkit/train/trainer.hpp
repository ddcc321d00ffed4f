// The seq2seq training loop: batches from a Batcher, teacher forcing, forward, backward, gradient clipping,
// an optimizer step under a learning-rate schedule; validation (loss, token accuracy, exact match by greedy
// decoding); metrics as JSON lines; checkpoints as one JSON bundle written atomically; exact resume.
//
// Checkpoint (models/checkpoint.hpp's document; train/checkpoint.cpp adds the training sections):
//   "training":  {"optimizer", "lr", "batch", "schedule", "warmup", "label_smoothing", "clip", "seed",
//                 "steps", "src_tokenizer", "tgt_tokenizer", "dropout", "teacher_forcing", "maxi_batch" (when > 1),
//                 "right_left" (when true)}
//   "rng":       {"state", "inc"}: the training Rng (dropout masks, scheduled sampling) after "step" steps
//   "step":      optimizer steps taken
//   "optimizer": the optimizer's state (train/optimizer.hpp)
//   "data_order": the Batcher's state (train/batch.hpp)
//   "spm":       a side whose tokenizer is spm: its SentencePiece model (models/checkpoint.hpp)
//   "window":    {"loss", "steps"}: the training-loss sum since the last logged multiple of log_every
//   "shard_rngs": {"1": {"state", "inc"}, ...}: with gradient shards (train/data_parallel.hpp), the Rng of
//                each shard after shard 0 (whose Rng is "rng"); "training" then has "grad_shards"
//   "shard_data_orders": {"1": {...}, ...}: with a training file cut into the shards' parts
//                (train/shard_batches.hpp), the Batcher state of each shard after shard 0 (whose is "data_order")
// Files: train/trainer.cpp the loop and evaluation, train/checkpoint.cpp save and resume, train/data_source.cpp
// the data.
// Resume: the model, the optimizer state and the data order come back, and the loop continues from "step"
// up to the options' steps (the total, not an increment): the same metrics, bit for bit, as a run that was
// never interrupted (same thread count). The vocabularies of the data given must equal the checkpoint's, and a
// side split by SentencePiece must be split by the checkpoint's model.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/train/batch.hpp"
#include "attnkit/train/data.hpp"
#include "attnkit/train/data_parallel.hpp"
#include "attnkit/train/data_source.hpp"
#include "attnkit/train/distributed.hpp"
#include "attnkit/train/optimizer.hpp"
#include "attnkit/train/schedule.hpp"
#include "attnkit/train/shard_batches.hpp"
#include "attnkit/train/snapshots.hpp"
#include "attnkit/train/tasks.hpp"
#include "attnkit/train/vocab.hpp"

namespace attnkit::train {

// What a progress display needs, after each step.
struct Progress {
  int64_t step = 0, steps = 0, start_step = 0;
  double loss = 0;          // this step's
  int64_t tokens = 0;       // target tokens trained on since the run (this process) started
  double seconds = 0;       // since the run started
};

// The most optimizer steps one run may take (--steps, or --epochs times the batches of an epoch): 2^40,
// far past any run, and small enough that step counts and schedules stay exact in a double.
constexpr int64_t kMaxSteps = int64_t{1} << 40;

struct TrainerOptions {
  models::Seq2SeqConfig model;  // src_vocab / tgt_vocab are set from the data's vocabularies
  // The model family: "recurrent" (`model` above) or "transformer" (`transformer`, vocabularies set likewise).
  // A checkpoint's family is its config's "family" member ("transformer"), recurrent without one.
  std::string family = "recurrent";
  models::TransformerConfig transformer;
  // Resume: the fields of `model` the user gave; a checkpoint whose model differs in one of them is refused
  // (changing the model's shape is not a resume). The others are taken from the checkpoint.
  struct Given {
    bool cell = false, attention = false, embed = false, hidden = false, layers = false, bidirectional = false;
    bool style = false, attention_dim = false, decoder_size = false;
    bool family = false;  // resume: a checkpoint of another family is refused
  } model_given;
  // Training-time randomness (models::ForwardOptions); on resume the checkpoint's unless given.
  float dropout = 0.0f;
  float teacher_forcing = 1.0f;
  bool dropout_given = false, teacher_forcing_given = false;
  int64_t steps = 1000;         // total optimizer steps
  int64_t batch_size = 32;
  int64_t maxi_batch = 0;       // > 1: batches of similar lengths, sorted in windows of this many (batch.hpp)
  OptimizerKind optimizer = OptimizerKind::Adam;
  ScheduleOptions schedule;     // schedule.lr is the learning rate
  float label_smoothing = 0.0f;
  // Right-to-left: every target (training and validation) is learnt reversed, last token first (<eos> after
  // the first), so the model produces its outputs in that order (decode::reading_order turns them round). Such a
  // model makes other mistakes than a left-to-right one: the two together rescore each other's n-best lists
  // (decode/rescore.hpp). The checkpoint says so ("right_left"); a resume in the other direction is refused.
  bool right_left = false;
  double clip = 1.0;            // max gradient norm; 0: no clipping (the norm is still reported)
  uint64_t seed = 1;            // the model's initialisation and the data order
  int64_t log_every = 100;      // a metrics line (and a validation) every this many steps, and at the end
  int64_t max_decode_len = 0;   // greedy decoding's cap; 0: the longest validation target + 5
  std::string save_path;        // the checkpoint (written at the end)
  std::string metrics_path;     // JSON lines appended; "" for none
  // Operations. schedule.t_max == 0 with a cosine schedule: the run's length (steps, or epochs' steps).
  int64_t epochs = 0;           // > 0: train up to this many epochs (steps = epochs * batches per epoch)
  int64_t save_every = 0;       // > 0: a checkpoint every this many steps too (the last one is always saved)
  int64_t keep_last = 0;        // > 0: those saves and the last also as numbered snapshots, the newest N (snapshots.hpp)
  // The training configuration as the command line gave it (option name -> value text: the data source,
  // optimizer, rate and schedule, ...), saved in the checkpoint's "training" section as "options" so that
  // --resume can restore it; empty: none saved.
  std::vector<std::pair<std::string, std::string>> command_options;
  std::function<bool()> stop_requested;  // polled after each step: true saves a checkpoint and stops
  // Data parallelism (train/data_parallel.hpp, docs/distributed.md): the processes that train together (null:
  // this one alone) and the shards each global batch is cut into (0: one per process, or on resume the
  // checkpoint's when the processes divide them). One process and one shard: the plain step. Only rank 0
  // evaluates, writes metrics and checkpoints; stop_requested on any rank stops them all.
  Communicator* communicator = nullptr;
  int64_t grad_shards = 0;
  bool deterministic_reduce = false;  // shard gradients summed in a fixed order (distributed.hpp)
  std::function<void(const Progress&)> progress;  // called after each step
};

struct Evaluation {
  double loss = 0;            // mean cross-entropy per target token (label smoothing included)
  double token_accuracy = 0;  // teacher-forced argmax
  double exact_match = 0;     // greedy decoding equals the target
  int64_t examples = 0;
};

struct TrainSummary {
  int64_t step = 0;             // steps done in all
  int64_t start_step = 0;       // where this run started (0, or the checkpoint's step)
  double train_loss = 0;        // mean loss over the last logging window (NaN-free); not in to_json() without steps
  std::optional<Evaluation> valid;
  int64_t parameters = 0;       // number of learned values
  std::string checkpoint;
  bool interrupted = false;     // stop_requested said stop: the checkpoint is saved, no final evaluation
  int processes = 1;            // > 1: to_json() has "processes", "seconds" and "reduce_seconds"
  double seconds = 0;           // wall time of run()
  double reduce_seconds = 0;    // of which summing the gradients over the processes (rank 0's)
  std::string to_json() const;  // one JSON object, no newline
};

class Trainer {
 public:
  // A fresh run. Throws attnkit::Error on bad options or data.
  Trainer(const TrainerOptions& options, TrainingData data);
  // Continues the checkpoint at `path`: model shape, optimizer kind and data seed come from the checkpoint;
  // `options` gives steps, lr and schedule, clip, log_every, save and metrics paths. Refuses (naming the
  // file) a checkpoint that is not one, is corrupt, or whose vocabularies differ from `data`'s.
  static std::unique_ptr<Trainer> resume(const std::string& path, const TrainerOptions& options, TrainingData data);
  // The same from a checkpoint's bytes (JSON, or a .safetensors / .npz file's, told by their first bytes);
  // `name` stands for the file in messages (the fuzz target's entry).
  static std::unique_ptr<Trainer> resume_text(std::string_view text, const std::string& name,
                                              const TrainerOptions& options, TrainingData data);
  // The same from the checkpoint document read.
  static std::unique_ptr<Trainer> resume_value(const io::Value& checkpoint, const std::string& name,
                                               const TrainerOptions& options, TrainingData data);

  // Runs up to options.steps, saves the checkpoint, evaluates; `log` (if given) receives each metrics line.
  // A non-finite loss, gradient norm or parameter stops the run with an error naming the step, before any
  // checkpoint holds it (the last good one is kept).
  TrainSummary run(const std::function<void(const std::string&)>& log = {});
  Evaluation evaluate(const Corpus& corpus);

  models::TranslationModel& model() { return *model_; }
  int64_t step() const { return step_; }
  int64_t total_steps() const { return options_.steps; }
  // After resume: what the run's --steps changes in a cosine schedule the checkpoint's run had another length
  // of (train::schedule_change_note), "" when nothing.
  std::string schedule_note() const;
  // The shards each batch is cut into, and (after resume) the checkpoint's.
  int64_t grad_shards() const { return sharded_ ? sharded_->shards() : 1; }
  int64_t checkpoint_grad_shards() const { return checkpoint_shards_; }
  // After resume: the checkpoint's data order could not go on (the training file is cut into other parts than
  // the checkpoint's), so each shard's order starts afresh on its part.
  bool data_order_restarted() const { return data_order_restarted_; }
  // The gradient shards a run resuming the checkpoint at `path` cuts each batch into (what resume() does):
  // `given` when > 0, else the checkpoint's when `processes` divides it, else one per process. A training
  // file is read in that many parts (load_training_parts) before the Trainer exists.
  static int64_t resume_grad_shards(const std::string& path, int64_t given, int processes);
  // Writes the checkpoint atomically (io::write_file_atomic: temporary, fsync, rename, fsync of the folder).
  void save(const std::string& path) const;

 private:
  Trainer(const TrainerOptions& options, TrainingData&& data, const models::Seq2SeqConfig& model_config,
          const models::TransformerConfig& transformer_config);

  TrainerOptions options_;
  TrainingData data_;
  EncodedCorpus train_enc_, valid_enc_;
  std::unique_ptr<models::TranslationModel> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Batcher> batcher_;              // the whole training set's, or
  std::unique_ptr<ShardBatches> shard_batches_;   // each shard's from its part of the training file
  Rng rng_{1, 55};  // dropout masks and scheduled sampling: seeded from options.seed, saved in the checkpoint
  int64_t step_ = 0;
  int64_t start_step_ = 0;
  // The metrics window since the last multiple of log_every (kept in the checkpoint, so that a resumed
  // run logs the same means as an uninterrupted one).
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  Communicator* comm_ = nullptr;
  std::unique_ptr<ShardedStep> sharded_;  // with several shards or processes
  int64_t checkpoint_shards_ = 1;
  bool length_schedule_ = false;     // a cosine schedule as long as the run (t_max 0 given)
  int64_t checkpoint_run_steps_ = 0; // after resume: the checkpoint's run's --steps (its "training" "steps")
  mutable Snapshots snapshots_;
  mutable std::vector<Rng::State> shard_states_;  // every shard's Rng, gathered before a save
  mutable std::vector<BatcherState> shard_orders_;  // every shard's data order (with parts), likewise
  bool data_order_restarted_ = false;

  // Refuses (naming the step) parameters that are not finite, then saves (rank 0; collective).
  void save_checked(const std::string& path, const std::string& when) const;
};

}  // namespace attnkit::train
