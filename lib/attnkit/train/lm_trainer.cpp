#include "attnkit/train/lm_trainer.hpp"

#include <chrono>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/train/clip.hpp"

namespace attnkit::train {

namespace {

using models::real_value;
using models::text_value;

constexpr int64_t kEvalRows = 32;  // evaluation windows per forward

std::string shown(float x) { return std::isnan(x) ? "NaN" : fmt::format("{}", x); }

// Appends one line to the metrics file; a write that fails is an error naming the file.
void append_metrics(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  std::ofstream f(path, std::ios::app | std::ios::binary);
  AK_CHECK(f.good(), "{}: cannot open for appending", path);
  f << line << '\n';
  f.flush();
  AK_CHECK(f.good(), "{}: write failed", path);
}


}  // namespace

std::string LmSummary::to_json() const {
  nlohmann::json j;
  j["step"] = step;
  j["start_step"] = start_step;
  if (step > start_step) j["train_loss"] = train_loss;
  if (valid) {
    j["valid_loss"] = valid->loss;
    j["valid_ppl"] = valid->perplexity;
    j["valid_bpb"] = valid->bits_per_byte;
    j["valid_tokens"] = valid->tokens;
  }
  j["parameters"] = parameters;
  j["checkpoint"] = checkpoint;
  return j.dump();
}

LmTrainer::LmTrainer(const LmTrainerOptions& options, TextData data) : LmTrainer(options, std::move(data), true) {}

LmTrainer::LmTrainer(const LmTrainerOptions& options, TextData&& data, bool fresh)
    : options_(options), data_(std::move(data)) {
  AK_CHECK(options_.family == "transformer-lm" || options_.family == "recurrent-lm",
           "language-model trainer: model family \"{}\" (expected transformer-lm or recurrent-lm)", options_.family);
  if (fresh) options_.model.vocab = options_.recurrent.vocab = data_.vocab.size();
  const models::TransformerLMConfig& config = options_.model;
  const bool transformer = options_.family == "transformer-lm";
  AK_CHECK(options_.steps >= 0 && options_.batch_size >= 1 && options_.log_every >= 1 && options_.save_every >= 0,
           "language-model trainer: steps {}, batch {}, log_every {}, save_every {} out of range", options_.steps,
           options_.batch_size, options_.log_every, options_.save_every);
  AK_CHECK(options_.clip >= 0 && std::isfinite(options_.clip), "language-model trainer: clip {} must be >= 0",
           options_.clip);
  AK_CHECK(io::file_format(options_.save_path) != io::FileFormat::Npy,
           "{}: a checkpoint is a bundle, and .npy holds one tensor: save it as .json, .safetensors or .npz",
           options_.save_path);
  AK_CHECK(options_.context >= 1, "language-model trainer: context {} (need >= 1)", options_.context);
  AK_CHECK(!transformer || config.positional != nn::PositionalKind::Learned || options_.context <= config.max_positions,
           "language-model trainer: a context of {} tokens is more than the model's {} learned positions",
           options_.context, config.max_positions);
  AK_CHECK(data_.train.size() > options_.context, "{}: {} tokens, but a context of {} needs at least {}",
           data_.train.name, data_.train.size(), options_.context, options_.context + 1);
  Rng init(options_.seed);
  if (transformer) {
    model_ = std::make_unique<models::TransformerLM>(config, init);
  } else {
    stream_batch(data_.train, options_.batch_size, options_.context, 0);  // refuses a file too short for the streams
    auto r = std::make_unique<models::RecurrentLM>(options_.recurrent, init);
    recurrent_ = r.get();
    model_ = std::move(r);
  }
  optimizer_ = make_optimizer(options_.optimizer, model_->named_parameters(), options_.schedule.lr);
  rng_ = Rng(options_.seed, 77);
  length_schedule_ = options_.schedule.kind == ScheduleKind::Cosine && options_.schedule.t_max == 0;
  if (length_schedule_) options_.schedule.t_max = std::max<int64_t>(options_.steps, 1);
  validate(options_.schedule);
}

void LmTrainer::save_checked(const std::string& path) const {
  for (const Parameter* p : model_->named_parameters()) {
    const float* x = p->value.data();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      AK_CHECK(std::isfinite(x[i]), "training: step {}: parameter {} is {} at [{}] (the last checkpoint is kept)",
               step_, p->name, shown(x[i]), i);
  }
  save(path);
  snapshots_.after_save(path, step_, options_.save_every, options_.steps, options_.keep_last,
                        [this](const std::string& p) { save(p); });
}

models::TeacherForcedBatch LmTrainer::next_batch() {
  if (!recurrent_) return random_windows(data_.train, options_.batch_size, options_.context, rng_);
  models::TeacherForcedBatch b = stream_batch(data_.train, options_.batch_size, options_.context, position_);
  if (position_ == 0) recurrent_->reset_state();  // the streams start again: so does the state
  position_ += b.T;
  if (position_ >= stream_length(data_.train, options_.batch_size)) position_ = 0;
  return b;
}

LmEvaluation LmTrainer::evaluate(const TextCorpus& corpus) {
  autograd::NoGrad no_grad;
  LmEvaluation ev;
  const int64_t windows = eval_window_count(corpus, options_.context);
  double nats = 0;
  for (int64_t w = 0; w < windows; w += kEvalRows) {
    const models::TeacherForcedBatch b = eval_windows(corpus, w, kEvalRows, options_.context);
    const models::ForwardResult r = model_->forward(b);
    const int64_t n = b.target_tokens();
    nats += double(r.loss.value()[0]) * double(n);  // the mean over the window's tokens, back to a sum
    ev.tokens += n;
  }
  ev.loss = ev.tokens ? nats / double(ev.tokens) : 0.0;
  ev.perplexity = std::exp(ev.loss);
  ev.bits_per_byte = corpus.predicted_bytes() > 0 ? nats / std::log(2.0) / double(corpus.predicted_bytes()) : 0.0;
  return ev;
}

LmSummary LmTrainer::run(const std::function<void(const std::string&)>& log) {
  LmSummary s;
  s.start_step = start_step_;
  s.checkpoint = options_.save_path;
  const std::vector<Parameter*> params = model_->named_parameters();
  for (const Parameter* p : params) s.parameters += p->value.numel();
  models::ForwardOptions fo;
  fo.rng = &rng_;
  int64_t window_tokens = 0, run_tokens = 0;
  float last_norm = 0;
  const auto run_start = std::chrono::steady_clock::now();
  auto t0 = run_start;
  auto stop = [&] { return options_.stop_requested && options_.stop_requested(); };
  while (step_ < options_.steps) {
    const double lr = learning_rate(options_.schedule, step_);
    optimizer_->set_lr(lr);
    optimizer_->zero_grad();
    const models::TeacherForcedBatch b = next_batch();
    if (recurrent_) recurrent_->set_carry(true);  // from the state the last batch ended in (truncated BPTT)
    const models::ForwardResult r = model_->forward(b, fo);
    if (recurrent_) recurrent_->set_carry(false);  // evaluations and decoding start from zeros
    const float loss = r.loss.value()[0];
    if (!std::isfinite(loss)) {
      autograd::clear_tape();
      fail("training: the loss is {} at step {} (the last checkpoint is kept)", shown(loss), step_ + 1);
    }
    autograd::backward(r.loss);
    last_norm = clip_step_gradients(params, options_.clip, step_ + 1);
    optimizer_->step();
    ++step_;
    window_loss_ += loss;
    ++window_steps_;
    window_tokens += b.target_tokens();
    run_tokens += b.target_tokens();
    if (step_ % options_.log_every == 0 || step_ == options_.steps) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      nlohmann::json j;
      j["step"] = step_;
      j["loss"] = window_loss_ / double(window_steps_);
      j["lr"] = lr;
      j["grad_norm"] = last_norm;
      j["tokens_per_s"] = secs > 0 ? double(window_tokens) / secs : 0.0;
      s.train_loss = window_loss_ / double(window_steps_);
      if (data_.valid.size() > 0) {
        const LmEvaluation ev = evaluate(data_.valid);
        j["valid_loss"] = ev.loss;
        j["valid_ppl"] = ev.perplexity;
        j["valid_bpb"] = ev.bits_per_byte;
      }
      const std::string line = j.dump();
      append_metrics(options_.metrics_path, line);
      if (log) log(line);
      if (step_ % options_.log_every == 0) window_loss_ = 0, window_steps_ = 0;
      window_tokens = 0;
      t0 = std::chrono::steady_clock::now();
    }
    if (options_.progress) {
      Progress p;
      p.step = step_, p.steps = options_.steps, p.start_step = start_step_, p.loss = loss, p.tokens = run_tokens;
      p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      options_.progress(p);
    }
    const bool stopping = step_ < options_.steps && stop();
    if (!options_.save_path.empty() && step_ < options_.steps &&
        (stopping || (options_.save_every > 0 && step_ % options_.save_every == 0)))
      save_checked(options_.save_path);
    if (stopping) {
      s.interrupted = true;
      s.step = step_;
      if (window_steps_ > 0) s.train_loss = window_loss_ / double(window_steps_);
      return s;
    }
  }
  if (!options_.save_path.empty()) save_checked(options_.save_path);
  s.step = step_;
  if (stop()) {
    s.interrupted = true;
    return s;
  }
  if (data_.valid.size() > 0) s.valid = evaluate(data_.valid);
  return s;
}

std::string LmTrainer::schedule_note() const {
  return length_schedule_ ? schedule_change_note(options_.schedule, checkpoint_run_steps_, step_) : std::string();
}

void LmTrainer::save(const std::string& path) const {
  io::Value v = models::checkpoint_head(*model_);
  io::Value t;
  t.set("optimizer", text_value(optimizer_kind_name(options_.optimizer)));
  t.set("lr", real_value(options_.schedule.lr));
  t.set("batch", text_value(std::to_string(options_.batch_size)));
  t.set("schedule", text_value(schedule_name(options_.schedule.kind)));
  t.set("warmup", text_value(std::to_string(options_.schedule.warmup_steps)));
  t.set("clip", real_value(options_.clip));
  t.set("seed", text_value(std::to_string(options_.seed)));
  t.set("steps", text_value(std::to_string(options_.steps)));
  t.set("context", text_value(std::to_string(options_.context)));
  t.set("src_tokenizer", text_value(models::tokenizer_name(data_.tokenizer)));
  t.set("tgt_tokenizer", text_value(models::tokenizer_name(data_.tokenizer)));
  if (!options_.command_options.empty()) {
    io::Value given;
    for (const auto& [name, value] : options_.command_options) given.set(name, text_value(value));
    t.set("options", std::move(given));
  }
  v.set("training", std::move(t));
  io::Value rng;
  rng.set("state", text_value(std::to_string(rng_.state().state)));
  rng.set("inc", text_value(std::to_string(rng_.state().inc)));
  v.set("rng", std::move(rng));
  models::add_vocabularies(v, data_.vocab, data_.vocab);
  if (data_.spm) models::add_spm_models(v, *data_.spm, nullptr);
  v.set("step", text_value(std::to_string(step_)));
  v.set("optimizer", optimizer_->state());
  if (recurrent_) {
    io::Value order;
    order.set("position", text_value(std::to_string(position_)));
    if (!recurrent_->state_h().empty()) order.set("h", recurrent_->state_h());
    if (!recurrent_->state_c().empty()) order.set("c", recurrent_->state_c());
    v.set("data_order", std::move(order));
  }
  io::Value window;
  window.set("loss", real_value(window_loss_));
  window.set("steps", text_value(std::to_string(window_steps_)));
  v.set("window", std::move(window));
  models::add_parameters(v, *model_);
  io::write_value_file(path, v);
}

std::optional<models::SpmModel> LmTrainer::stored_spm(const std::string& path) {
  const io::Value v = io::read_value_file(path);
  return models::read_checkpoint_head(v, path).src_spm;
}

std::unique_ptr<LmTrainer> LmTrainer::resume(const std::string& path, const LmTrainerOptions& options, TextData data) {
  const io::Value v = io::read_value_file(path);
  models::check_not_averaged(v, path);
  const models::CheckpointHead head = models::read_checkpoint_head(v, path);
  AK_CHECK(head.family == "transformer-lm" || head.family == "recurrent-lm",
           "{}: the checkpoint's model is a {} model, not a language model", path, head.family);
  LmTrainerOptions o = options;
  o.family = head.family;
  if (head.family == "transformer-lm") o.model = models::TransformerLMConfig::from_value(*head.config, path);
  else o.recurrent = models::RecurrentLMConfig::from_value(*head.config, path);
  models::check_vocab_sizes(*head.config, head.src_vocab, head.tgt_vocab, path);
  AK_CHECK(head.src_tokenizer == data.tokenizer, "{}: the model reads {} tokens, the data is split into {} tokens",
           path, models::tokenizer_name(head.src_tokenizer), models::tokenizer_name(data.tokenizer));
  if (head.src_spm && data.spm) models::check_same_spm(*head.src_spm, path, *data.spm, "the data's tokenizer");
  models::check_same_vocab(head.src_vocab, path, data.vocab, data.train.name, path + ": vocabulary");
  const models::Fields top(v, path);
  const models::Fields t(top.member("training"), path + ": training");
  o.optimizer = t.choice("optimizer", parse_optimizer_kind);
  o.batch_size = t.count("batch");
  o.seed = static_cast<uint64_t>(t.count("seed"));
  AK_CHECK(o.batch_size >= 1, "{}: \"batch\" must be >= 1", t.what());
  auto trainer = std::unique_ptr<LmTrainer>(new LmTrainer(o, std::move(data), false));
  models::load_parameters(*trainer->model_, v, path);
  models::check_checkpoint_complete(*trainer->model_, v, *head.config, path);
  try {
    trainer->optimizer_->load_state(top.member("optimizer"));
  } catch (const Error& e) {
    top.rethrow_where(e);
  }
  trainer->step_ = trainer->start_step_ = top.count("step");
  trainer->checkpoint_run_steps_ = t.has("steps") ? t.count("steps") : 0;
  const models::Fields r(top.member("rng"), path + ": rng");
  Rng::State st;
  st.state = r.u64("state");
  st.inc = r.u64("inc");
  trainer->rng_.set_state(st);
  if (trainer->recurrent_) {
    const models::Fields order(top.member("data_order"), path + ": data_order");
    const int64_t m = stream_length(trainer->data_.train, trainer->options_.batch_size);
    trainer->position_ = order.count("position");
    AK_CHECK(trainer->position_ < m, "{}: data_order: position {} is past the streams' {} tokens (another training "
             "file?)", path, trainer->position_, m);
    auto tensor = [&](const char* name) {
      const io::Value* t = top.member("data_order").find(name);
      AK_CHECK(!t || t->is_tensor(), "{}: data_order: \"{}\" must be a tensor", path, name);
      return t ? t->tensor() : Tensor();
    };
    try {
      trainer->recurrent_->set_state(tensor("h"), tensor("c"));
    } catch (const Error& e) {
      order.rethrow_where(e);
    }
  }
  const models::Fields window(top.member("window"), path + ": window");
  trainer->window_loss_ = window.real("loss");
  trainer->window_steps_ = window.count("steps");
  return trainer;
}

}  // namespace attnkit::train
