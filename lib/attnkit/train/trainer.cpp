#include "attnkit/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/train/clip.hpp"
#include "attnkit/train/metrics.hpp"
#include "attnkit/train/tasks.hpp"

namespace attnkit::train {

namespace {

// A non-finite value as the messages write it: NaN, inf, -inf (fmt would say "-nan").
std::string shown(float x) { return std::isnan(x) ? "NaN" : fmt::format("{}", x); }

// One whole line or nothing: a write that fails part way is cut back to the file's earlier length, so that the
// file never ends in half a line.
void append_line(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  AK_CHECK(fd >= 0, "{}: cannot open for appending ({})", path, std::strerror(errno));
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0;
  const std::string text = line + '\n';
  size_t done = 0;
  int error = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error != 0 && done > 0 && sized && S_ISREG(st.st_mode)) (void)::ftruncate(fd, st.st_size);
  ::close(fd);
  AK_CHECK(error == 0, "{}: write failed ({})", path, std::strerror(error));
}

}  // namespace

std::string TrainSummary::to_json() const {
  nlohmann::json j;
  j["step"] = step;
  j["start_step"] = start_step;
  if (step > start_step) j["train_loss"] = train_loss;  // no step taken: no training loss
  if (valid) {
    j["valid_loss"] = valid->loss;
    j["token_accuracy"] = valid->token_accuracy;
    j["exact_match"] = valid->exact_match;
    j["valid_examples"] = valid->examples;
  }
  j["parameters"] = parameters;
  j["checkpoint"] = checkpoint;
  if (processes > 1) {
    j["processes"] = processes;
    j["seconds"] = seconds;
    j["reduce_seconds"] = reduce_seconds;
  }
  return j.dump();
}

Trainer::Trainer(const TrainerOptions& options, TrainingData&& data, const models::Seq2SeqConfig& model_config,
                 const models::TransformerConfig& transformer_config)
    : options_(options), data_(std::move(data)) {
  AK_CHECK(options_.family == "recurrent" || options_.family == "transformer",
           "trainer: model family \"{}\" (expected recurrent or transformer)", options_.family);
  AK_CHECK(options_.steps >= 0 && options_.steps <= kMaxSteps, "trainer: steps {} must be from 0 to {}", options_.steps,
           kMaxSteps);
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
  if (options_.right_left) {
    reverse_targets(train_enc_);
    reverse_targets(valid_enc_);
  }
  Rng rng(options_.seed);
  if (options_.family == "transformer") model_ = std::make_unique<models::Transformer>(options_.transformer, rng);
  else model_ = std::make_unique<models::Seq2Seq>(options_.model, rng);
  optimizer_ = make_optimizer(options_.optimizer, model_->named_parameters(), options_.schedule.lr);
  AK_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, "trainer: dropout {} must be in [0, 1)",
           options_.dropout);
  AK_CHECK(options_.teacher_forcing >= 0.0f && options_.teacher_forcing <= 1.0f,
           "trainer: teacher forcing ratio {} must be in [0, 1]", options_.teacher_forcing);
  rng_ = Rng(options_.seed, 55);  // its own stream: the initialisation's draws stay as they were
  comm_ = options_.communicator ? options_.communicator : &single_process();
  const int64_t shards = options_.grad_shards > 0 ? options_.grad_shards : comm_->size();
  AK_CHECK(options_.batch_size % shards == 0,
           "trainer: the batch size {} is not a multiple of the {} gradient shards (one per process unless given)",
           options_.batch_size, shards);
  const bool parted = data_.part_count > 0;  // each shard's rows from its own part of the training file
  if (shards > 1 || comm_->size() > 1 || parted)
    sharded_ = std::make_unique<ShardedStep>(*comm_, shards, options_.deterministic_reduce, options_.seed);
  if (parted) {
    AK_CHECK(data_.part_count == shards && int64_t(data_.parts.size()) * comm_->size() == shards,
             "trainer: {}: read in {} parts ({} here) for {} gradient shards over {} processes", data_.train.name,
             data_.part_count, data_.parts.size(), shards, comm_->size());
    std::vector<EncodedCorpus> parts;
    std::vector<uint64_t> mine;
    for (const Corpus& c : data_.parts) {
      parts.push_back(encode(c, data_.src_vocab, data_.tgt_vocab));
      if (options_.right_left) reverse_targets(parts.back());
      mine.push_back(uint64_t(c.size()));
    }
    std::vector<uint64_t> all(static_cast<size_t>(shards));
    comm_->allgather(mine.data(), int64_t(mine.size()), all.data());
    shard_batches_ = std::make_unique<ShardBatches>(std::move(parts), data_.first_part, shards,
                                                    std::vector<int64_t>(all.begin(), all.end()),
                                                    options_.batch_size, options_.seed, data_.train.name,
                                                    options_.maxi_batch);
    data_.parts.clear();  // encoded in shard_batches_: the text is not needed again
  } else {
    BatcherOptions bo;
    bo.batch_size = options_.batch_size;
    bo.seed = options_.seed;
    bo.maxi_batch = options_.maxi_batch;
    batcher_ = std::make_unique<Batcher>(train_enc_, bo);
  }
  if (options_.epochs > 0) {
    const int64_t per_epoch = parted ? shard_batches_->steps_per_epoch() : batcher_->batches_per_epoch();
    AK_CHECK(options_.epochs <= kMaxSteps / per_epoch,
             "trainer: {} epochs of {} batches is more than {} steps: at most {} epochs", options_.epochs, per_epoch,
             kMaxSteps, kMaxSteps / per_epoch);
    options_.steps = options_.epochs * per_epoch;
  }
  length_schedule_ = options_.schedule.kind == ScheduleKind::Cosine && options_.schedule.t_max == 0;
  if (length_schedule_) options_.schedule.t_max = std::max<int64_t>(options_.steps, 1);
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

void Trainer::save_checked(const std::string& path, const std::string& when) const {
  if (sharded_) shard_states_ = sharded_->rng_states();
  if (shard_batches_) {  // every shard's data order, 4 numbers each, gathered in shard order
    std::vector<uint64_t> mine;
    for (const BatcherState& st : shard_batches_->states())
      mine.insert(mine.end(), {st.seed, uint64_t(st.epoch), uint64_t(st.position), uint64_t(st.examples)});
    std::vector<uint64_t> all(static_cast<size_t>(4 * shard_batches_->shards()));
    comm_->allgather(mine.data(), int64_t(mine.size()), all.data());
    shard_orders_.assign(size_t(shard_batches_->shards()), BatcherState{});
    for (size_t s = 0; s < shard_orders_.size(); ++s)
      shard_orders_[s] = {all[4 * s], int64_t(all[4 * s + 1]), int64_t(all[4 * s + 2]), int64_t(all[4 * s + 3])};
  }
  if (comm_->rank() != 0) return;
  for (const Parameter* p : model_->named_parameters()) {
    const float* x = p->value.data();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      AK_CHECK(std::isfinite(x[i]), "training: {}: parameter {} is {} at [{}] (the last checkpoint is kept)", when,
               p->name, shown(x[i]), i);
  }
  save(path);
  snapshots_.after_save(path, step_, options_.save_every, options_.steps, options_.keep_last,
                        [this](const std::string& p) { save(p); });
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
  for (const Parameter* p : model_->named_parameters()) s.parameters += p->value.numel();
  const std::vector<Parameter*> params = model_->named_parameters();
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
  const bool lead = comm_->rank() == 0;  // evaluates and writes
  auto timed = [&](TrainSummary& summary) {
    summary.processes = comm_->size();
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    if (sharded_) summary.reduce_seconds = sharded_->reduce_seconds();
  };
  auto stop = [&] {
    const bool mine = options_.stop_requested && options_.stop_requested();
    return comm_->size() > 1 ? comm_->any(mine) : mine;
  };
  while (step_ < options_.steps) {
    const double lr = learning_rate(options_.schedule, step_);
    optimizer_->set_lr(lr);
    optimizer_->zero_grad();
    Batch b;
    float loss = 0;
    int64_t batch_tokens = 0, epoch = 0;
    if (shard_batches_) {
      loss = sharded_->forward_backward(*model_, shard_batches_->next(), lo);
      batch_tokens = sharded_->last_tokens();
      epoch = shard_batches_->epoch_of(step_ + 1);
    } else if (sharded_) {
      b = batcher_->next();
      loss = sharded_->forward_backward(*model_, b, train_enc_, lo);
    } else {
      b = batcher_->next();
      auto r = model_->forward(b, lo);
      loss = r.loss.value()[0];
      if (std::isfinite(loss)) autograd::backward(r.loss);
      else autograd::clear_tape();
    }
    if (!shard_batches_) batch_tokens = b.target_tokens(), epoch = b.epoch;
    if (!std::isfinite(loss))
      fail("training: the loss is {} at step {} (the last checkpoint is kept)", shown(loss), step_ + 1);
    last_norm = clip_step_gradients(params, options_.clip, step_ + 1);
    optimizer_->step();
    ++step_;
    window_loss_ += loss;
    ++window_steps_;
    window_tokens += batch_tokens;
    run_tokens += batch_tokens;
    if (step_ % options_.log_every == 0 || step_ == options_.steps) {
      const auto t1 = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(t1 - t0).count();
      nlohmann::json j;
      j["step"] = step_;
      j["epoch"] = epoch;
      j["loss"] = window_loss_ / double(window_steps_);
      j["lr"] = lr;
      j["grad_norm"] = last_norm;
      j["tokens_per_s"] = secs > 0 ? double(window_tokens) / secs : 0.0;
      s.train_loss = window_loss_ / double(window_steps_);
      if (valid_enc_.size() > 0 && lead) {
        const Evaluation ev = evaluate(data_.valid);
        j["valid_loss"] = ev.loss;
        j["token_accuracy"] = ev.token_accuracy;
        j["exact_match"] = ev.exact_match;
      }
      if (lead) emit(j.dump());
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
      timed(s);
      return s;
    }
  }
  if (!options_.save_path.empty()) save_checked(options_.save_path, fmt::format("step {}", step_));
  s.step = step_;
  if (stop()) {  // asked to stop during the last step: saved, without the final evaluation
    s.interrupted = true;
    timed(s);
    return s;
  }
  if (valid_enc_.size() > 0 && lead) s.valid = evaluate(data_.valid);
  timed(s);
  return s;
}

}  // namespace attnkit::train
