// train/data_parallel: a batch cut into gradient shards gives the whole batch's loss and gradient (each shard's
// backward weighted by its share of the target tokens, the shards summed in order), an empty shard adds
// nothing, and a trainer with shards resumes bit for bit (every shard's dropout stream saved).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/autograd/var.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/data_parallel.hpp"
#include "attnkit/train/trainer.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

// lengths 1 to 7, rows of unequal length: the shards' token counts differ
train::TrainingData reverse_data() { return test::tiny_reverse_data(6, 1, 7, 8, 4); }

std::vector<std::vector<float>> grads_of(const std::vector<Parameter*>& params) {
  std::vector<std::vector<float>> out;
  for (const Parameter* p : params) out.emplace_back(p->grad.data(), p->grad.data() + p->grad.numel());
  return out;
}

}  // namespace

TEST_CASE("data parallel: shards give the whole batch's loss and gradient") {
  set_num_threads(1);
  const train::TrainingData data = reverse_data();
  const train::EncodedCorpus enc = train::encode(data.train, data.src_vocab, data.tgt_vocab);
  models::Seq2SeqConfig c;
  c.cell = nn::CellKind::Lstm;
  c.attention = models::AttentionKind::Dot;
  c.embed = 6;
  c.hidden = 10;
  c.src_vocab = data.src_vocab.size();
  c.tgt_vocab = data.tgt_vocab.size();
  Rng init(7);
  models::Seq2Seq model(c, init);
  const std::vector<Parameter*> params = model.named_parameters();
  const train::Batch batch = train::make_batch(enc, {0, 1, 2, 3, 4, 5, 6, 7}, false);

  // the whole batch at once
  for (Parameter* p : params) p->zero_grad();
  auto r = model.forward(batch);
  const float whole_loss = r.loss.value()[0];
  autograd::backward(r.loss);
  const auto whole = grads_of(params);

  // the same in 2 shards of 4 rows (unequal token counts: a plain mean of the shard means would differ)
  const train::Batch a = train::make_batch(enc, {0, 1, 2, 3}, false), b = train::make_batch(enc, {4, 5, 6, 7}, false);
  REQUIRE(a.target_tokens() != b.target_tokens());
  train::ShardedStep sharded(train::single_process(), 2, true, 1);
  const float loss = sharded.forward_backward(model, batch, enc, {});
  CHECK(loss == doctest::Approx(whole_loss).epsilon(1e-6));
  const auto summed = grads_of(params);
  double largest = 0, off = 0;
  for (size_t k = 0; k < whole.size(); ++k)
    for (size_t i = 0; i < whole[k].size(); ++i) {
      largest = std::max(largest, double(std::fabs(whole[k][i])));
      off = std::max(off, double(std::fabs(whole[k][i] - summed[k][i])));
    }
  CHECK(largest > 1e-3);
  CHECK(off <= 1e-5 * largest);

  // bit for bit: shard a's gradient weighted by its token share, plus shard b's, added in that order
  std::vector<std::vector<float>> parts;
  for (const train::Batch* shard : {&a, &b}) {
    for (Parameter* p : params) p->zero_grad();
    auto rs = model.forward(*shard);
    Tensor seed(rs.loss.value().shape());
    seed.values()[0] = float(double(shard->target_tokens()) / double(batch.target_tokens()));
    autograd::backward(rs.loss, &seed);
    for (const auto& g : grads_of(params)) parts.push_back(g);
  }
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<float> want = parts[k];
    for (size_t i = 0; i < want.size(); ++i) want[i] += parts[params.size() + k][i];
    CAPTURE(params[k]->name);
    CHECK(std::memcmp(want.data(), summed[k].data(), sizeof(float) * want.size()) == 0);
  }

  // one row in 2 shards: shard 0 is empty and adds nothing; the result is the plain step's, bit for bit
  const train::Batch one = train::make_batch(enc, {5}, false);
  for (Parameter* p : params) p->zero_grad();
  auto r1 = model.forward(one);
  const float one_loss = r1.loss.value()[0];
  autograd::backward(r1.loss);
  const auto plain = grads_of(params);
  CHECK(sharded.forward_backward(model, one, enc, {}) == one_loss);
  CHECK(grads_of(params) == plain);

  CHECK(test::error_of([] { train::ShardedStep(train::single_process(), 0, false, 1); })
            .find("0 gradient shards: must be a positive multiple of the 1 processes") != std::string::npos);
  set_num_threads(0);
}

TEST_CASE("data parallel: a trainer with shards resumes bit for bit, and refuses a batch they do not divide") {
  set_num_threads(1);
  const std::string dir = std::filesystem::temp_directory_path().string() + "/attnkit_dp_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto options = [&](int64_t steps, const std::string& save) {
    train::TrainerOptions o =
        test::tiny_trainer_options(nn::CellKind::Gru, models::AttentionKind::General, 6, 8, steps, 3, save);
    o.dropout = 0.2f;  // every shard's stream matters
    o.grad_shards = 2;
    return o;
  };
  train::Trainer whole(options(12, dir + "/whole.json"), reverse_data());
  whole.run();
  train::Trainer first(options(5, dir + "/half.json"), reverse_data());
  first.run();
  train::TrainerOptions rest = options(12, dir + "/rest.json");
  rest.grad_shards = 0;  // the checkpoint's
  auto resumed = train::Trainer::resume(dir + "/half.json", rest, reverse_data());
  CHECK(resumed->grad_shards() == 2);
  CHECK(resumed->checkpoint_grad_shards() == 2);
  resumed->run();
  auto pa = whole.model().named_parameters(), pb = resumed->model().named_parameters();
  for (size_t k = 0; k < pa.size(); ++k) {
    CAPTURE(pa[k]->name);
    CHECK(std::memcmp(pa[k]->value.data(), pb[k]->value.data(), sizeof(float) * size_t(pa[k]->value.numel())) == 0);
  }
  // shard 1's stream is part of the state: a checkpoint without it is refused, naming it
  std::ifstream in(dir + "/half.json");
  nlohmann::json half = nlohmann::json::parse(in);
  REQUIRE(half.contains("shard_rngs"));
  CHECK(half["training"]["grad_shards"] == "2");
  half.erase("shard_rngs");
  std::ofstream(dir + "/damaged.json") << half.dump();
  CHECK(test::error_of([&] { train::Trainer::resume(dir + "/damaged.json", rest, reverse_data()); })
            .find("shard_rngs") != std::string::npos);

  train::TrainerOptions odd = options(12, dir + "/odd.json");
  odd.batch_size = 9;
  CHECK(test::error_of([&] { train::Trainer(odd, reverse_data()); })
            .find("the batch size 9 is not a multiple of the 2 gradient shards") != std::string::npos);
  std::filesystem::remove_all(dir);
  set_num_threads(0);
}
