// Models for decoding: a seq2seq-train checkpoint (train/trainer.hpp's format) of any registered family,
// with its vocabularies and tokenizers; and the text <-> ids of its sources and outputs.
//
// The checkpoint is read by models/checkpoint.hpp, the model made by its family (the config's "family" member,
// "recurrent" when absent), then the parameters are loaded by name and shape (a config that disagrees with the
// weights is refused, naming the tensor).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/decode/search.hpp"
#include "attnkit/models/model.hpp"
#include "attnkit/models/quantized_checkpoint.hpp"
#include "attnkit/models/spm.hpp"
#include "attnkit/models/vocab.hpp"

namespace attnkit::decode {

struct LoadedModel {
  std::unique_ptr<models::TranslationModel> model;
  std::string family;
  models::Vocab src_vocab, tgt_vocab;
  models::Tokenizer src_tokenizer = models::Tokenizer::Char, tgt_tokenizer = models::Tokenizer::Char;
  std::optional<models::SpmModel> src_spm, tgt_spm;  // a checkpoint's SentencePiece models (tokenizer spm)
  std::optional<models::StoredWeights> stored;  // a quantized checkpoint's lowered matrices (its float32 values
                                                // in the model are theirs, dequantized)
  bool right_left = false;  // trained on reversed targets (seq2seq-train --right-left): it produces its outputs
                            // last token first, and reading_order() turns them round
};

// Reads the checkpoint at `path`; every refusal names the file: not a checkpoint, an unknown family, a
// config that disagrees with its vocabularies or weights.
LoadedModel load_checkpoint(const std::string& path);
// The same from the bytes of a .safetensors checkpoint, plain or quantized; `what` names it in messages.
LoadedModel load_safetensors_checkpoint(std::string_view bytes, const std::string& what);
// A quantized checkpoint of `m` as `plan` (which m.model took) lowers it (models/quantized_checkpoint.hpp), written
// atomically to `path` (.safetensors; anything else is refused): the model part of a checkpoint (format, config,
// the tokenizers as "training", vocabularies, spm) with the parameters and the "quantized" section.
void save_quantized(const LoadedModel& m, const nn::PrecisionPlan& plan, const std::string& path);

// A model exported from PyTorch (or written by hand): `config_path` is a JSON object holding the family's
// config members ("family", sizes, as the checkpoint's "config"), plus
//   "vocab": {"source": {"tokens": [...]}, "target": {"tokens": [...]}}   (<pad> <bos> <eos> <unk> first)
//   "src_tokenizer", "tgt_tokenizer": "char" | "space" | "ids"             (default "space")
// and `weights_path` the state_dict, {"name": nested list, ...} with PyTorch's names (flat "a.b.c" keys or
// nested objects). Refuses a missing or misshapen weight, and a weight the model does not have (a config
// with fewer layers than the weights), naming the file and the tensor.
LoadedModel load_exported(const std::string& config_path, const std::string& weights_path);

// A right-to-left model's hypotheses (search()'s, last token first) in reading order: each one's ids reversed,
// and its attention rows with them (the <eos> row stays last). Nothing for a left-to-right model.
void reading_order(const LoadedModel& m, std::vector<std::vector<Hypothesis>>& results);

// Sets the search's special ids to the model's: its target vocabulary's <bos> and <eos>, its source
// vocabulary's <pad>, and the target ids never output (its <pad>, <bos>, <unk>). An exported model's may sit
// anywhere; a checkpoint's are 0-3.
void use_special_ids(const LoadedModel& m, SearchOptions& options);

// A source text -> ids: tokenized with the model's source tokenizer, unknown tokens -> <unk> (counted into
// *unknown). Refuses an empty source, one of more than kMaxTokens tokens and text the tokenizer cannot split
// (attnkit::Error with the reason).
std::vector<int64_t> encode_source(const LoadedModel& m, std::string_view text, int64_t* unknown);
// Target ids -> tokens and the text (joined as the target tokenizer does; spm: decoded by its model, as
// SentencePiece's DecodePieces does for an encoder-decoder's target, a line of its own whose leading "▁" is not
// shown; for a language model as text that continues the prompt: a leading "▁" is a space).
std::vector<std::string> target_tokens(const LoadedModel& m, const std::vector<int64_t>& ids);
std::string target_text(const LoadedModel& m, const std::vector<std::string>& tokens);

}  // namespace attnkit::decode
