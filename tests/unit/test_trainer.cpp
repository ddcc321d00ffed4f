// train/trainer: a short run learns, a checkpoint resumed equals the uninterrupted run bit for bit, and a
// foreign or mismatched checkpoint is refused naming the file; a right-to-left run is the run on reversed targets,
// bit for bit, and its checkpoint says so.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/decode/loader.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/report.hpp"
#include "attnkit/train/trainer.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

train::TrainingData tiny_data(int64_t vocab_size = 5) {
  train::DataSpec spec;
  train::TaskOptions t;
  t.name = "reverse";
  t.vocab_size = vocab_size;
  t.min_len = 2;
  t.max_len = 4;
  t.train_size = 40;
  t.valid_size = 8;
  t.seed = 3;
  spec.task = t;
  return train::load_training_data(spec);
}

train::TrainerOptions tiny_options(int64_t steps, const std::string& save) {
  train::TrainerOptions o;
  o.model.cell = nn::CellKind::Lstm;
  o.model.attention = models::AttentionKind::Additive;
  o.model.embed = 8;
  o.model.hidden = 12;
  o.steps = steps;
  o.batch_size = 8;  // 5 batches an epoch: the resume point falls inside an epoch
  o.schedule.lr = 0.01;
  o.schedule.kind = train::ScheduleKind::Cosine;
  o.schedule.t_max = 30;
  o.schedule.warmup_steps = 3;
  o.clip = 0.5;
  o.log_every = 4;
  o.save_path = save;
  return o;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("attnkit_") + std::to_string(::getpid()) + "_" + name)).string();
}

// 9 steps (a metrics line every 4, and the last) in one direction or the other
train::TrainerOptions right_left_options(const std::string& save, bool right_left) {
  train::TrainerOptions o = tiny_options(9, save);
  o.right_left = right_left;
  return o;
}

}  // namespace

TEST_CASE("trainer: resume from a checkpoint equals the uninterrupted run, bit for bit") {
  const std::string full = temp_path("trainer_full.json"), half = temp_path("trainer_half.json"),
                    rest = temp_path("trainer_rest.json");
  std::vector<std::string> lines_full, lines_resumed;
  set_num_threads(1);
  train::Trainer a(tiny_options(22, full), tiny_data());
  const train::TrainSummary sa = a.run([&](const std::string& l) { lines_full.push_back(l); });
  CHECK(sa.step == 22);
  REQUIRE(sa.valid);
  CHECK(sa.valid->examples == 8);

  train::Trainer b(tiny_options(10, half), tiny_data());
  b.run([&](const std::string& l) { lines_resumed.push_back(l); });
  auto c = train::Trainer::resume(half, tiny_options(22, rest), tiny_data());
  CHECK(c->step() == 10);
  const train::TrainSummary sc = c->run([&](const std::string& l) { lines_resumed.push_back(l); });
  CHECK(sc.start_step == 10);
  CHECK(sc.step == 22);
  // The logged lines agree bit for bit, tokens/s (wall clock) aside: steps 4, 8 | 10 (the end of the first part)
  // | 12 ... Additive attention is the model whose gradients once depended on where the heap put a buffer.
  auto strip = [](nlohmann::json j) {
    j.erase("tokens_per_s");
    return j.dump();
  };
  std::vector<std::string> a_lines, c_lines;
  for (const auto& l : lines_full) a_lines.push_back(strip(nlohmann::json::parse(l)));
  for (const auto& l : lines_resumed)
    if (nlohmann::json::parse(l)["step"] != 10) c_lines.push_back(strip(nlohmann::json::parse(l)));
  REQUIRE(a_lines.size() == 6);
  CHECK(a_lines == c_lines);
  auto pa = a.model().named_parameters(), pc = c->model().named_parameters();
  REQUIRE(pa.size() == pc.size());
  for (size_t k = 0; k < pa.size(); ++k) {
    CAPTURE(pa[k]->name);
    CHECK(std::memcmp(pa[k]->value.data(), pc[k]->value.data(), sizeof(float) * size_t(pa[k]->value.numel())) == 0);
  }
  // a broken resume (the data order restarted) is caught by the same comparison
  CHECK(a_lines[2] != a_lines[3]);
  CHECK(sa.to_json() != "");

  // refused: a foreign file, and data whose vocabulary differs
  const std::string foreign = temp_path("trainer_foreign.json");
  {
    FILE* f = std::fopen(foreign.c_str(), "w");
    std::fputs("{\"a\": [1, 2]}\n", f);
    std::fclose(f);
  }
  CHECK(test::error_of([&] { train::Trainer::resume(foreign, tiny_options(22, rest), tiny_data()); })
            .find("not an attnkit seq2seq checkpoint") != std::string::npos);
  CHECK(test::error_of([&] { train::Trainer::resume(full, tiny_options(30, rest), tiny_data(6)); })
            .find("vocabulary differs") != std::string::npos);
  for (const auto& p : {full, half, rest, foreign}) std::remove(p.c_str());
  set_num_threads(0);
}

TEST_CASE("trainer: a maxi-batch run resumes with the checkpoint's maxi-batch, bit for bit") {
  const std::string full = temp_path("trainer_mb_full.json"), half = temp_path("trainer_mb_half.json");
  set_num_threads(1);
  auto options = [&](int64_t steps, const std::string& save, int64_t maxi) {
    train::TrainerOptions o = tiny_options(steps, save);
    o.maxi_batch = maxi;
    return o;
  };
  train::Trainer a(options(14, full, 3), tiny_data());
  a.run([](const std::string&) {});
  train::Trainer plain(options(14, "", 0), tiny_data());
  plain.run([](const std::string&) {});
  train::Trainer b(options(6, half, 3), tiny_data());
  b.run([](const std::string&) {});
  auto c = train::Trainer::resume(half, options(14, "", 0), tiny_data());  // the checkpoint's 3, not 0
  c->run([](const std::string&) {});
  auto pa = a.model().named_parameters(), pc = c->model().named_parameters(), pp = plain.model().named_parameters();
  REQUIRE(pa.size() == pc.size());
  bool differs_from_plain = false;
  for (size_t k = 0; k < pa.size(); ++k) {
    CAPTURE(pa[k]->name);
    const size_t bytes = sizeof(float) * size_t(pa[k]->value.numel());
    CHECK(std::memcmp(pa[k]->value.data(), pc[k]->value.data(), bytes) == 0);
    differs_from_plain |= std::memcmp(pa[k]->value.data(), pp[k]->value.data(), bytes) != 0;
  }
  CHECK(differs_from_plain);  // the batches were formed otherwise
  for (const auto& p : {full, half}) std::remove(p.c_str());
  set_num_threads(0);
}

TEST_CASE("trainer: epochs, save_every, a stop request, and a vocabulary file's forms") {
  set_num_threads(1);
  const std::string ck = temp_path("trainer_ops.json");
  // 40 examples in batches of 8: 5 steps an epoch
  train::TrainerOptions o = tiny_options(0, ck);
  o.epochs = 2;
  o.schedule.kind = train::ScheduleKind::Cosine;
  o.schedule.t_max = 0;  // the run's length
  train::Trainer a(o, tiny_data());
  CHECK(a.total_steps() == 10);
  CHECK(a.run().step == 10);

  // stopped after step 3: saved there, no final evaluation; save_every 2 saved at step 2 before
  o = tiny_options(30, ck);
  o.save_every = 2;
  std::vector<int64_t> seen;
  o.progress = [&](const train::Progress& p) { seen.push_back(p.step); };
  int64_t polls = 0;
  o.stop_requested = [&] { return ++polls == 3; };
  train::Trainer b(o, tiny_data());
  const train::TrainSummary s = b.run();
  CHECK(s.interrupted);
  CHECK(s.step == 3);
  CHECK(!s.valid);
  CHECK(seen == std::vector<int64_t>{1, 2, 3});
  auto c = train::Trainer::resume(ck, tiny_options(30, ""), tiny_data());
  CHECK(c->step() == 3);

  // the progress line and the plot
  train::Progress p;
  p.step = 5, p.steps = 10, p.loss = 0.25, p.tokens = 1000, p.seconds = 2;
  CHECK(train::progress_line(p) == "step 5/10 [##########..........]  50%  loss 0.2500  500 tok/s  ETA 0:02");
  const std::string svg = train::loss_plot_svg(
      {R"({"step": 4, "loss": 2.5, "valid_loss": 2.0})", "not json", R"({"step": 8, "loss": 1.5})",
       R"({"step": 8, "loss": 1.0, "valid_loss": 1.2})"},
      "m.jsonl");
  CHECK(svg.find("step 8: training loss 1</title>") != std::string::npos);  // the later line for step 8 wins
  CHECK(svg.find("step 8: training loss 1.5") == std::string::npos);
  CHECK(svg.find("step 4: validation loss 2</title>") != std::string::npos);
  CHECK(train::loss_plot_steps({R"({"step": 4, "loss": 2.5})", R"({"step": 8, "valid_loss": 1.2})"}) == 2);
  CHECK(svg.find("one logged step") == std::string::npos);
  // a single logged step: still a whole SVG, its dot and a note saying there is no curve
  const std::vector<std::string> one_step{R"({"step": 50, "loss": 0.5, "valid_loss": 0.7})"};
  CHECK(train::loss_plot_steps(one_step) == 1);
  const std::string dot = train::loss_plot_svg(one_step, "m.jsonl");
  CHECK(dot.find("step 50: training loss 0.5</title>") != std::string::npos);
  CHECK(dot.find("one logged step: no curve") != std::string::npos);
  CHECK(dot.rfind("</svg>\n") == dot.size() - 7);
  CHECK(train::loss_plot_steps({"not json"}) == 0);

  // --vocab's forms: text for both sides, {"tokens"}, {"source", "target"} (and a checkpoint's "vocab")
  const train::VocabPair text = train::parse_vocab_pair("a\nb\n", "v.txt");
  CHECK(text.source == train::Vocab({"a", "b"}));
  CHECK(text.target == text.source);
  const train::VocabPair one = train::parse_vocab_pair(R"({"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "x"]})", "v.json");
  CHECK(one.target == train::Vocab({"x"}));
  const train::VocabPair two = train::parse_vocab_pair(
      R"({"vocab": {"source": {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "x"]},
                    "target": {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "y", "z"]}}})",
      "m.json");
  CHECK(two.source == train::Vocab({"x"}));
  CHECK(two.target == train::Vocab({"y", "z"}));
  CHECK(test::error_of([] { train::parse_vocab_pair(R"({"source": {"tokens": []}})", "half.json"); })
            .find("half.json: expected") != std::string::npos);
  std::remove(ck.c_str());
  set_num_threads(0);
}

TEST_CASE("right to left: the run on reversed targets, bit for bit, and a checkpoint that says so") {
  set_num_threads(1);
  const std::string rl = temp_path("trainer_rl.json"), lr = temp_path("trainer_lr.json"),
                    rest = temp_path("trainer_rl_rest.json");
  std::vector<std::string> lines_rl, lines_lr;
  train::Trainer a(right_left_options(rl, true), tiny_data());
  a.run([&](const std::string& l) { lines_rl.push_back(l); });
  train::TrainingData flipped = tiny_data();  // the reverse task's targets by hand: the copy task
  for (train::Corpus* c : {&flipped.train, &flipped.valid})
    for (train::Example& e : c->examples) std::reverse(e.tgt.begin(), e.tgt.end());
  train::Trainer b(right_left_options(lr, false), std::move(flipped));
  b.run([&](const std::string& l) { lines_lr.push_back(l); });
  auto strip = [](const std::string& l) {
    nlohmann::json j = nlohmann::json::parse(l);
    j.erase("tokens_per_s");
    return j.dump();
  };
  REQUIRE(lines_rl.size() == 3);
  REQUIRE(lines_lr.size() == 3);
  for (size_t i = 0; i < lines_rl.size(); ++i) CHECK(strip(lines_rl[i]) == strip(lines_lr[i]));
  auto pa = a.model().named_parameters(), pb = b.model().named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t k = 0; k < pa.size(); ++k) {
    CAPTURE(pa[k]->name);
    CHECK(std::memcmp(pa[k]->value.data(), pb[k]->value.data(), sizeof(float) * size_t(pa[k]->value.numel())) == 0);
  }
  CHECK(decode::load_checkpoint(rl).right_left);
  CHECK_FALSE(decode::load_checkpoint(lr).right_left);
  // a resume keeps the direction
  CHECK(test::error_of([&] { train::Trainer::resume(rl, right_left_options(rest, false), tiny_data()); }) ==
        rl + ": the checkpoint was trained right to left (its targets reversed); it cannot continue left to right");
  CHECK(test::error_of([&] { train::Trainer::resume(lr, right_left_options(rest, true), tiny_data()); }) ==
        lr + ": the checkpoint was trained left to right; it cannot continue right to left");
  CHECK(train::Trainer::resume(rl, right_left_options(rest, true), tiny_data())->step() == 9);
  for (const auto& p : {rl, lr, rest}) std::remove(p.c_str());
  set_num_threads(0);
}
