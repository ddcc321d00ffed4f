// train/trainer with dropout and scheduled sampling: the training generator's state travels in the checkpoint,
// so a resumed run draws the masks and sampling decisions of the uninterrupted one (and, as the negative
// check, a checkpoint stripped of "rng" does not).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/trainer.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

train::TrainingData data() { return test::tiny_reverse_data(5, 1, 4, 0, 3); }

train::TrainerOptions options(int64_t steps, const std::string& save) {
  train::TrainerOptions o =
      test::tiny_trainer_options(nn::CellKind::Gru, models::AttentionKind::Dot, 6, 8, steps, 2, save);
  o.model.style = models::AttentionStyle::Bahdanau;
  o.model.layers = 2;
  o.dropout = 0.3f;
  o.teacher_forcing = 0.5f;
  return o;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("attnkit_") + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::vector<double> losses(train::Trainer& t) {
  std::vector<double> out;
  t.run([&](const std::string& l) { out.push_back(nlohmann::json::parse(l)["loss"].get<double>()); });
  return out;
}

}  // namespace

TEST_CASE("trainer: dropout masks and scheduled sampling resume where they stopped (the rng in the checkpoint)") {
  set_num_threads(1);
  const std::string half = temp_path("rand_half.json"), rest = temp_path("rand_rest.json"),
                    stripped = temp_path("rand_stripped.json");
  train::Trainer full(options(8, ""), data());
  const std::vector<double> a = losses(full);  // steps 2, 4, 6, 8
  train::Trainer first(options(4, half), data());
  losses(first);
  auto resumed = train::Trainer::resume(half, options(8, rest), data());
  const std::vector<double> b = losses(*resumed);  // steps 6, 8
  // a checkpoint without "rng" (as before it existed) resumes with a fresh generator: other masks
  {
    std::ifstream in(half);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str());
    REQUIRE(j.contains("rng"));
    CHECK(j["training"]["dropout"] == "0.30000001192092896");
    j.erase("rng");
    std::ofstream(stripped) << j.dump();
  }
  auto fresh = train::Trainer::resume(stripped, options(8, ""), data());
  const std::vector<double> c = losses(*fresh);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 2);
  REQUIRE(c.size() == 2);
  auto close = [](double x, double y) { return std::fabs(x - y) <= 1e-4 * (1 + std::fabs(x)); };
  CAPTURE(a[2]);
  CAPTURE(b[0]);
  CAPTURE(c[0]);
  CHECK(close(a[2], b[0]));
  CHECK(close(a[3], b[1]));
  CHECK(!close(a[2], c[0]));
  for (const auto& p : {half, rest, stripped}) std::filesystem::remove(p);
}
