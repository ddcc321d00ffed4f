#include "attnkit/decode/loader.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::decode {

namespace {

// The stored tensor `name` must have `shape` (checked before the model is allocated).
void expect_shape(const io::Value& checkpoint, const std::string& name, const Shape& shape, std::string_view what) {
  const Tensor* t = io::find_tensor(checkpoint, name, what);
  AK_CHECK(t != nullptr, "{}: missing weight {} (expected shape {})", what, name, shape_str(shape));
  AK_CHECK(t->shape() == shape, "{}: weight {} has shape {}, but the config says {}", what, name, t->shape_str(),
           shape_str(shape));
}

std::unique_ptr<models::TranslationModel> make_recurrent(const io::Value& checkpoint, const io::Value& config,
                                                         std::string_view what) {
  const models::Seq2SeqConfig c = models::Seq2SeqConfig::from_value(config, what);
  const int64_t gates = c.cell == nn::CellKind::Lstm ? 4 : c.cell == nn::CellKind::Gru ? 3 : 1;
  const int64_t Hd = c.decoder_hidden();
  expect_shape(checkpoint, "src_embed.weight", {c.src_vocab, c.embed}, what);
  expect_shape(checkpoint, "tgt_embed.weight", {c.tgt_vocab, c.embed}, what);
  expect_shape(checkpoint, "encoder.weight_hh_l0", {gates * c.hidden, c.hidden}, what);
  expect_shape(checkpoint, "decoder.weight_hh_l0", {gates * Hd, Hd}, what);
  expect_shape(checkpoint, "output.weight", {c.tgt_vocab, Hd}, what);
  Rng rng(1);  // the initial values are replaced by the checkpoint's
  return std::make_unique<models::Seq2Seq>(c, rng);
}

// models/transformer.hpp's names; the last layer of each stack checked, so that more layers in the config than in
// the weights is refused before the model is allocated.
std::unique_ptr<models::TranslationModel> make_transformer(const io::Value& checkpoint, const io::Value& config,
                                                           std::string_view what) {
  const models::TransformerConfig c = models::TransformerConfig::from_value(config, what);
  const int64_t E = c.d_model;
  const std::string enc = "encoder.layers." + std::to_string(c.encoder_layers - 1) + ".";
  const std::string dec = "decoder.layers." + std::to_string(c.decoder_layers - 1) + ".";
  expect_shape(checkpoint, "src_embed.weight", {c.src_vocab, E}, what);
  if (!c.shared_embeddings) expect_shape(checkpoint, "tgt_embed.weight", {c.tgt_vocab, E}, what);
  expect_shape(checkpoint, enc + "self_attn.in_proj_weight", {3 * E, E}, what);
  expect_shape(checkpoint, enc + "linear1.weight", {c.ff, E}, what);
  expect_shape(checkpoint, dec + "multihead_attn.in_proj_weight", {3 * E, E}, what);
  expect_shape(checkpoint, dec + "linear1.weight", {c.ff, E}, what);
  if (!c.tied_output) expect_shape(checkpoint, "output.weight", {c.tgt_vocab, E}, what);
  Rng rng(1);  // the initial values are replaced by the checkpoint's
  return std::make_unique<models::Transformer>(c, rng);
}

std::map<std::string, ModelFactory>& registry() {
  static std::map<std::string, ModelFactory> r = {{"recurrent", make_recurrent}, {"transformer", make_transformer}};
  return r;
}
std::mutex registry_mutex;

const io::Value& member(const io::Value& v, const char* name, std::string_view what) {
  const io::Value* m = v.is_bundle() ? v.find(name) : nullptr;
  AK_CHECK(m != nullptr, "{}: no \"{}\"", what, name);
  return *m;
}

std::string string_of(const io::Value& v, const char* name, std::string_view what) {
  const io::Value& m = member(v, name, what);
  const nlohmann::json j = nlohmann::json::parse(m.json(), nullptr, false);
  AK_CHECK(m.kind() == io::Value::Kind::Other && j.is_string(), "{}: \"{}\" must be a string", what, name);
  return j.get<std::string>();
}

}  // namespace

void register_family(const std::string& family, ModelFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry()[family] = std::move(factory);
}

std::vector<std::string> families() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<std::string> out;
  for (const auto& [name, f] : registry()) out.push_back(name);
  return out;
}

namespace {

ModelFactory factory_for(const std::string& family, const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry().find(family);
    if (it != registry().end()) return it->second;
  }
  std::string known;
  for (const std::string& f : families()) known += (known.empty() ? "" : ", ") + f;
  fail("{}: model family \"{}\" is not one this build decodes ({})", path, family, known);
}

void load_weights(LoadedModel& m, const io::Value& weights, const std::string& path) {
  try {
    m.model->load_parameters(weights, path);
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind(path, 0) == 0) throw;
    fail("{}: {}", path, e.what());
  }
}

// The stored vocabularies must be the ones the embeddings and the output layer were made for.
void check_vocab_sizes(const LoadedModel& m, const std::string& path) {
  const int64_t Vs = m.src_vocab.size(), Vt = m.tgt_vocab.size();
  const io::Value cfg = m.model->config_value();
  auto size_of = [&](const char* name) -> int64_t {
    const io::Value* x = cfg.find(name);
    if (x == nullptr) return -1;
    const nlohmann::json j = nlohmann::json::parse(x->json(), nullptr, false);
    if (!j.is_string()) return -1;
    const std::string t = j.get<std::string>();
    int64_t n = -1;
    std::from_chars(t.data(), t.data() + t.size(), n);
    return n;
  };
  const int64_t cs = size_of("src_vocab"), ct = size_of("tgt_vocab");
  AK_CHECK((cs < 0 || cs == Vs) && (ct < 0 || ct == Vt),
           "{}: the config's vocabulary sizes {} and {} disagree with the stored vocabularies ({} and {})", path, cs,
           ct, Vs, Vt);
}

// Every tensor of `v` by its dotted path.
void tensor_names(const io::Value& v, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [name, sub] : v.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (sub.is_tensor()) out.push_back(full);
    else if (sub.is_bundle()) tensor_names(sub, full, out);
  }
}

}  // namespace

LoadedModel load_exported(const std::string& config_path, const std::string& weights_path) {
  const io::Value config = io::parse_json(io::read_text(config_path), config_path);
  AK_CHECK(config.is_bundle(), "{}: a model config must be a JSON object", config_path);
  LoadedModel m;
  m.family = config.find("family") ? string_of(config, "family", config_path) : "recurrent";
  const ModelFactory factory = factory_for(m.family, config_path);
  const io::Value& vocab = member(config, "vocab", config_path);
  // The special tokens: the ids the config gives ("pad_id", "bos_id", "eos_id", "unk_id"), else their texts'
  // positions in each vocabulary (an exporter's vocabulary may put them anywhere).
  models::Vocab::SpecialIds ids;
  auto id_of = [&](const char* name) -> int64_t {
    const io::Value* x = config.find(name);
    if (x == nullptr) return -1;
    int64_t n = -1;
    if (x->is_tensor() && x->tensor().numel() == 1 && x->tensor().shape().empty()) {
      const float f = x->tensor()[0];
      AK_CHECK(f >= 0 && f < float(int64_t{1} << 24) && f == float(int64_t(f)), "{}: \"{}\" is {}, not a token id",
               config_path, name, f);
      n = int64_t(f);
    } else {
      const std::string t = string_of(config, name, config_path);
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
      AK_CHECK(ec == std::errc() && end == t.data() + t.size() && n >= 0, "{}: \"{}\" is \"{}\", not a token id",
               config_path, name, t);
    }
    return n;
  };
  ids.pad = id_of("pad_id"), ids.bos = id_of("bos_id"), ids.eos = id_of("eos_id"), ids.unk = id_of("unk_id");
  m.src_vocab = models::Vocab::from_exported(member(vocab, "source", config_path + ": vocab"), ids, config_path + ": vocab/source");
  m.tgt_vocab = models::Vocab::from_exported(member(vocab, "target", config_path + ": vocab"), ids, config_path + ": vocab/target");
  io::Value model_config = config;  // the transformer keeps the target side's ids in its config
  if (m.family == "transformer") {
    auto text = [](int64_t id) { return io::Value::other("a string", "\"" + std::to_string(id) + "\""); };
    model_config.set("pad_id", text(m.tgt_vocab.pad_id()));
    model_config.set("bos_id", text(m.tgt_vocab.bos_id()));
    model_config.set("eos_id", text(m.tgt_vocab.eos_id()));
  }
  try {
    m.src_tokenizer = models::tokenizer_from_name(
        config.find("src_tokenizer") ? string_of(config, "src_tokenizer", config_path) : "space");
    m.tgt_tokenizer = models::tokenizer_from_name(
        config.find("tgt_tokenizer") ? string_of(config, "tgt_tokenizer", config_path) : "space");
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind(config_path, 0) == 0) throw;
    fail("{}: {}", config_path, e.what());
  }
  const io::Value weights = io::read_value_file(weights_path);  // JSON, .safetensors, .npz by extension
  AK_CHECK(weights.is_bundle(), "{}: a state_dict must be a bundle of named tensors", weights_path);
  m.model = factory(weights, model_config, config_path);
  load_weights(m, weights, weights_path);
  check_vocab_sizes(m, config_path);
  std::vector<std::string> stored;
  tensor_names(weights, "", stored);
  std::vector<std::string> used;
  for (const nn::Parameter* p : m.model->named_parameters()) used.push_back(p->name);
  for (const std::string& name : stored)
    AK_CHECK(std::find(used.begin(), used.end(), name) != used.end(),
             "{}: weight {} is not a parameter of the {} model {} describes", weights_path, name, m.family,
             config_path);
  return m;
}

LoadedModel load_checkpoint(const std::string& path) {
  const io::Value v = io::read_value_file(path);  // JSON, .safetensors, .npz by extension
  AK_CHECK(v.is_bundle() && v.find("format") && string_of(v, "format", path) == "attnkit-seq2seq",
           "{}: not an attnkit seq2seq checkpoint (no \"format\": \"attnkit-seq2seq\")", path);
  AK_CHECK(string_of(v, "version", path) == "1", "{}: checkpoint version \"{}\" is not supported", path,
           string_of(v, "version", path));
  LoadedModel m;
  const io::Value& config = member(v, "config", path);
  m.family = config.is_bundle() && config.find("family") ? string_of(config, "family", path + ": config") : "recurrent";
  const ModelFactory factory = factory_for(m.family, path);
  const io::Value& vocab = member(v, "vocab", path);
  m.src_vocab = models::Vocab::from_value(member(vocab, "source", path + ": vocab"), path + ": vocab/source");
  m.tgt_vocab = models::Vocab::from_value(member(vocab, "target", path + ": vocab"), path + ": vocab/target");
  const io::Value& training = member(v, "training", path);
  try {
    m.src_tokenizer = models::tokenizer_from_name(string_of(training, "src_tokenizer", path + ": training"));
    m.tgt_tokenizer = models::tokenizer_from_name(string_of(training, "tgt_tokenizer", path + ": training"));
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind(path, 0) == 0) throw;
    fail("{}: training: {}", path, e.what());
  }
  m.model = factory(v, config, path);
  load_weights(m, v, path);
  check_vocab_sizes(m, path);
  return m;
}

void use_special_ids(const LoadedModel& m, SearchOptions& options) {
  options.bos = m.tgt_vocab.bos_id();
  options.eos = m.tgt_vocab.eos_id();
  options.pad = m.src_vocab.pad_id();
}

std::vector<int64_t> encode_source(const LoadedModel& m, std::string_view text, int64_t* unknown) {
  std::vector<std::string> tokens;
  const std::string why = models::tokenize(text, m.src_tokenizer, tokens);
  AK_CHECK(why.empty(), "the source cannot be split into {} tokens: {}", models::tokenizer_name(m.src_tokenizer), why);
  AK_CHECK(!tokens.empty(), "empty source");
  return m.src_vocab.encode(tokens, unknown);
}

std::vector<std::string> target_tokens(const LoadedModel& m, const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (int64_t id : ids) out.push_back(m.tgt_vocab.token(id));
  return out;
}

std::string target_text(const LoadedModel& m, const std::vector<std::string>& tokens) {
  return models::join_tokens(tokens, m.tgt_tokenizer);
}

}  // namespace attnkit::decode
