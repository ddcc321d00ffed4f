// An ensemble: several models of one task decoded together, as one model. At every step each member gives its
// log-probabilities log p_k [R, Vt] for the same rows and the ensemble's are those of the mean distribution,
//   log p = log( (1/K) sum_k p_k ) = m + log( (1/K) sum_k exp(log p_k - m) ),  m = max_k log p_k
// (fairseq's ensembles; a token every member forbids stays at -inf). Rows are selected in every member alike;
// the attention over the source is the members' mean. The members are typically runs of one recipe from other
// seeds, or other architectures over the same vocabularies (Marian's and fairseq's ensembles).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "attnkit/decode/loader.hpp"
#include "attnkit/models/decoding.hpp"
#include "attnkit/models/model.hpp"

namespace attnkit::decode {

class Ensemble : public models::Decodable {
 public:
  // The members outlive the ensemble; at least one, all with a source or all without.
  explicit Ensemble(std::vector<models::TranslationModel*> members);
  bool has_source() const override { return has_source_; }
  std::unique_ptr<models::DecoderState> start_decoding(const models::SourceBatch& sources, bool use_cache) override;
  int64_t size() const { return static_cast<int64_t>(members_.size()); }

 private:
  std::vector<models::TranslationModel*> members_;
  bool has_source_ = true;
};

// Refuses models that cannot be decoded together: another source or target vocabulary, tokenizer or
// SentencePiece model than the first's, a language model beside an encoder-decoder, or a model of the other
// direction (right to left beside left to right). check_rescorers: the same but for the direction, which may
// differ, and inverse[k] (when given) marks models[k] as an inverse model (target -> source, decode/rescore.hpp),
// whose source side must be the first model's target side and the other way. names[k] names models[k] (its
// file) in the message.
void check_ensemble(const std::vector<const LoadedModel*>& models, const std::vector<std::string>& names);
void check_rescorers(const std::vector<const LoadedModel*>& models, const std::vector<std::string>& names,
                     const std::vector<bool>& inverse = {});

}  // namespace attnkit::decode
