// The SentencePiece models of a pairs file's sides (seq2seq-train --tokenizer spm / --target-tokenizer spm with an
// encoder-decoder): for each side split by SentencePiece, the checkpoint's model when resuming, else a model read
// from a .model file, else one trained on that side's column of the training file (models/spm.hpp).
//   resume      the checkpoint's model; a model file given as well must be the same model, a size given must be
//               its pieces (refusals name the file or the option)
//   model file  read; a size given as well must be its pieces
//   trained     on the side's texts of every pair of the training file (train/data.hpp, read_text_pairs), with
//               the side's size and the shared type and sentence sample; a file read once for both sides
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/models/spm.hpp"
#include "attnkit/train/data.hpp"

namespace attnkit::train {

struct SpmSide {
  bool spm = false;         // the side's tokenizer is spm
  std::string model_path;   // a .model file to read
  int64_t vocab_size = 0;   // > 0: the pieces of the model trained (or that the one read must have)
  std::string size_option = "--vocab-size", model_option = "--spm-model";  // the options, for messages
};

struct SpmModelsSpec {
  SpmSide source, target;
  std::string train_path;    // the pairs file a model is trained on
  DataOptions data;          // its format and skip_bad_lines
  std::string resume_path;   // set: the checkpoint's models
  std::string type = "unigram";
  int64_t max_sentences = 1000000;
};

struct SpmModels {
  std::optional<models::SpmModel> source, target;
  std::vector<std::string> notes;  // what to tell the user ("SentencePiece trained on a random sample of ...")
};

// Every refusal names the file or option: a checkpoint without a side's model, a model file that differs from the
// checkpoint's, a size that disagrees with a model, the trainer's refusals (models/spm.hpp).
SpmModels spm_models(const SpmModelsSpec& spec);

}  // namespace attnkit::train
