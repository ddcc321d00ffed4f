#include "attnkit/train/spm_models.hpp"

#include <fmt/format.h>

#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

void check_size(const SpmSide& side, const models::SpmModel& m, const std::string& name) {
  AK_CHECK(side.vocab_size == 0 || side.vocab_size == m.pieces(),
           "{} {} disagrees with {}, a SentencePiece model of {} pieces (leave {} out)", side.size_option,
           side.vocab_size, name, m.pieces(), side.size_option);
}

}  // namespace

SpmModels spm_models(const SpmModelsSpec& spec) {
  SpmModels out;
  const SpmSide* sides[2] = {&spec.source, &spec.target};
  std::optional<models::SpmModel>* models_out[2] = {&out.source, &out.target};
  const char* names[2] = {"source", "target"};
  if (!spec.resume_path.empty()) {
    const io::Value v = io::read_value_file(spec.resume_path);
    models::CheckpointHead head = models::read_checkpoint_head(v, spec.resume_path);
    const std::optional<models::SpmModel>* stored[2] = {&head.src_spm, &head.tgt_spm};
    for (int s = 0; s < 2; ++s) {
      if (!sides[s]->spm) continue;
      AK_CHECK(stored[s]->has_value(), "{}: its {} is not split by SentencePiece (its tokenizer is {}), so it cannot "
               "go on with the spm tokenizer", spec.resume_path, names[s],
               models::tokenizer_name(s == 0 ? head.src_tokenizer : head.tgt_tokenizer));
      const models::SpmModel& m = **stored[s];
      if (!sides[s]->model_path.empty())
        models::check_same_spm(m, spec.resume_path + " (" + names[s] + ")",
                               models::SpmModel::read_file(sides[s]->model_path),
                               sides[s]->model_option + " " + sides[s]->model_path);
      check_size(*sides[s], m, "the checkpoint " + spec.resume_path + "'s " + names[s]);
      *models_out[s] = m;
    }
    return out;
  }
  std::optional<TextPairs> pairs;  // read once, for the sides trained
  for (int s = 0; s < 2; ++s) {
    const SpmSide& side = *sides[s];
    if (!side.spm) continue;
    if (!side.model_path.empty()) {
      models::SpmModel m = models::SpmModel::read_file(side.model_path);
      check_size(side, m, side.model_path);
      *models_out[s] = std::move(m);
      continue;
    }
    AK_CHECK(side.vocab_size > 0, "the {}'s spm tokenizer needs {} N or {} FILE.model", names[s], side.size_option,
             side.model_option);
    if (!pairs) pairs = read_text_pairs(spec.train_path, spec.data);
    models::SpmTrainOptions o;
    o.vocab_size = side.vocab_size;
    o.type = spec.type;
    o.max_sentences = spec.max_sentences;
    o.option = side.size_option;
    models::SpmTrainReport report;
    const std::string what = fmt::format("{} ({}s)", spec.train_path, names[s]);
    // A text SentencePiece cannot read is refused as reading the file refuses it (or skipped with the line).
    std::vector<std::string> texts;
    const std::vector<std::string>& column = s == 0 ? pairs->src : pairs->tgt;
    for (size_t i = 0; i < column.size(); ++i) {
      const std::string why = models::spm_unencodable(column[i]);
      AK_CHECK(why.empty() || spec.data.skip_bad_lines, "{}:{}: {}: {} (SentencePiece reads UTF-8 text)",
               spec.train_path, pairs->lines[i], names[s], why);
      if (why.empty()) texts.push_back(column[i]);
    }
    *models_out[s] = models::SpmModel::train_texts(texts, what, o, &report);
    if (report.sampled < report.lines)
      out.notes.push_back(fmt::format("SentencePiece trained on a random sample of {} of the {} lines of {} "
                                      "(--spm-sentences)", report.sampled, report.lines, what));
  }
  return out;
}

}  // namespace attnkit::train
