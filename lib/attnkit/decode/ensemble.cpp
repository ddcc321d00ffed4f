// Legend: K members, R rows, Vt target vocabulary, S source length.
#include "attnkit/decode/ensemble.hpp"

#include <cmath>
#include <limits>

#include "attnkit/tensor/error.hpp"

namespace attnkit::decode {

namespace {

class EnsembleState : public models::DecoderState {
 public:
  explicit EnsembleState(std::vector<std::unique_ptr<models::DecoderState>> states) : states_(std::move(states)) {}

  int64_t rows() const override { return states_.front()->rows(); }

  Tensor step(const std::vector<int64_t>& prev) override {
    std::vector<Tensor> lp;
    lp.reserve(states_.size());
    for (auto& s : states_) lp.push_back(s->step(prev));
    const Shape& shape = lp.front().shape();
    for (const Tensor& t : lp)
      AK_CHECK(t.shape() == shape, "ensemble: a member's log-probabilities are {}, another's {}", t.shape_str(),
               shape_str(shape));
    if (lp.size() == 1) return std::move(lp.front());
    Tensor out = Tensor::uninitialized(shape);
    const int64_t n = out.numel();
    const float log_k = std::log(static_cast<float>(lp.size()));
    float* o = out.data();
    for (int64_t i = 0; i < n; ++i) {
      float m = -std::numeric_limits<float>::infinity();
      for (const Tensor& t : lp) m = std::max(m, t.data()[i]);
      if (m == -std::numeric_limits<float>::infinity()) {  // every member forbids it (or gives it no mass)
        o[i] = m;
        continue;
      }
      float sum = 0.0f;
      for (const Tensor& t : lp) sum += std::exp(t.data()[i] - m);
      o[i] = m + std::log(sum) - log_k;
    }
    return out;
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    for (auto& s : states_) s->select_rows(rows);
  }

  Tensor cross_attention(int layer, int head) const override {
    Tensor mean = states_.front()->cross_attention(layer, head);
    for (size_t k = 1; k < states_.size(); ++k) {
      const Tensor a = states_[k]->cross_attention(layer, head);
      AK_CHECK(a.shape() == mean.shape(), "ensemble: a member's attention is {}, another's {}", a.shape_str(),
               mean.shape_str());
      for (int64_t i = 0; i < a.numel(); ++i) mean.data()[i] += a.data()[i];
    }
    const float inv = 1.0f / static_cast<float>(states_.size());
    for (int64_t i = 0; i < mean.numel(); ++i) mean.data()[i] *= inv;
    return mean;
  }

  void keep_attention() override {
    for (auto& s : states_) s->keep_attention();
  }

 private:
  std::vector<std::unique_ptr<models::DecoderState>> states_;
};

}  // namespace

Ensemble::Ensemble(std::vector<models::TranslationModel*> members) : members_(std::move(members)) {
  AK_CHECK(!members_.empty(), "ensemble: no models");
  has_source_ = members_.front()->has_source();
  for (const models::TranslationModel* m : members_)
    AK_CHECK(m != nullptr && m->has_source() == has_source_,
             "ensemble: a language model cannot be decoded together with an encoder-decoder");
}

std::unique_ptr<models::DecoderState> Ensemble::start_decoding(const models::SourceBatch& sources, bool use_cache) {
  std::vector<std::unique_ptr<models::DecoderState>> states;
  states.reserve(members_.size());
  for (models::TranslationModel* m : members_) states.push_back(m->start_decoding(sources, use_cache));
  return std::make_unique<EnsembleState>(std::move(states));
}

namespace {

// What check_ensemble and check_rescorers refuse; `same_direction`: the direction too. swapped[k]: models[k] is
// an inverse model (target -> source), whose source side is the first model's target side and the other way.
void check_together(const std::vector<const LoadedModel*>& models, const std::vector<std::string>& names,
                    bool same_direction, const std::vector<bool>& swapped) {
  AK_CHECK(!models.empty() && models.size() == names.size(), "ensemble: {} models and {} names", models.size(),
           names.size());
  const LoadedModel& first = *models.front();
  for (size_t k = 1; k < models.size(); ++k) {
    const LoadedModel& m = *models[k];
    const bool swap = k < swapped.size() && swapped[k];
    const std::string& a = names.front();
    const std::string& b = names[k];
    AK_CHECK(m.model->has_source() == first.model->has_source(),
             "{} is a {} and {} a {}: they cannot be decoded together", b,
             m.model->has_source() ? "an encoder-decoder" : "language model", a,
             first.model->has_source() ? "an encoder-decoder" : "language model");
    AK_CHECK(!same_direction || m.right_left == first.right_left,
             "{} produces its outputs {} and {} {}: an ensemble's models go step by step together (a model of the "
             "other direction can rescore the search's hypotheses instead)", b,
             m.right_left ? "right to left" : "left to right", a, first.right_left ? "right to left" : "left to right");
    const models::Tokenizer m_src = swap ? m.tgt_tokenizer : m.src_tokenizer;
    const models::Tokenizer m_tgt = swap ? m.src_tokenizer : m.tgt_tokenizer;
    const auto& m_src_spm = swap ? m.tgt_spm : m.src_spm;
    const auto& m_tgt_spm = swap ? m.src_spm : m.tgt_spm;
    const char* as = swap ? " (read the other way: an inverse model's source is the target)" : "";
    AK_CHECK(m_src == first.src_tokenizer && m_tgt == first.tgt_tokenizer,
             "{} splits its text with tokenizers {} / {}{}, {} with {} / {}: models decoded together share their tokens",
             b, models::tokenizer_name(m_src), models::tokenizer_name(m_tgt), as, a,
             models::tokenizer_name(first.src_tokenizer), models::tokenizer_name(first.tgt_tokenizer));
    AK_CHECK(m_src_spm.has_value() == first.src_spm.has_value() && m_tgt_spm.has_value() == first.tgt_spm.has_value() &&
                 (!m_src_spm || *m_src_spm == *first.src_spm) && (!m_tgt_spm || *m_tgt_spm == *first.tgt_spm),
             "{} holds other SentencePiece models than {}{}: models decoded together share their tokens", b, a, as);
    for (const bool target : {false, true}) {
      const models::Vocab& va = target ? first.tgt_vocab : first.src_vocab;
      const models::Vocab& vb = target != swap ? m.tgt_vocab : m.src_vocab;
      const std::string diff = models::vocab_difference(va, a, vb, b);
      AK_CHECK(diff.empty(), "{}: the {} vocabularies differ{}: {}", same_direction ? "ensemble" : "rescoring",
               target ? "target" : "source", as, diff);
    }
  }
}

}  // namespace

void check_ensemble(const std::vector<const LoadedModel*>& models, const std::vector<std::string>& names) {
  check_together(models, names, true, {});
}

void check_rescorers(const std::vector<const LoadedModel*>& models, const std::vector<std::string>& names,
                     const std::vector<bool>& inverse) {
  AK_CHECK(inverse.empty() || inverse.size() == models.size(), "rescoring: {} models and {} inverse flags",
           models.size(), inverse.size());
  check_together(models, names, false, inverse);
}

}  // namespace attnkit::decode
