// The Trainer's checkpoint: models/checkpoint.hpp's document (format, config, vocabularies, parameters) with the
// training sections added here (train/trainer.hpp lists them) and read back by resume.
#include <cmath>

#include <fmt/format.h>

#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/train/shard_batches.hpp"
#include "attnkit/train/trainer.hpp"

namespace attnkit::train {

namespace {

using models::real_value;
using models::text_value;

// Numbers in the tensors of a bundle, nested ones included.
int64_t numbers_in(const io::Value& v) {
  if (v.is_tensor()) return v.tensor().numel();
  int64_t n = 0;
  if (v.is_bundle())
    for (const auto& m : v.members()) n += numbers_in(m.second);
  return n;
}

// The gradient shards a resumed run cuts each batch into (Trainer::resume_grad_shards).
int64_t shards_to_resume(int64_t saved, int64_t given, int processes) {
  if (given > 0) return given;
  return saved % processes == 0 ? saved : processes;
}

// The checkpoint's "grad_shards" (1 when it has none).
int64_t saved_grad_shards(const models::Fields& training) {
  const int64_t saved = training.has("grad_shards") ? training.count("grad_shards") : 1;
  AK_CHECK(saved >= 1 && saved <= (int64_t{1} << 20), "{}: \"grad_shards\" {} is out of range", training.what(),
           saved);
  return saved;
}

}  // namespace

int64_t Trainer::resume_grad_shards(const std::string& path, int64_t given, int processes) {
  const io::Value v = io::read_value_file(path);
  models::read_checkpoint_head(v, path);  // refused as resume() refuses it
  const models::Fields top(v, path);
  return shards_to_resume(saved_grad_shards(models::Fields(top.member("training"), path + ": training")), given,
                          processes);
}

std::string Trainer::schedule_note() const {
  return length_schedule_ ? schedule_change_note(options_.schedule, checkpoint_run_steps_, step_) : std::string();
}

void Trainer::save(const std::string& path) const {
  io::Value v = models::checkpoint_head(*model_);
  io::Value t;
  t.set("optimizer", text_value(optimizer_kind_name(options_.optimizer)));
  t.set("lr", real_value(options_.schedule.lr));
  t.set("batch", text_value(std::to_string(options_.batch_size)));
  if (options_.maxi_batch > 1) t.set("maxi_batch", text_value(std::to_string(options_.maxi_batch)));
  t.set("schedule", text_value(schedule_name(options_.schedule.kind)));
  t.set("warmup", text_value(std::to_string(options_.schedule.warmup_steps)));
  t.set("label_smoothing", real_value(options_.label_smoothing));
  t.set("clip", real_value(options_.clip));
  t.set("seed", text_value(std::to_string(options_.seed)));
  t.set("steps", text_value(std::to_string(options_.steps)));
  t.set("src_tokenizer", text_value(tokenizer_name(data_.train.src_tokenizer)));
  t.set("tgt_tokenizer", text_value(tokenizer_name(data_.train.tgt_tokenizer)));
  t.set("dropout", real_value(options_.dropout));
  t.set("teacher_forcing", real_value(options_.teacher_forcing));
  if (options_.right_left) t.set("right_left", text_value("true"));
  if (grad_shards() > 1) t.set("grad_shards", text_value(std::to_string(grad_shards())));
  if (!options_.command_options.empty()) {
    io::Value given;
    for (const auto& [name, value] : options_.command_options) given.set(name, text_value(value));
    t.set("options", std::move(given));
  }
  v.set("training", std::move(t));
  // With shards, "rng" is shard 0's and "shard_rngs" the others' (gathered by save_checked).
  auto rng_value = [](const Rng::State& st) {
    io::Value r;
    r.set("state", text_value(std::to_string(st.state)));
    r.set("inc", text_value(std::to_string(st.inc)));
    return r;
  };
  const bool shard_rngs = sharded_ && !shard_states_.empty();
  v.set("rng", rng_value(shard_rngs ? shard_states_[0] : rng_.state()));
  if (shard_rngs && shard_states_.size() > 1) {
    io::Value others;
    for (size_t s = 1; s < shard_states_.size(); ++s) others.set(std::to_string(s), rng_value(shard_states_[s]));
    v.set("shard_rngs", std::move(others));
  }
  models::add_vocabularies(v, data_.src_vocab, data_.tgt_vocab);
  if (data_.src_spm || data_.tgt_spm)
    models::add_spm_models(v, data_.src_spm ? *data_.src_spm : *data_.tgt_spm, data_.tgt_spm ? &*data_.tgt_spm : nullptr);
  v.set("step", text_value(std::to_string(step_)));
  v.set("optimizer", optimizer_->state());
  // With parts, "data_order" is shard 0's and "shard_data_orders" the others' (gathered by save_checked).
  if (shard_batches_) {
    // a save without save_checked's gathering: this process's own shards, every shard when it is alone
    const std::vector<BatcherState> orders = shard_orders_.empty() ? shard_batches_->states() : shard_orders_;
    AK_ASSERT(int64_t(orders.size()) == shard_batches_->shards(), "save: {} data orders for {} shards", orders.size(),
              shard_batches_->shards());
    v.set("data_order", batcher_state_value(orders[0]));
    io::Value others;
    for (size_t s = 1; s < orders.size(); ++s) others.set(std::to_string(s), batcher_state_value(orders[s]));
    v.set("shard_data_orders", std::move(others));
  } else {
    v.set("data_order", batcher_->state_value());
  }
  io::Value window;
  window.set("loss", real_value(window_loss_));
  window.set("steps", text_value(std::to_string(window_steps_)));
  v.set("window", std::move(window));
  models::add_parameters(v, *model_);
  io::write_value_file(path, v);  // JSON, or by extension .safetensors / .npz (io/tensor_file.hpp, Documents)
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& path, const TrainerOptions& options, TrainingData data) {
  return resume_value(io::read_value_file(path), path, options, std::move(data));
}

std::unique_ptr<Trainer> Trainer::resume_text(std::string_view text, const std::string& path,
                                              const TrainerOptions& options, TrainingData data) {
  return resume_value(io::read_document(text, io::sniff_format(text), path), path, options, std::move(data));
}

std::unique_ptr<Trainer> Trainer::resume_value(const io::Value& v, const std::string& path,
                                               const TrainerOptions& options, TrainingData data) {
  models::check_not_averaged(v, path);
  const models::CheckpointHead head = models::read_checkpoint_head(v, path);
  const models::Fields top(v, path);
  const bool transformer = head.family == "transformer";
  AK_CHECK(!options.model_given.family || (options.family == "transformer") == transformer,
           "{}: the checkpoint's model is a {}; it cannot continue as a {}", path,
           transformer ? "transformer" : "recurrent seq2seq", transformer ? "recurrent seq2seq" : "transformer");
  models::Seq2SeqConfig config;
  models::TransformerConfig tconfig;
  if (transformer) tconfig = models::TransformerConfig::from_value(*head.config, path);
  else config = models::Seq2SeqConfig::from_value(*head.config, path);
  // A side split by SentencePiece goes on with the checkpoint's model only.
  const auto same_spm = [&](const std::optional<models::SpmModel>& stored, Tokenizer stored_tokenizer,
                            const std::optional<models::SpmModel>& given, Tokenizer tokenizer, const char* side) {
    AK_CHECK((stored_tokenizer == Tokenizer::Spm) == (tokenizer == Tokenizer::Spm),
             "{}: the checkpoint's {} is split into {} tokens, the data's into {} tokens", path, side,
             tokenizer_name(stored_tokenizer), tokenizer_name(tokenizer));
    if (stored && given) models::check_same_spm(*stored, path, *given, fmt::format("the data's {} tokenizer", side));
  };
  same_spm(head.src_spm, head.src_tokenizer, data.src_spm, data.train.src_tokenizer, "source");
  same_spm(head.tgt_spm, head.tgt_tokenizer, data.tgt_spm, data.train.tgt_tokenizer, "target");
  check_same_vocab(head.src_vocab, path, data.src_vocab, data.vocab_name(), path + ": source vocabulary");
  check_same_vocab(head.tgt_vocab, path, data.tgt_vocab, data.vocab_name(), path + ": target vocabulary");
  models::check_vocab_sizes(*head.config, head.src_vocab, head.tgt_vocab, path);
  if (!transformer) {
    // Before a model is allocated: the file must hold at least the numbers of the model's largest tables
    // (embeddings, one hidden-by-hidden matrix per layer and direction, the output layer), so that a small
    // file whose config claims hidden 65536 and 64 layers is refused instead of allocating terabytes.
    const double H = double(config.hidden), Hd = double(config.decoder_hidden()), L = config.layers;
    const double least = double(config.src_vocab + config.tgt_vocab) * double(config.embed) +
                         L * (config.bidirectional ? 2 : 1) * H * H + L * Hd * Hd + double(config.tgt_vocab) * Hd;
    const int64_t held = numbers_in(v);
    AK_CHECK(double(held) >= least,
             "{}: the config describes a model of at least {:.0f} parameters, but the file holds {} numbers "
             "(truncated, or not this model's checkpoint)", path, least, held);
    const auto& g = options.model_given;
    models::Seq2SeqConfig w = config;  // the checkpoint's, with the fields the user gave
    if (g.cell) w.cell = options.model.cell;
    if (g.attention) w.attention = options.model.attention;
    if (g.style) w.style = options.model.style;
    if (g.embed) w.embed = options.model.embed;
    if (g.hidden) w.hidden = options.model.hidden;
    if (g.layers) w.layers = options.model.layers;
    if (g.bidirectional) w.bidirectional = options.model.bidirectional;
    if (g.attention_dim) w.attention_dim = options.model.attention_dim;
    if (g.decoder_size) w.decoder_size = options.model.decoder_size;
    auto describe = [](const models::Seq2SeqConfig& c) {
      const std::string size = c.attention == models::AttentionKind::Additive
                                   ? fmt::format(" of size {}", c.attention_size()) : std::string();
      return fmt::format("{} with attention {}{}{}, embed {}, hidden {}, {} layer(s){}{}",
                         models::cell_kind_name(c.cell), models::attention_kind_name(c.attention), size,
                         c.style == models::AttentionStyle::Bahdanau ? " (bahdanau)" : "", c.embed, c.hidden, c.layers,
                         c.bidirectional ? ", bidirectional" : "",
                         c.bridged() ? fmt::format(", decoder {}", c.decoder_hidden()) : std::string());
    };
    AK_CHECK(!g.attention_dim || w.attention == models::AttentionKind::Additive,
             "{}: the checkpoint's model is {}; an attention size (--attention-dim) goes with additive attention only",
             path, describe(config));
    const bool same_size = w.attention != models::AttentionKind::Additive ||
                           config.attention != models::AttentionKind::Additive ||
                           w.attention_size() == config.attention_size();
    AK_CHECK(w.cell == config.cell && w.attention == config.attention && w.style == config.style &&
                 w.embed == config.embed && same_size && w.decoder_hidden() == config.decoder_hidden() &&
                 w.hidden == config.hidden && w.layers == config.layers && w.bidirectional == config.bidirectional,
             "{}: the checkpoint's model is {}; it cannot continue as {}", path, describe(config), describe(w));
  }
  const models::Fields t(top.member("training"), path + ": training");
  TrainerOptions o = options;
  o.optimizer = t.choice("optimizer", parse_optimizer_kind);
  o.batch_size = t.count("batch");
  o.seed = static_cast<uint64_t>(t.count("seed"));
  AK_CHECK(o.batch_size >= 1, "{}: \"batch\" must be >= 1", t.what());
  o.maxi_batch = t.has("maxi_batch") ? t.count("maxi_batch") : 0;
  AK_CHECK(o.maxi_batch >= 0 && o.maxi_batch <= kMaxMaxiBatch, "{}: \"maxi_batch\" {} is out of range [0, {}]",
           t.what(), o.maxi_batch, kMaxMaxiBatch);
  // Checkpoints from before dropout and scheduled sampling existed have neither (0 and 1 then).
  if (!o.dropout_given && t.has("dropout")) o.dropout = float(t.real("dropout"));
  if (!o.teacher_forcing_given && t.has("teacher_forcing")) o.teacher_forcing = float(t.real("teacher_forcing"));
  o.family = head.family;
  AK_CHECK(o.right_left == head.right_left, "{}: the checkpoint was trained {}; it cannot continue {}", path,
           head.right_left ? "right to left (its targets reversed)" : "left to right",
           o.right_left ? "right to left" : "left to right");
  // Gradient shards: the checkpoint's, unless given or the processes do not divide them (then one per process).
  const int64_t saved_shards = saved_grad_shards(t);
  o.grad_shards = shards_to_resume(saved_shards, o.grad_shards, o.communicator ? o.communicator->size() : 1);
  auto trainer = std::unique_ptr<Trainer>(new Trainer(o, std::move(data), config, tconfig));
  models::load_parameters(*trainer->model_, v, path);
  models::check_checkpoint_complete(*trainer->model_, v, *head.config, path);
  try {
    trainer->optimizer_->load_state(top.member("optimizer"));
  } catch (const Error& e) {
    top.rethrow_where(e);
  }
  // Every parameter is updated at every step, so once the optimizer keeps state it keeps it for each: a
  // missing entry is damage, not a fresh start.
  const io::Value& saved = top.member("optimizer");
  if (saved.is_bundle() && !saved.members().empty())
    for (const Parameter* p : static_cast<const nn::Module&>(*trainer->model_).named_parameters())
      AK_CHECK(saved.find(p->name) != nullptr,
               "{}: optimizer: parameter {} has no state (every parameter has one once the optimizer has stepped)",
               path, p->name);
  // The data order goes on when the file is cut as the checkpoint's was: into the same shards' parts, or not at all.
  const bool saved_parts = top.has("shard_data_orders");
  if (trainer->shard_batches_ && saved_parts && saved_shards == trainer->grad_shards()) {
    std::vector<BatcherState> orders{read_batcher_state(top.member("data_order"), path + ": data_order")};
    const models::Fields others(top.member("shard_data_orders"), path + ": shard_data_orders");
    for (int64_t s = 1; s < saved_shards; ++s)
      orders.push_back(read_batcher_state(others.member(std::to_string(s)),
                                          path + ": shard_data_orders: " + std::to_string(s)));
    trainer->shard_batches_->restore(orders, path + ": data orders");
  } else if (trainer->shard_batches_ || saved_parts) {
    trainer->data_order_restarted_ = true;
  } else {
    trainer->batcher_->load_state(top.member("data_order"), path + ": data_order");
  }
  trainer->step_ = trainer->start_step_ = top.count("step");
  trainer->checkpoint_shards_ = saved_shards;
  trainer->checkpoint_run_steps_ = t.has("steps") ? t.count("steps") : 0;
  auto read_rng = [&](const io::Value& value, const std::string& what) {
    const models::Fields r(value, what);
    Rng::State st;
    st.state = r.u64("state");
    st.inc = r.u64("inc");
    return st;
  };
  std::vector<Rng::State> shard_states;
  if (top.has("rng")) {
    shard_states.push_back(read_rng(top.member("rng"), path + ": rng"));
    trainer->rng_.set_state(shard_states[0]);
  }
  if (saved_shards > 1 && !shard_states.empty()) {  // every shard's Rng was saved with shard 0's
    const models::Fields others(top.member("shard_rngs"), path + ": shard_rngs");
    for (int64_t s = 1; s < saved_shards; ++s)
      shard_states.push_back(read_rng(others.member(std::to_string(s)), path + ": shard_rngs: " + std::to_string(s)));
  }
  if (trainer->sharded_) trainer->sharded_->set_rng_states(shard_states);
  const models::Fields window(top.member("window"), path + ": window");
  trainer->window_loss_ = window.real("loss");
  trainer->window_steps_ = window.count("steps");
  return trainer;
}

}  // namespace attnkit::train
