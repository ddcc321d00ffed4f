#include "attnkit/decode/loader.hpp"

#include <algorithm>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/record_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::decode {

namespace {

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
  const io::Value config = io::parse_json(io::read_json_text(config_path), config_path);
  AK_CHECK(config.is_bundle(), "{}: a model config must be a JSON object", config_path);
  const models::Fields f(config, config_path);
  LoadedModel m;
  m.family = models::family_name(config, config_path);
  const models::ModelFamily& family = models::model_family(m.family, config_path);
  const models::Fields vocab(f.member("vocab"), config_path + ": vocab");
  // The special tokens: the ids the config gives ("pad_id", "bos_id", "eos_id", "unk_id"), else their texts'
  // positions in each vocabulary (an exporter's vocabulary may put them anywhere).
  constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
  models::Vocab::SpecialIds ids;
  ids.pad = f.integer("pad_id", -1, 0, kMaxId);
  ids.bos = f.integer("bos_id", -1, 0, kMaxId);
  ids.eos = f.integer("eos_id", -1, 0, kMaxId);
  ids.unk = f.integer("unk_id", -1, 0, kMaxId);
  m.src_vocab = models::Vocab::from_exported(vocab.member("source"), ids, config_path + ": vocab/source");
  m.tgt_vocab = models::Vocab::from_exported(vocab.member("target"), ids, config_path + ": vocab/target");
  io::Value model_config = config;  // the transformer keeps the target side's ids in its config
  if (m.family == "transformer") {
    model_config.set("pad_id", models::text_value(std::to_string(m.tgt_vocab.pad_id())));
    model_config.set("bos_id", models::text_value(std::to_string(m.tgt_vocab.bos_id())));
    model_config.set("eos_id", models::text_value(std::to_string(m.tgt_vocab.eos_id())));
  }
  m.src_tokenizer = f.choice("src_tokenizer", "space", models::tokenizer_from_name);
  m.tgt_tokenizer = f.choice("tgt_tokenizer", "space", models::tokenizer_from_name);
  const io::Value weights = io::read_value_file(weights_path);  // JSON, .safetensors, .npz by extension
  AK_CHECK(weights.is_bundle(), "{}: a state_dict must be a bundle of named tensors", weights_path);
  m.model = family.make(weights, model_config, config_path);
  models::load_parameters(*m.model, weights, weights_path);
  models::check_vocab_sizes(m.model->config_value(), m.src_vocab, m.tgt_vocab, config_path);
  std::vector<std::string> stored;
  tensor_names(weights, "", stored);
  std::vector<std::string> used;
  for (const Parameter* p : m.model->named_parameters()) used.push_back(p->name);
  for (const std::string& name : stored)
    AK_CHECK(std::find(used.begin(), used.end(), name) != used.end(),
             "{}: weight {} is not a parameter of the {} model {} describes", weights_path, name, m.family,
             config_path);
  return m;
}

namespace {

// A checkpoint document; `dtypes`: a .safetensors file's element types (null for another format).
LoadedModel load_document(io::Value v, const std::map<std::string, std::string>* dtypes, const std::string& path) {
  std::optional<models::StoredWeights> stored = models::take_quantized(v, dtypes, path);
  models::CheckpointHead head = models::read_checkpoint_head(v, path);
  LoadedModel m;
  m.family = head.family;
  m.src_vocab = std::move(head.src_vocab);
  m.tgt_vocab = std::move(head.tgt_vocab);
  m.src_tokenizer = head.src_tokenizer;
  m.tgt_tokenizer = head.tgt_tokenizer;
  m.src_spm = std::move(head.src_spm);
  m.tgt_spm = std::move(head.tgt_spm);
  m.right_left = head.right_left;
  m.model = models::model_family(m.family, path).make(v, *head.config, path);
  models::load_parameters(*m.model, v, path);
  models::check_checkpoint_complete(*m.model, v, *head.config, path);
  models::check_vocab_sizes(m.model->config_value(), m.src_vocab, m.tgt_vocab, path);
  m.stored = std::move(stored);
  return m;
}

}  // namespace

LoadedModel load_safetensors_checkpoint(std::string_view bytes, const std::string& what) {
  const std::map<std::string, std::string> dtypes = io::safetensors_dtypes(bytes, what);
  return load_document(io::read_document(bytes, io::FileFormat::Safetensors, what), &dtypes, what);
}

LoadedModel load_checkpoint(const std::string& path) {
  if (io::file_format(path) != io::FileFormat::Safetensors)
    return load_document(io::read_value_file(path), nullptr, path);  // JSON, .npz by extension
  const std::string bytes = io::read_text(path, [&](std::string_view so_far, size_t from) {
    io::refuse_impossible_start(so_far, from, io::FileFormat::Safetensors, path, {});
  });
  return load_safetensors_checkpoint(bytes, path);
}

void save_quantized(const LoadedModel& m, const nn::PrecisionPlan& plan, const std::string& path) {
  AK_CHECK(io::file_format(path) == io::FileFormat::Safetensors,
           "{}: a quantized checkpoint is a .safetensors file (its int8 and bfloat16 elements stored as such)", path);
  io::Value v = models::checkpoint_head(*m.model);
  io::Value training;  // what read_checkpoint_head reads of it
  training.set("src_tokenizer", models::text_value(models::tokenizer_name(m.src_tokenizer)));
  training.set("tgt_tokenizer", models::text_value(models::tokenizer_name(m.tgt_tokenizer)));
  if (m.right_left) training.set("right_left", models::text_value("true"));
  v.set("training", std::move(training));
  models::add_vocabularies(v, m.src_vocab, m.tgt_vocab);
  if (m.src_spm || m.tgt_spm) {
    const models::SpmModel& source = m.src_spm ? *m.src_spm : *m.tgt_spm;
    models::add_spm_models(v, source, m.tgt_spm ? &*m.tgt_spm : nullptr);
  }
  const std::map<std::string, std::string> dtypes = models::add_quantized_parameters(v, *m.model, plan);
  io::write_file_atomic(path, io::safetensors_bytes(v, path, dtypes));
}

void reading_order(const LoadedModel& m, std::vector<std::vector<Hypothesis>>& results) {
  if (!m.right_left) return;
  for (std::vector<Hypothesis>& hyps : results)
    for (Hypothesis& h : hyps) {
      std::reverse(h.ids.begin(), h.ids.end());
      if (h.attention.rank() == 2) {  // [steps, W]: a row per id, then <eos>'s when it ended
        const int64_t W = h.attention.dim(1), n = static_cast<int64_t>(h.ids.size());
        for (int64_t a = 0, b = n - 1; a < b; ++a, --b)
          std::swap_ranges(h.attention.data() + a * W, h.attention.data() + (a + 1) * W, h.attention.data() + b * W);
      }
    }
}

void use_special_ids(const LoadedModel& m, SearchOptions& options) {
  options.bos = m.tgt_vocab.bos_id();
  options.eos = m.tgt_vocab.eos_id();
  options.pad = m.src_vocab.pad_id();
  options.never = {m.tgt_vocab.pad_id(), m.tgt_vocab.bos_id(), m.tgt_vocab.unk_id()};
}

std::vector<int64_t> encode_source(const LoadedModel& m, std::string_view text, int64_t* unknown) {
  if (m.src_spm) {
    std::vector<int64_t> ids;
    try {
      ids = m.src_spm->encode(text);
    } catch (const Error& e) {
      fail("the source cannot be split into spm tokens: {}", e.what());
    }
    AK_CHECK(!ids.empty(), "empty source");
    AK_CHECK(static_cast<int64_t>(ids.size()) <= kMaxTokens, "the source has {} tokens, more than the maximum {}",
             ids.size(), kMaxTokens);
    if (unknown) *unknown += std::count(ids.begin(), ids.end(), models::Vocab::kUnk);
    return ids;
  }
  std::vector<std::string> tokens;
  const std::string why = models::tokenize(text, m.src_tokenizer, tokens);
  AK_CHECK(why.empty(), "the source cannot be split into {} tokens: {}", models::tokenizer_name(m.src_tokenizer), why);
  AK_CHECK(!tokens.empty(), "empty source");
  AK_CHECK(static_cast<int64_t>(tokens.size()) <= kMaxTokens, "the source has {} tokens, more than the maximum {}",
           tokens.size(), kMaxTokens);
  return m.src_vocab.encode(tokens, unknown);
}

std::vector<std::string> target_tokens(const LoadedModel& m, const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (int64_t id : ids) out.push_back(m.tgt_vocab.token(id));
  return out;
}

std::string target_text(const LoadedModel& m, const std::vector<std::string>& tokens) {
  if (m.tgt_spm) {
    std::vector<int64_t> ids;
    for (const std::string& t : tokens) ids.push_back(m.tgt_vocab.id(t));
    const bool continues_prompt = m.family == "transformer-lm" || m.family == "recurrent-lm";
    return m.tgt_spm->decode(ids, !continues_prompt);
  }
  return models::join_tokens(tokens, m.tgt_tokenizer);
}

}  // namespace attnkit::decode
