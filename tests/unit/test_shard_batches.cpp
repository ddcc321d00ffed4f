// train/shard_batches: each gradient shard draws its batches from its own part of the training file, the same
// whichever process holds it; every shard's data order goes into the checkpoint and a resumed trainer goes on
// bit for bit; an epoch is the largest part's pass.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/shard_batches.hpp"
#include "attnkit/train/trainer.hpp"
#include "test_util.hpp"

using namespace attnkit;
using namespace attnkit::train;

namespace {

// A part of n examples, example i being the one-token sequences {i + 4} -> {i + 4}.
EncodedCorpus part_of(int64_t n) {
  EncodedCorpus c;
  for (int64_t i = 0; i < n; ++i) c.src.push_back({i + 4}), c.tgt.push_back({i + 4});
  return c;
}

std::vector<EncodedCorpus> parts_of(const std::vector<int64_t>& sizes, size_t from, size_t to) {
  std::vector<EncodedCorpus> out;
  for (size_t s = from; s < to; ++s) out.push_back(part_of(sizes[s]));
  return out;
}

}  // namespace

TEST_CASE("shard batches: a shard's batches depend on its part, the seed and the shard, not on the process") {
  const std::vector<int64_t> sizes = {7, 5, 6, 9};
  ShardBatches all(parts_of(sizes, 0, 4), 0, 4, sizes, 8, 11, "t.tsv");  // one process, 4 shards
  ShardBatches upper(parts_of(sizes, 2, 4), 2, 4, sizes, 8, 11, "t.tsv");  // shards 2 and 3 of 2 processes
  CHECK(all.steps_per_epoch() == 5);  // the largest part, 9 examples, 2 a step
  CHECK(all.epoch_of(5) == 0);
  CHECK(all.epoch_of(6) == 1);
  std::vector<std::vector<int64_t>> seen(4);
  for (int step = 1; step <= 12; ++step) {
    const std::vector<Batch> a = all.next(), u = upper.next();
    REQUIRE(a.size() == 4);
    REQUIRE(u.size() == 2);
    for (size_t c = 0; c < 2; ++c) {
      CHECK(a[2 + c].index == u[c].index);
      CHECK(a[2 + c].epoch == u[c].epoch);
    }
    for (size_t s = 0; s < 4; ++s) {
      CHECK(a[s].N <= 2);
      for (int64_t i : a[s].index) {
        CHECK(i < sizes[s]);  // rows of the shard's own part
        if (step <= 3) seen[s].push_back(i);
      }
    }
  }
  // every part passes once in ceil(size / 2) steps, each example once, in an order of its own
  for (size_t s = 0; s < 4; ++s) {
    std::vector<int64_t> first(seen[s].begin(), seen[s].begin() + std::min<int64_t>(sizes[s], int64_t(seen[s].size())));
    std::sort(first.begin(), first.end());
    CHECK(std::adjacent_find(first.begin(), first.end()) == first.end());
  }
  ShardBatches other_seed(parts_of(sizes, 0, 4), 0, 4, sizes, 8, 12, "t.tsv");
  ShardBatches again(parts_of(sizes, 0, 4), 0, 4, sizes, 8, 11, "t.tsv");
  bool differs = false;
  for (int step = 0; step < 4; ++step) {
    const std::vector<Batch> x = other_seed.next(), y = again.next();
    for (size_t s = 0; s < 4; ++s) differs = differs || x[s].index != y[s].index;
  }
  CHECK(differs);
  CHECK(part_seed(11, 0) == 11);
  CHECK(part_seed(11, 1) != part_seed(11, 2));

  CHECK(test::error_of([&] { ShardBatches(parts_of({3, 0}, 0, 2), 0, 2, {3, 0}, 4, 1, "t.tsv"); }) ==
        "t.tsv: the part of gradient shard 1 (of 2) holds no example: each shard trains on its own part of the file "
        "(a line belongs to the part holding its first byte); give fewer shards (--grad-shards, processes) for so "
        "small a file");
  CHECK(test::error_of([&] { ShardBatches(parts_of(sizes, 0, 4), 0, 4, sizes, 6, 1, "t.tsv"); })
            .find("the batch size 6 is not a multiple of the 4 gradient shards") != std::string::npos);
}

TEST_CASE("shard batches: every shard's state restores on any process holding it") {
  const std::vector<int64_t> sizes = {7, 5, 6, 9};
  ShardBatches all(parts_of(sizes, 0, 4), 0, 4, sizes, 8, 3, "t.tsv");
  for (int step = 0; step < 7; ++step) all.next();
  const std::vector<BatcherState> states = all.states();
  REQUIRE(states.size() == 4);
  CHECK(states[1].epoch == 2);  // 5 examples, 3 steps a pass: the third pass after 7 steps
  CHECK(states[3].seed == part_seed(3, 3));
  ShardBatches lower(parts_of(sizes, 0, 2), 0, 4, sizes, 8, 3, "t.tsv");
  ShardBatches upper(parts_of(sizes, 2, 4), 2, 4, sizes, 8, 3, "t.tsv");
  lower.restore(states, "m.json: data orders");
  upper.restore(states, "m.json: data orders");
  for (int step = 0; step < 6; ++step) {
    const std::vector<Batch> a = all.next(), l = lower.next(), u = upper.next();
    CHECK(a[0].index == l[0].index);
    CHECK(a[1].index == l[1].index);
    CHECK(a[2].index == u[0].index);
    CHECK(a[3].index == u[1].index);
  }
  std::vector<BatcherState> changed = states;
  changed[3].examples = 10;
  CHECK(test::error_of([&] { upper.restore(changed, "m.json: data orders"); }) ==
        "m.json: data orders: shard 3: batcher: the saved data order is for 10 examples, but the data set has 9 "
        "(the data changed)");
}

TEST_CASE("shard batches: a trainer on a file's parts resumes bit for bit, and an epoch is the largest part's pass") {
  set_num_threads(1);
  const std::string dir = std::filesystem::temp_directory_path().string() + "/attnkit_sb_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/pairs.tsv";
  {
    std::ofstream f(file);
    for (int i = 0; i < 45; ++i) {
      std::string w;
      for (int k = 0; k < 2 + i % 4; ++k) w += char('a' + (i * 7 + k * 3) % 6);
      f << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
    }
  }
  DataSpec spec;
  spec.train_path = file;
  auto options = [&](int64_t steps, const std::string& save) {
    TrainerOptions o = test::tiny_trainer_options(nn::CellKind::Gru, models::AttentionKind::Dot, 6, 8, steps, 3, save);
    o.dropout = 0.2f;
    o.grad_shards = 2;
    return o;
  };
  Trainer whole(options(12, dir + "/whole.json"), load_training_parts(spec, single_process(), 2));
  std::vector<std::string> lines;
  whole.run([&](const std::string& l) { lines.push_back(l); });
  Trainer first(options(5, dir + "/half.json"), load_training_parts(spec, single_process(), 2));
  first.run();
  TrainerOptions rest = options(12, dir + "/rest.json");
  rest.grad_shards = 0;  // the checkpoint's
  CHECK(Trainer::resume_grad_shards(dir + "/half.json", 0, 1) == 2);
  auto resumed = Trainer::resume(dir + "/half.json", rest, load_training_parts(spec, single_process(), 2));
  CHECK_FALSE(resumed->data_order_restarted());
  resumed->run();
  auto pa = whole.model().named_parameters(), pb = resumed->model().named_parameters();
  for (size_t k = 0; k < pa.size(); ++k) {
    CAPTURE(pa[k]->name);
    CHECK(std::memcmp(pa[k]->value.data(), pb[k]->value.data(), sizeof(float) * size_t(pa[k]->value.numel())) == 0);
  }
  std::ifstream in(dir + "/half.json");
  const nlohmann::json half = nlohmann::json::parse(in);
  REQUIRE(half.contains("shard_data_orders"));
  CHECK(half["data_order"]["position"] == "20");       // 5 steps of 4 rows
  CHECK(half["shard_data_orders"]["1"]["position"] == "20");
  CHECK(half["shard_data_orders"]["1"]["seed"] == std::to_string(part_seed(1, 1)));
  // another cut of the file: the data orders start afresh (the tool says so)
  TrainerOptions four = options(12, dir + "/four.json");
  four.grad_shards = 4;
  auto recut = Trainer::resume(dir + "/half.json", four, load_training_parts(spec, single_process(), 4));
  CHECK(recut->data_order_restarted());

  // the parts hold 23 and 22 examples (the bytes cut in half), 4 rows each a step: an epoch is 6 steps
  TrainerOptions epochs = options(0, dir + "/epochs.json");
  epochs.epochs = 2;
  Trainer by_epochs(epochs, load_training_parts(spec, single_process(), 2));
  CHECK(by_epochs.total_steps() == 12);
  std::vector<int64_t> epoch_of_line;
  for (const std::string& l : lines) epoch_of_line.push_back(nlohmann::json::parse(l)["epoch"].get<int64_t>());
  CHECK(epoch_of_line == std::vector<int64_t>{0, 0, 1, 1});  // steps 3, 6, 9, 12
  std::filesystem::remove_all(dir);
  set_num_threads(0);
}
