#include "attnkit/models/checkpoint.hpp"

#include <cmath>
#include <set>

#include "attnkit/io/base64.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/models/recurrent_lm.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::models {

namespace {

// The stored tensor `name` must have `shape` (checked before the model is allocated).
void expect_shape(const io::Value& weights, const std::string& name, const Shape& shape, std::string_view what) {
  const Tensor* t = io::find_tensor(weights, name, what);
  AK_CHECK(t != nullptr, "{}: missing weight {} (expected shape {})", what, name, shape_str(shape));
  AK_CHECK(t->shape() == shape, "{}: weight {} has shape {}, but the config says {}", what, name, t->shape_str(),
           shape_str(shape));
}

std::unique_ptr<TranslationModel> make_recurrent(const io::Value& weights, const io::Value& config,
                                                 std::string_view what) {
  const Seq2SeqConfig c = Seq2SeqConfig::from_value(config, what);
  const int64_t gates = c.cell == nn::CellKind::Lstm ? 4 : c.cell == nn::CellKind::Gru ? 3 : 1;
  const int64_t Hd = c.decoder_hidden();
  expect_shape(weights, "src_embed.weight", {c.src_vocab, c.embed}, what);
  expect_shape(weights, "tgt_embed.weight", {c.tgt_vocab, c.embed}, what);
  expect_shape(weights, "encoder.weight_hh_l0", {gates * c.hidden, c.hidden}, what);
  expect_shape(weights, "decoder.weight_hh_l0", {gates * Hd, Hd}, what);
  expect_shape(weights, "output.weight", {c.tgt_vocab, Hd}, what);
  Rng rng(1);  // the initial values are replaced by the stored ones
  return std::make_unique<Seq2Seq>(c, rng);
}

// models/transformer.hpp's names; the last layer of each stack checked, so that more layers in the config than in
// the weights is refused before the model is allocated.
std::unique_ptr<TranslationModel> make_transformer(const io::Value& weights, const io::Value& config,
                                                   std::string_view what) {
  const TransformerConfig c = TransformerConfig::from_value(config, what);
  const int64_t E = c.d_model;
  const std::string enc = "encoder.layers." + std::to_string(c.encoder_layers - 1) + ".";
  const std::string dec = "decoder.layers." + std::to_string(c.decoder_layers - 1) + ".";
  expect_shape(weights, "src_embed.weight", {c.src_vocab, E}, what);
  if (!c.shared_embeddings) expect_shape(weights, "tgt_embed.weight", {c.tgt_vocab, E}, what);
  expect_shape(weights, enc + "self_attn.in_proj_weight", {3 * E, E}, what);
  expect_shape(weights, enc + "linear1.weight", {c.ff, E}, what);
  expect_shape(weights, dec + "multihead_attn.in_proj_weight", {3 * E, E}, what);
  expect_shape(weights, dec + "linear1.weight", {c.ff, E}, what);
  if (!c.tied_output) expect_shape(weights, "output.weight", {c.tgt_vocab, E}, what);
  Rng rng(1);  // the initial values are replaced by the stored ones
  return std::make_unique<Transformer>(c, rng);
}

// models/transformer_lm.hpp's names; the last layer checked likewise.
std::unique_ptr<TranslationModel> make_transformer_lm(const io::Value& weights, const io::Value& config,
                                                      std::string_view what) {
  const TransformerLMConfig c = TransformerLMConfig::from_value(config, what);
  const int64_t E = c.d_model;
  const std::string last = "decoder.layers." + std::to_string(c.layers - 1) + ".";
  expect_shape(weights, "embed.weight", {c.vocab, E}, what);
  if (c.positional == nn::PositionalKind::Learned) expect_shape(weights, "pos_embed.weight", {c.max_positions, E}, what);
  expect_shape(weights, last + "self_attn.in_proj_weight", {3 * E, E}, what);
  expect_shape(weights, last + "linear1.weight", {c.ff, E}, what);
  if (!c.tied_output) expect_shape(weights, "output.weight", {c.vocab, E}, what);
  Rng rng(1);  // the initial values are replaced by the stored ones
  return std::make_unique<TransformerLM>(c, rng);
}

// models/recurrent_lm.hpp's names.
std::unique_ptr<TranslationModel> make_recurrent_lm(const io::Value& weights, const io::Value& config,
                                                    std::string_view what) {
  const RecurrentLMConfig c = RecurrentLMConfig::from_value(config, what);
  const int64_t gates = c.cell == nn::CellKind::Lstm ? 4 : c.cell == nn::CellKind::Gru ? 3 : 1;
  expect_shape(weights, "embed.weight", {c.vocab, c.embed}, what);
  expect_shape(weights, "decoder.weight_hh_l" + std::to_string(c.layers - 1), {gates * c.hidden, c.hidden}, what);
  if (!c.tied_output) expect_shape(weights, "output.weight", {c.vocab, c.hidden}, what);
  Rng rng(1);  // the initial values are replaced by the stored ones
  return std::make_unique<RecurrentLM>(c, rng);
}

}  // namespace

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {{"recurrent", make_recurrent},
                                                    {"transformer", make_transformer},
                                                    {"transformer-lm", make_transformer_lm},
                                                    {"recurrent-lm", make_recurrent_lm}};
  return families;
}

std::string family_name(const io::Value& config, std::string_view what) {
  if (!config.is_bundle() || config.find("family") == nullptr) return "recurrent";
  return Fields(config, std::string(what), "config ").text("family");
}

const ModelFamily& model_family(std::string_view name, std::string_view what) {
  std::string known;
  for (const ModelFamily& f : model_families()) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  fail("{}: model family \"{}\" is not one this build knows ({})", what, name, known);
}

io::Value checkpoint_head(const TranslationModel& model) {
  io::Value v;
  v.set("format", text_value(kCheckpointFormat));
  v.set("version", text_value("1"));
  v.set("config", model.config_value());
  return v;
}

void add_vocabularies(io::Value& checkpoint, const Vocab& source, const Vocab& target) {
  io::Value vocab;
  vocab.set("source", source.to_value());
  vocab.set("target", target.to_value());
  checkpoint.set("vocab", std::move(vocab));
}

void add_spm_models(io::Value& checkpoint, const SpmModel& source, const SpmModel* target) {
  io::Value spm;
  spm.set("source", text_value(io::base64_encode(source.serialized())));
  if (target && *target != source) spm.set("target", text_value(io::base64_encode(target->serialized())));
  checkpoint.set("spm", std::move(spm));
}

void add_parameters(io::Value& checkpoint, const TranslationModel& model) {
  const io::Value params = model.parameters_value();  // named: a temporary's members() would dangle
  for (const auto& [name, sub] : params.members()) checkpoint.set(name, sub);
}

CheckpointHead read_checkpoint_head(const io::Value& v, const std::string& what) {
  AK_CHECK(v.is_bundle() && v.find("format") && Fields(v, what).text("format") == kCheckpointFormat,
           "{}: not an attnkit seq2seq checkpoint (no \"format\": \"{}\")", what, kCheckpointFormat);
  const Fields top(v, what);
  const std::string version = top.text("version");
  AK_CHECK(version == "1", "{}: checkpoint version \"{}\" is not supported", what, version);
  CheckpointHead h;
  h.config = &top.member("config");
  h.family = family_name(*h.config, what);
  model_family(h.family, what);
  const Fields vocab(top.member("vocab"), what + ": vocab");
  h.src_vocab = Vocab::from_value(vocab.member("source"), what + ": vocab/source");
  h.tgt_vocab = Vocab::from_value(vocab.member("target"), what + ": vocab/target");
  const Fields training(top.member("training"), what + ": training");
  h.src_tokenizer = training.choice("src_tokenizer", tokenizer_from_name);
  h.tgt_tokenizer = training.choice("tgt_tokenizer", tokenizer_from_name);
  h.right_left = training.boolean("right_left", false);
  if (h.src_tokenizer == Tokenizer::Spm || h.tgt_tokenizer == Tokenizer::Spm) {
    AK_CHECK(v.find("spm") != nullptr, "{}: the tokenizer is spm, but the checkpoint has no \"spm\" section (its "
             "SentencePiece model)", what);
    const Fields spm(top.member("spm"), what + ": spm");
    const auto model = [&](const char* side) {
      const std::string name = what + ": spm/" + side;
      return SpmModel::from_serialized(io::base64_decode(spm.text(side), name), name);
    };
    if (h.src_tokenizer == Tokenizer::Spm) h.src_spm = model("source");
    if (h.tgt_tokenizer == Tokenizer::Spm) h.tgt_spm = spm.has("target") ? model("target") : model("source");
    const auto check = [&](const std::optional<SpmModel>& m, const Vocab& vocab, const char* side) {
      if (m) check_same_vocab(m->vocab(), what + ": spm/" + side, vocab, what + ": vocab/" + side, what);
    };
    check(h.src_spm, h.src_vocab, "source");
    check(h.tgt_spm, h.tgt_vocab, "target");
  }
  return h;
}

void check_vocab_sizes(const io::Value& config, const Vocab& source, const Vocab& target, std::string_view what) {
  const Fields c(config, std::string(what), "config ");
  if (c.has("vocab")) {  // a language model: one vocabulary, stored as both sides
    const int64_t v = c.count("vocab");
    AK_CHECK(v == source.size() && v == target.size() && source == target,
             "{}: the config's vocabulary of {} tokens disagrees with the stored vocabularies ({} and {} tokens; a "
             "language model's two are one)", what, v, source.size(), target.size());
    return;
  }
  const int64_t cs = c.count("src_vocab"), ct = c.count("tgt_vocab");
  AK_CHECK(cs == source.size() && ct == target.size(),
           "{}: the config's vocabulary sizes {} and {} disagree with the stored vocabularies ({} and {})", what, cs,
           ct, source.size(), target.size());
}

void load_parameters(TranslationModel& model, const io::Value& weights, const std::string& what) {
  try {
    model.load_parameters(weights, what);
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind(what, 0) == 0) throw;
    fail("{}: {}", what, e.what());
  }
  for (const Parameter* p : model.named_parameters()) {
    const float* x = p->value.data();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      AK_CHECK(std::isfinite(x[i]), "{}: weight {} has {} at {} (every weight must be a finite number)", what,
               p->name, std::isnan(x[i]) ? "NaN" : x[i] > 0 ? "Infinity" : "-Infinity",
               shape_str(unravel_index(i, p->value.shape())));
  }
}

namespace {

// Every tensor of `v` by its dotted path.
void tensor_paths(const io::Value& v, const std::string& path, std::vector<std::string>& out) {
  if (v.is_tensor()) out.push_back(path);
  if (!v.is_bundle()) return;
  for (const auto& [name, sub] : v.members()) tensor_paths(sub, path.empty() ? name : path + "." + name, out);
}

}  // namespace

void check_checkpoint_complete(const TranslationModel& model, const io::Value& checkpoint, const io::Value& config,
                               const std::string& what) {
  const io::Value written = model.config_value();
  for (const auto& [name, value] : written.members())
    AK_CHECK(config.is_bundle() && config.find(name) != nullptr,
             "{}: config field \"{}\" is missing (a checkpoint stores every field of its model's config)", what, name);
  static const std::set<std::string, std::less<>> sections = {"format", "version", "config", "vocab", "spm",
                                                              "training", "rng", "step", "optimizer", "data_order",
                                                              "window", "shard_rngs", "averaged", "quantized"};
  std::set<std::string> parameters;
  for (const Parameter* p : static_cast<const nn::Module&>(model).named_parameters()) parameters.insert(p->name);
  for (const auto& [name, value] : checkpoint.members()) {
    if (sections.count(name) > 0) continue;
    std::vector<std::string> tensors;
    tensor_paths(value, name, tensors);
    for (const std::string& t : tensors)
      AK_CHECK(parameters.count(t) > 0, "{}: tensor {} is not a parameter of the {} model its config describes", what,
               t, model.family());
  }
}

AveragedCheckpoints average_checkpoints(const std::vector<std::string>& paths) {
  AK_CHECK(paths.size() >= 1, "averaging: no checkpoints given");
  struct Model {
    CheckpointHead head;
    std::unique_ptr<TranslationModel> model;
    io::Value config, training;
    std::optional<int64_t> step;
  };
  const auto load = [](const std::string& path) {
    const io::Value v = io::read_value_file(path);
    Model m;
    m.head = read_checkpoint_head(v, path);
    m.model = model_family(m.head.family, path).make(v, *m.head.config, path);
    load_parameters(*m.model, v, path);
    check_checkpoint_complete(*m.model, v, *m.head.config, path);
    check_vocab_sizes(m.model->config_value(), m.head.src_vocab, m.head.tgt_vocab, path);
    m.config = m.model->config_value();
    m.training = *v.find("training");
    m.head.config = nullptr;  // pointed into v
    if (v.find("step")) m.step = Fields(v, path).count("step");
    return m;
  };
  Model first = load(paths[0]);
  std::vector<Parameter*> params = first.model->named_parameters();
  std::vector<std::vector<double>> sums(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    sums[i].assign(params[i]->value.data(), params[i]->value.data() + params[i]->value.numel());
  AveragedCheckpoints result;
  result.steps.push_back(first.step);
  io::Value training = first.training;
  for (size_t k = 1; k < paths.size(); ++k) {
    const std::string& path = paths[k];
    Model m = load(path);
    const std::string one = "checkpoints of one model are averaged";
    AK_CHECK(m.head.family == first.head.family, "{}: a {} model, but {} holds a {} model ({})", path, m.head.family,
             paths[0], first.head.family, one);
    for (const auto& [name, value] : first.config.members()) {
      const io::Value* other = m.config.find(name);
      const std::string a = io::to_json(value), b = other ? io::to_json(*other) : "(none)";
      AK_CHECK(a == b, "{}: config {} is {}, but {}'s is {} ({})", path, name, b, paths[0], a, one);
    }
    check_same_vocab(first.head.src_vocab, paths[0] + ": vocab/source", m.head.src_vocab, path + ": vocab/source",
                     path);
    check_same_vocab(first.head.tgt_vocab, paths[0] + ": vocab/target", m.head.tgt_vocab, path + ": vocab/target",
                     path);
    AK_CHECK(m.head.src_tokenizer == first.head.src_tokenizer && m.head.tgt_tokenizer == first.head.tgt_tokenizer,
             "{}: tokenizers {} / {}, but {}'s are {} / {} ({})", path, tokenizer_name(m.head.src_tokenizer),
             tokenizer_name(m.head.tgt_tokenizer), paths[0], tokenizer_name(first.head.src_tokenizer),
             tokenizer_name(first.head.tgt_tokenizer), one);
    const auto same_spm = [&](const std::optional<SpmModel>& a, const std::optional<SpmModel>& b, const char* side) {
      if (a && b) check_same_spm(*a, paths[0] + ": spm/" + side, *b, path + ": spm/" + side);
    };
    same_spm(first.head.src_spm, m.head.src_spm, "source");
    same_spm(first.head.tgt_spm, m.head.tgt_spm, "target");
    const std::vector<Parameter*> mine = m.model->named_parameters();
    AK_ASSERT(mine.size() == params.size(), "averaging: parameter lists differ for one config");
    for (size_t i = 0; i < params.size(); ++i) {
      AK_ASSERT(mine[i]->name == params[i]->name && mine[i]->value.shape() == params[i]->value.shape(),
                "averaging: parameter {} differs for one config", params[i]->name);
      const float* x = mine[i]->value.data();
      for (size_t j = 0; j < sums[i].size(); ++j) sums[i][j] += x[j];
    }
    result.steps.push_back(m.step);
    training = m.training;
  }
  const double n = static_cast<double>(paths.size());
  for (size_t i = 0; i < params.size(); ++i) {
    float* x = params[i]->value.data();
    for (size_t j = 0; j < sums[i].size(); ++j) x[j] = static_cast<float>(sums[i][j] / n);
  }
  io::Value& v = result.checkpoint;
  v = checkpoint_head(*first.model);
  v.set("training", std::move(training));
  add_vocabularies(v, first.head.src_vocab, first.head.tgt_vocab);
  if (first.head.src_spm || first.head.tgt_spm) {
    const SpmModel& source = first.head.src_spm ? *first.head.src_spm : *first.head.tgt_spm;
    add_spm_models(v, source, first.head.tgt_spm ? &*first.head.tgt_spm : nullptr);
  }
  std::string steps;
  for (const std::optional<int64_t>& s : result.steps)
    steps += (steps.empty() ? "" : " ") + (s ? std::to_string(*s) : std::string("-"));
  io::Value averaged;
  averaged.set("checkpoints", text_value(std::to_string(paths.size())));
  averaged.set("steps", text_value(steps));
  v.set("averaged", std::move(averaged));
  add_parameters(v, *first.model);
  return result;
}

void check_not_averaged(const io::Value& checkpoint, const std::string& what) {
  AK_CHECK(!checkpoint.is_bundle() || checkpoint.find("quantized") == nullptr,
           "{}: a quantized checkpoint (transformer-decode --save-quantized) holds its weight matrices in lower "
           "precision and no training state; training resumes from the float32 checkpoint it was made from", what);
  const io::Value* averaged = checkpoint.is_bundle() ? checkpoint.find("averaged") : nullptr;
  if (averaged == nullptr) return;
  const Fields a(*averaged, what + ": averaged");
  fail("{}: an average of {} checkpoints (steps {}) holds no training state (optimizer, step, data order); training "
       "resumes from one of the checkpoints averaged, decoding reads the average", what, a.text("checkpoints"),
       a.text("steps"));
}

}  // namespace attnkit::models
