// Checkpoint averaging (models/checkpoint.hpp, average_checkpoints) and the numbered snapshots it averages
// (train/snapshots.hpp): each averaged parameter is the mean of the inputs'; checkpoints of another model are
// refused naming the file and the field; training does not resume from an average.
#include <doctest/doctest.h>

#include <unistd.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/snapshots.hpp"
#include "attnkit/train/trainer.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

train::TrainingData average_data() { return test::tiny_reverse_data(5, 2, 4, 0, 3); }

train::TrainerOptions average_options(const std::string& save, int64_t hidden = 12) {
  train::TrainerOptions o =
      test::tiny_trainer_options(nn::CellKind::Lstm, models::AttentionKind::Additive, 8, hidden, 7, 100, save);
  o.save_every = 2;
  o.keep_last = 3;
  return o;
}

std::string temp_stem(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("attnkit_") + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("snapshots: numbered paths keep the extension") {
  CHECK(train::snapshot_path("run/model.json", 1000) == "run/model.step1000.json");
  CHECK(train::snapshot_path("m.safetensors", 5) == "m.step5.safetensors");
  CHECK(train::snapshot_path("model", 7) == "model.step7");
  CHECK(train::snapshot_path("a.b/model", 7) == "a.b/model.step7");
}

TEST_CASE("snapshots: a copy of the checkpoint just saved, saved again only when that cannot be read back") {
  const std::string stem = temp_stem("snap");
  std::vector<std::string> saved;
  const auto save = [&](const std::string& p) {
    saved.push_back(p);
    std::ofstream(p) << "saved again";
  };
  train::Snapshots s;
  std::ofstream(stem + ".json") << "checkpoint at 2";
  s.after_save(stem + ".json", 2, 2, 7, 1, save);
  CHECK(saved.empty());
  CHECK(file_bytes(stem + ".step2.json") == "checkpoint at 2");
  s.after_save(stem + ".json", 3, 2, 7, 1, save);  // neither a multiple of 2 nor the last step
  CHECK(!std::filesystem::exists(stem + ".step3.json"));
  std::filesystem::remove(stem + ".json");
  REQUIRE(mkfifo((stem + ".json").c_str(), 0600) == 0);  // a FIFO: nothing to read back
  s.after_save(stem + ".json", 4, 2, 7, 1, save);
  CHECK(saved == std::vector<std::string>{stem + ".step4.json"});
  CHECK(file_bytes(stem + ".step4.json") == "saved again");
  CHECK(!std::filesystem::exists(stem + ".step2.json"));  // beyond the newest 1
  for (const char* p : {".json", ".step4.json"}) std::filesystem::remove(stem + p);
}

TEST_CASE("checkpoint averaging: the mean of the snapshots, refused across models, not resumable") {
  set_num_threads(1);
  const std::string stem = temp_stem("avg");
  train::Trainer t(average_options(stem + ".json"), average_data());
  t.run();
  // saves at 2, 4, 6 and the last step 7; the newest 3 kept
  CHECK(!std::filesystem::exists(stem + ".step2.json"));
  for (int s : {4, 6, 7}) CHECK(std::filesystem::exists(stem + ".step" + std::to_string(s) + ".json"));
  // the last snapshot holds the bytes a save at its step writes
  t.save(stem + ".again.json");
  CHECK(file_bytes(stem + ".step7.json") == file_bytes(stem + ".again.json"));
  CHECK(file_bytes(stem + ".step7.json") == file_bytes(stem + ".json"));
  const std::vector<std::string> paths = {stem + ".step4.json", stem + ".step6.json", stem + ".step7.json"};
  const models::AveragedCheckpoints averaged_checkpoints = models::average_checkpoints(paths);
  const io::Value& avg = averaged_checkpoints.checkpoint;
  CHECK(averaged_checkpoints.steps == std::vector<std::optional<int64_t>>{4, 6, 7});
  std::vector<io::Value> inputs;
  for (const auto& p : paths) inputs.push_back(io::read_value_file(p));
  int64_t checked = 0, count = 0;
  bool moved = false;
  for (const Parameter* p : t.model().named_parameters()) {
    std::vector<const Tensor*> x;
    for (const auto& v : inputs) x.push_back(io::find_tensor(v, p->name, "input"));
    count += p->value.numel();
    const Tensor* a = io::find_tensor(avg, p->name, "average");
    REQUIRE(a != nullptr);
    REQUIRE(a->shape() == p->value.shape());
    for (int64_t i = 0; i < a->numel(); ++i) {
      const double mean = (double(x[0]->data()[i]) + double(x[1]->data()[i]) + double(x[2]->data()[i])) / 3.0;
      CHECK(a->data()[i] == doctest::Approx(mean).epsilon(1e-6));
      moved = moved || x[0]->data()[i] != x[2]->data()[i];
      ++checked;
    }
  }
  CHECK(checked == count);
  CHECK(count > 1000);
  CHECK(moved);  // the snapshots differ: the average is not one of them
  const models::Fields averaged(*avg.find("averaged"), "avg");
  CHECK(averaged.text("checkpoints") == "3");
  CHECK(averaged.text("steps") == "4 6 7");
  CHECK(avg.find("optimizer") == nullptr);
  CHECK(avg.find("step") == nullptr);

  // training does not resume from it
  const std::string avg_path = stem + ".avg.json";
  io::write_value_file(avg_path, avg);
  CHECK_THROWS_WITH_AS(train::Trainer::resume(avg_path, average_options(""), average_data()),
                       doctest::Contains("an average of 3 checkpoints (steps 4 6 7) holds no training state"),
                       attnkit::Error);
  // an average averaged again has no step; a step that is not a count is refused
  const models::AveragedCheckpoints again = models::average_checkpoints({avg_path, paths[0]});
  CHECK(again.steps == std::vector<std::optional<int64_t>>{std::nullopt, 4});
  CHECK(models::Fields(*again.checkpoint.find("averaged"), "again").text("steps") == "- 4");
  const std::string bad_step = stem + ".bad_step.json";
  io::Value bad = io::read_value_file(paths[0]);
  bad.set("step", models::text_value("four"));
  io::write_value_file(bad_step, bad);
  CHECK(test::error_of([&] { models::average_checkpoints({paths[0], bad_step}); }) ==
        bad_step + ": \"step\" is \"four\", not a non-negative integer");

  // another model's checkpoint is refused, naming it and the field
  const std::string other = temp_stem("avg_other");
  train::TrainerOptions o = average_options(other + ".json", 10);
  o.keep_last = 0;
  train::Trainer(o, average_data()).run();
  CHECK_THROWS_WITH_AS(models::average_checkpoints({paths[0], other + ".json"}),
                       doctest::Contains(doctest::String((other + ".json: config hidden is \"10\", but " + paths[0] +
                                                          "'s is \"12\"").c_str())),
                       attnkit::Error);
  for (const auto& p : paths) std::filesystem::remove(p);
  for (const auto& p : {stem + ".json", stem + ".again.json", avg_path, bad_step, other + ".json"})
    std::filesystem::remove(p);
}
