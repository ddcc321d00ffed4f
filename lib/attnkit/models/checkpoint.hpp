// A translation model's checkpoint, as seq2seq-train writes it and seq2seq-train (resume) and transformer-decode
// read it: one document (a JSON object; or .safetensors / .npz, io/tensor_file.hpp's Documents, the tensors under
// their names joined by '.'). Every field a JSON string (models/fields.hpp), integers as decimal strings.
//   "format": "attnkit-seq2seq", "version": "1"
//   "config":    the model's config (TranslationModel::config_value: Seq2SeqConfig's, or TransformerConfig's with
//                "family": "transformer"); its family (below) says which model it describes
//   "training":  the run's settings (train/checkpoint.hpp), "src_tokenizer" and "tgt_tokenizer" among them
//   "rng":       the training generator (train/checkpoint.hpp)
//   "vocab":     {"source": {"tokens": [...]}, "target": {"tokens": [...]}} (models/vocab.hpp)
//   "spm":       a side whose tokenizer is "spm": its SentencePiece model (models/spm.hpp), the serialized
//                model base64: {"source": "...", "target": "..."}, "target" absent when it is the source's
//                model (a language model's one); the side's vocabulary must be the model's
//   "step", "optimizer", "data_order", "window": the training state (train/checkpoint.hpp)
//   the parameters' sub-bundles ("src_embed", "encoder", ..., TranslationModel::parameters_value), so that
//   `lstm-run X --weights model.json#encoder` runs a recurrent encoder.
// This module writes and reads the model's part (format, config, vocabularies, parameters) and keeps the model
// families; train/checkpoint.cpp adds and reads the training sections through it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/models/model.hpp"
#include "attnkit/models/spm.hpp"
#include "attnkit/models/tokenizer.hpp"
#include "attnkit/models/vocab.hpp"

namespace attnkit::models {

inline constexpr std::string_view kCheckpointFormat = "attnkit-seq2seq";

// A model family: its name in a config ("family"; "recurrent" when absent, as the recurrent configs are) and
// how a model of it is made for stored weights: the weights' shapes are checked against the config before the
// model is allocated (a config with huge sizes is refused instead of exhausting memory), then the model is built
// with those sizes, its parameters not loaded yet. `what` names the file in messages.
struct ModelFamily {
  std::string_view name;
  std::unique_ptr<TranslationModel> (*make)(const io::Value& weights, const io::Value& config, std::string_view what);
};
// "recurrent" (models/seq2seq.hpp), "transformer" (models/transformer.hpp), and the language models
// "transformer-lm" (models/transformer_lm.hpp) and "recurrent-lm" (models/recurrent_lm.hpp), whose checkpoints
// store their one vocabulary as both sides.
const std::vector<ModelFamily>& model_families();
// The config's family name: its "family" member, "recurrent" when absent.
std::string family_name(const io::Value& config, std::string_view what);
// The family `name`; refuses another, naming `what` and the known ones.
const ModelFamily& model_family(std::string_view name, std::string_view what);

// Writing, in the document's order: the head ({"format", "version", "config"}), then the caller's sections
// ("training", "rng"), the vocabularies, the caller's state, the parameters.
io::Value checkpoint_head(const TranslationModel& model);
void add_vocabularies(io::Value& checkpoint, const Vocab& source, const Vocab& target);
// The "spm" section (above); `target` null or equal to `source`: stored once.
void add_spm_models(io::Value& checkpoint, const SpmModel& source, const SpmModel* target);
void add_parameters(io::Value& checkpoint, const TranslationModel& model);

// What every reader of a checkpoint needs, checked: the format and version, the config and its family, the
// vocabularies and the tokenizers (the "training" section's). Refusals name `what` (the file).
struct CheckpointHead {
  const io::Value* config = nullptr;  // inside the checkpoint read
  std::string family;
  Vocab src_vocab, tgt_vocab;
  Tokenizer src_tokenizer = Tokenizer::Char, tgt_tokenizer = Tokenizer::Char;
  std::optional<SpmModel> src_spm, tgt_spm;  // the sides whose tokenizer is spm
  bool right_left = false;  // trained on reversed targets: its outputs read right to left ("training": "right_left")
};
CheckpointHead read_checkpoint_head(const io::Value& checkpoint, const std::string& what);

// The config's "src_vocab" and "tgt_vocab" must be the vocabularies' sizes (a language model's "vocab": both
// vocabularies, equal, of that size).
void check_vocab_sizes(const io::Value& config, const Vocab& source, const Vocab& target, std::string_view what);
// model.load_parameters(weights), every refusal prefixed by `what`; then refuses a NaN or infinite value in any
// weight, naming it and the index.
void load_parameters(TranslationModel& model, const io::Value& weights, const std::string& what);
// A checkpoint is written whole, so nothing in it is defaulted or ignored: `config` (its "config") must hold every
// field model.config_value() writes, and every tensor outside the checkpoint's own sections ("optimizer",
// "data_order", ...) must be a parameter of the model (a weight of another model, or of another "attention"
// setting, is refused). Refusals name `what` and the field or tensor.
void check_checkpoint_complete(const TranslationModel& model, const io::Value& checkpoint, const io::Value& config,
                               const std::string& what);

// Checkpoint averaging (Marian's and fairseq's): the checkpoints at `paths` (JSON, .safetensors or .npz), every one
// of the same model (config, vocabularies, tokenizers and SentencePiece models equal to the first's; refusals name
// the file and the field), read one at a time; each parameter the mean of theirs (summed in double). The result is
// the last checkpoint's model part (format, config, "training" settings, vocabularies, "spm") with the averaged
// parameters and an "averaged" section, {"checkpoints": "N", "steps": "S1 S2 ..."} (each input's "step", "-" for
// one without: an average itself). It holds no training state: decoding reads it, training does not resume from it.
// A "step" that is not a non-negative integer is refused naming the file.
struct AveragedCheckpoints {
  io::Value checkpoint;
  std::vector<std::optional<int64_t>> steps;  // each input's "step", in order; none for one without (an average)
};
AveragedCheckpoints average_checkpoints(const std::vector<std::string>& paths);
// Training resumes from a training checkpoint: refuses an average and a quantized checkpoint
// (models/quantized_checkpoint.hpp), naming `what`.
void check_not_averaged(const io::Value& checkpoint, const std::string& what);

}  // namespace attnkit::models
