#include "attnkit/train/trainer.hpp"

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
#include "attnkit/train/metrics.hpp"
#include "attnkit/train/tasks.hpp"

namespace attnkit::train {

namespace {

using models::real_value;
using models::text_value;

// A non-finite value as the messages write it: NaN, inf, -inf (fmt would say "-nan").
std::string shown(float x) { return std::isnan(x) ? "NaN" : fmt::format("{}", x); }

std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, std::vector<nn::Parameter*> params, double lr) {
  switch (kind) {
    case OptimizerKind::Sgd: {
      SgdOptions o;
      o.lr = lr;
      return std::make_unique<Sgd>(std::move(params), o);
    }
    case OptimizerKind::Adam: {
      AdamOptions o;
      o.lr = lr;
      return std::make_unique<Adam>(std::move(params), o);
    }
    case OptimizerKind::AdamW: {
      AdamWOptions o;
      o.lr = lr;
      return std::make_unique<AdamW>(std::move(params), o);
    }
  }
  fail("optimizer: unknown kind");
}

// Numbers in the tensors of a bundle, nested ones included.
int64_t numbers_in(const io::Value& v) {
  if (v.is_tensor()) return v.tensor().numel();
  int64_t n = 0;
  if (v.is_bundle())
    for (const auto& m : v.members()) n += numbers_in(m.second);
  return n;
}

void append_line(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  std::ofstream f(path, std::ios::app | std::ios::binary);
  AK_CHECK(f.good(), "{}: cannot open for appending", path);
  f << line << '\n';
  f.flush();
  AK_CHECK(f.good(), "{}: write failed", path);
}

}  // namespace

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::Sgd;
  if (name == "adam") return OptimizerKind::Adam;
  if (name == "adamw") return OptimizerKind::AdamW;
  fail("unknown optimizer \"{}\" (expected sgd, adam or adamw)", name);
}

std::string_view optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Adam: return "adam";
    case OptimizerKind::AdamW: return "adamw";
  }
  return "?";
}

namespace {
TrainingData load_data(const DataSpec& spec) {
  TrainingData d;
  if (spec.task) {
    TaskData t = make_task(*spec.task);
    d.train = std::move(t.train);
    d.valid = std::move(t.valid);
    d.src_vocab = std::move(t.src_vocab);
    d.tgt_vocab = std::move(t.tgt_vocab);
    return d;
  }
  AK_CHECK(!spec.train_path.empty(), "training data: no task and no training file");
  d.train = read_corpus(spec.train_path, spec.data);
  if (!spec.valid_path.empty()) d.valid = read_corpus(spec.valid_path, spec.data);
  d.src_vocab = build_vocab(d.train, Side::Source, default_order(d.train.src_tokenizer));
  d.tgt_vocab = build_vocab(d.train, Side::Target, default_order(d.train.tgt_tokenizer));
  return d;
}
}  // namespace

TrainingData load_training_data(const DataSpec& spec) {
  TrainingData d = load_data(spec);
  if (!spec.vocab_path.empty()) {
    VocabPair v = read_vocab_pair(spec.vocab_path);
    d.src_vocab = std::move(v.source);
    d.tgt_vocab = std::move(v.target);
    d.vocab_source = spec.vocab_path;
  }
  return d;
}

std::string TrainSummary::to_json() const {
  nlohmann::json j;
  j["step"] = step;
  j["start_step"] = start_step;
  j["train_loss"] = train_loss;
  if (valid) {
    j["valid_loss"] = valid->loss;
    j["token_accuracy"] = valid->token_accuracy;
    j["exact_match"] = valid->exact_match;
    j["valid_examples"] = valid->examples;
  }
  j["parameters"] = parameters;
  j["checkpoint"] = checkpoint;
  return j.dump();
}

Trainer::Trainer(const TrainerOptions& options, TrainingData&& data, const models::Seq2SeqConfig& model_config,
                 const models::TransformerConfig& transformer_config)
    : options_(options), data_(std::move(data)) {
  AK_CHECK(options_.family == "recurrent" || options_.family == "transformer",
           "trainer: model family \"{}\" (expected recurrent or transformer)", options_.family);
  AK_CHECK(options_.steps >= 0, "trainer: steps {} must be >= 0", options_.steps);
  AK_CHECK(options_.batch_size >= 1, "trainer: batch size {} must be >= 1", options_.batch_size);
  AK_CHECK(options_.log_every >= 1, "trainer: log_every {} must be >= 1", options_.log_every);
  AK_CHECK(options_.clip >= 0 && std::isfinite(options_.clip), "trainer: clip {} must be >= 0", options_.clip);
  AK_CHECK(options_.epochs >= 0 && options_.save_every >= 0, "trainer: epochs {} and save_every {} must be >= 0",
           options_.epochs, options_.save_every);
  AK_CHECK(io::file_format(options_.save_path) != io::FileFormat::Npy,
           "{}: a checkpoint is a bundle, and .npy holds one tensor: save it as .json, .safetensors or .npz",
           options_.save_path);
  options_.model = model_config;
  options_.transformer = transformer_config;
  train_enc_ = encode(data_.train, data_.src_vocab, data_.tgt_vocab);
  valid_enc_ = encode(data_.valid, data_.src_vocab, data_.tgt_vocab);
  Rng rng(options_.seed);
  if (options_.family == "transformer") model_ = std::make_unique<models::Transformer>(options_.transformer, rng);
  else model_ = std::make_unique<models::Seq2Seq>(options_.model, rng);
  optimizer_ = make_optimizer(options_.optimizer, model_->named_parameters(), options_.schedule.lr);
  AK_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, "trainer: dropout {} must be in [0, 1)",
           options_.dropout);
  AK_CHECK(options_.teacher_forcing >= 0.0f && options_.teacher_forcing <= 1.0f,
           "trainer: teacher forcing ratio {} must be in [0, 1]", options_.teacher_forcing);
  rng_ = Rng(options_.seed, 55);  // its own stream: the initialisation's draws stay as they were
  BatcherOptions bo;
  bo.batch_size = options_.batch_size;
  bo.seed = options_.seed;
  batcher_ = std::make_unique<Batcher>(train_enc_, bo);
  if (options_.epochs > 0) {
    AK_CHECK(options_.epochs <= (int64_t{1} << 40) / batcher_->batches_per_epoch(), "trainer: {} epochs is too many",
             options_.epochs);
    options_.steps = options_.epochs * batcher_->batches_per_epoch();
  }
  if (options_.schedule.kind == ScheduleKind::Cosine && options_.schedule.t_max == 0)
    options_.schedule.t_max = std::max<int64_t>(options_.steps, 1);
  validate(options_.schedule);
}

Trainer::Trainer(const TrainerOptions& options, TrainingData data)
    : Trainer(options, std::move(data), [&] {
        models::Seq2SeqConfig c = options.model;
        c.src_vocab = data.src_vocab.size();
        c.tgt_vocab = data.tgt_vocab.size();
        return c;
      }(), [&] {
        models::TransformerConfig c = options.transformer;
        c.src_vocab = data.src_vocab.size();
        c.tgt_vocab = data.tgt_vocab.size();
        return c;
      }()) {}

void Trainer::save(const std::string& path) const {
  io::Value v = models::checkpoint_head(*model_);
  io::Value t;
  t.set("optimizer", text_value(optimizer_kind_name(options_.optimizer)));
  t.set("lr", real_value(options_.schedule.lr));
  t.set("batch", text_value(std::to_string(options_.batch_size)));
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
  v.set("training", std::move(t));
  io::Value rng;
  rng.set("state", text_value(std::to_string(rng_.state().state)));
  rng.set("inc", text_value(std::to_string(rng_.state().inc)));
  v.set("rng", std::move(rng));
  models::add_vocabularies(v, data_.src_vocab, data_.tgt_vocab);
  v.set("step", text_value(std::to_string(step_)));
  v.set("optimizer", optimizer_->state());
  v.set("data_order", batcher_->state_value());
  io::Value window;
  window.set("loss", real_value(window_loss_));
  window.set("steps", text_value(std::to_string(window_steps_)));
  v.set("window", std::move(window));
  models::add_parameters(v, *model_);
  io::write_value_file(path, v);  // JSON, or by extension .safetensors / .npz (io/tensor_file.hpp, Documents)
}

void Trainer::save_checked(const std::string& path, const std::string& when) const {
  for (const nn::Parameter* p : model_->named_parameters()) {
    const float* x = p->value.data();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      AK_CHECK(std::isfinite(x[i]), "training: {}: parameter {} is {} at [{}] (the last checkpoint is kept)", when,
               p->name, shown(x[i]), i);
  }
  save(path);
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
    auto describe = [](const models::Seq2SeqConfig& c) {
      return fmt::format("{} with attention {}{}, embed {}, hidden {}, {} layer(s){}",
                         models::cell_kind_name(c.cell), models::attention_kind_name(c.attention),
                         c.style == models::AttentionStyle::Bahdanau ? " (bahdanau)" : "", c.embed, c.hidden, c.layers,
                         c.bidirectional ? ", bidirectional" : "");
    };
    AK_CHECK(w.cell == config.cell && w.attention == config.attention && w.style == config.style &&
                 w.embed == config.embed &&
                 w.hidden == config.hidden && w.layers == config.layers && w.bidirectional == config.bidirectional,
             "{}: the checkpoint's model is {}; it cannot continue as {}", path, describe(config), describe(w));
  }
  const models::Fields t(top.member("training"), path + ": training");
  TrainerOptions o = options;
  o.optimizer = t.choice("optimizer", parse_optimizer_kind);
  o.batch_size = t.count("batch");
  o.seed = static_cast<uint64_t>(t.count("seed"));
  AK_CHECK(o.batch_size >= 1, "{}: \"batch\" must be >= 1", t.what());
  // Checkpoints from before dropout and scheduled sampling existed have neither (0 and 1 then).
  if (!o.dropout_given && t.has("dropout")) o.dropout = float(t.real("dropout"));
  if (!o.teacher_forcing_given && t.has("teacher_forcing")) o.teacher_forcing = float(t.real("teacher_forcing"));
  o.family = head.family;
  auto trainer = std::unique_ptr<Trainer>(new Trainer(o, std::move(data), config, tconfig));
  models::load_parameters(*trainer->model_, v, path);
  try {
    trainer->optimizer_->load_state(top.member("optimizer"));
  } catch (const Error& e) {
    top.rethrow_where(e);
  }
  trainer->batcher_->load_state(top.member("data_order"), path + ": data_order");
  trainer->step_ = trainer->start_step_ = top.count("step");
  if (top.has("rng")) {
    const models::Fields r(top.member("rng"), path + ": rng");
    Rng::State st;
    st.state = r.u64("state");
    st.inc = r.u64("inc");
    trainer->rng_.set_state(st);
  }
  const models::Fields window(top.member("window"), path + ": window");
  trainer->window_loss_ = window.real("loss");
  trainer->window_steps_ = window.count("steps");
  return trainer;
}

Evaluation Trainer::evaluate(const Corpus& corpus) {
  autograd::NoGrad no_grad;
  const EncodedCorpus enc = &corpus == &data_.valid ? valid_enc_ : encode(corpus, data_.src_vocab, data_.tgt_vocab);
  Evaluation ev;
  ev.examples = enc.size();
  if (enc.size() == 0) return ev;
  int64_t longest = 0;
  for (const auto& t : enc.tgt) longest = std::max<int64_t>(longest, static_cast<int64_t>(t.size()));
  const int64_t max_len = options_.max_decode_len > 0 ? options_.max_decode_len : longest + 5;
  double loss_sum = 0;
  int64_t tokens = 0, exact = 0;
  TokenAccuracy acc;
  models::LossOptions lo;
  lo.label_smoothing = options_.label_smoothing;
  for (const Batch& b : batches_in_order(enc, options_.batch_size, false)) {
    auto r = model_->forward(b, lo);
    const int64_t n_tok = b.target_tokens();
    loss_sum += double(r.loss.value()[0]) * double(n_tok);
    tokens += n_tok;
    const Tensor& logits = r.logits.value();  // [N, T, V]
    const int64_t V = logits.dim(2);
    std::vector<int64_t> pred(static_cast<size_t>(b.N * b.T));
    for (int64_t i = 0; i < b.N * b.T; ++i) {
      const float* row = logits.data() + i * V;
      pred[size_t(i)] = std::max_element(row, row + V) - row;
    }
    acc.add(pred, b.tgt_out, b.N, b.T, Vocab::kPad);
    const auto decoded = model_->greedy(b, max_len);
    for (int64_t n = 0; n < b.N; ++n) exact += decoded[size_t(n)] == enc.tgt[size_t(b.index[size_t(n)])];
  }
  ev.loss = tokens ? loss_sum / double(tokens) : 0.0;
  ev.token_accuracy = acc.accuracy();
  ev.exact_match = double(exact) / double(enc.size());
  return ev;
}

TrainSummary Trainer::run(const std::function<void(const std::string&)>& log) {
  TrainSummary s;
  s.start_step = start_step_;
  s.checkpoint = options_.save_path;
  for (const nn::Parameter* p : model_->named_parameters()) s.parameters += p->value.numel();
  const std::vector<nn::Parameter*> params = model_->named_parameters();
  models::ForwardOptions lo;
  lo.label_smoothing = options_.label_smoothing;
  if (options_.family == "recurrent") {  // the Transformer's dropout is its config's
    lo.dropout = options_.dropout;
    lo.teacher_forcing = options_.teacher_forcing;
  }
  lo.rng = &rng_;
  int64_t window_tokens = 0, run_tokens = 0;
  float last_norm = 0;
  const auto run_start = std::chrono::steady_clock::now();
  auto t0 = run_start;
  auto emit = [&](const std::string& line) {
    append_line(options_.metrics_path, line);
    if (log) log(line);
  };
  auto stop = [&] { return options_.stop_requested && options_.stop_requested(); };
  while (step_ < options_.steps) {
    const double lr = learning_rate(options_.schedule, step_);
    optimizer_->set_lr(lr);
    optimizer_->zero_grad();
    const Batch b = batcher_->next();
    auto r = model_->forward(b, lo);
    const float loss = r.loss.value()[0];
    if (!std::isfinite(loss)) {
      autograd::clear_tape();
      fail("training: the loss is {} at step {} (the last checkpoint is kept)", shown(loss), step_ + 1);
    }
    autograd::backward(r.loss);
    try {
      ClipOptions co;
      if (options_.clip > 0) {
        co.max_norm = options_.clip;
        last_norm = clip_grad_norm(params, co);
      } else {
        last_norm = grad_norm(params);
        AK_CHECK(std::isfinite(last_norm), "the gradient norm is {}", shown(last_norm));
      }
    } catch (const Error& e) {
      fail("training: step {}: {} (the last checkpoint is kept)", step_ + 1, e.what());
    }
    optimizer_->step();
    ++step_;
    window_loss_ += loss;
    ++window_steps_;
    window_tokens += b.target_tokens();
    run_tokens += b.target_tokens();
    if (step_ % options_.log_every == 0 || step_ == options_.steps) {
      const auto t1 = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(t1 - t0).count();
      nlohmann::json j;
      j["step"] = step_;
      j["epoch"] = b.epoch;
      j["loss"] = window_loss_ / double(window_steps_);
      j["lr"] = lr;
      j["grad_norm"] = last_norm;
      j["tokens_per_s"] = secs > 0 ? double(window_tokens) / secs : 0.0;
      s.train_loss = window_loss_ / double(window_steps_);
      if (valid_enc_.size() > 0) {
        const Evaluation ev = evaluate(data_.valid);
        j["valid_loss"] = ev.loss;
        j["token_accuracy"] = ev.token_accuracy;
        j["exact_match"] = ev.exact_match;
      }
      emit(j.dump());
      if (step_ % options_.log_every == 0) {  // a window ends at multiples of log_every only
        window_loss_ = 0;
        window_steps_ = 0;
      }
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
    // every save_every steps, and when stopping early (the end of the run saves below)
    if (!options_.save_path.empty() && step_ < options_.steps &&
        (stopping || (options_.save_every > 0 && step_ % options_.save_every == 0)))
      save_checked(options_.save_path, fmt::format("step {}", step_));
    if (stopping) {
      s.interrupted = true;
      s.step = step_;
      if (window_steps_ > 0) s.train_loss = window_loss_ / double(window_steps_);
      return s;
    }
  }
  if (!options_.save_path.empty()) save_checked(options_.save_path, fmt::format("step {}", step_));
  s.step = step_;
  if (stop()) {  // asked to stop during the last step: saved, without the final evaluation
    s.interrupted = true;
    return s;
  }
  if (valid_enc_.size() > 0) s.valid = evaluate(data_.valid);
  return s;
}

}  // namespace attnkit::train
