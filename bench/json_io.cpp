// json_io: reading and writing a big tensor as nested JSON, attnkit's reader/writer against
// nlohmann::json's DOM (the baseline), one core. Driven by bench/run_json_io.sh, which runs every
// measurement in a fresh process (so that ru_maxrss is that measurement's peak); usable alone:
//   build/bench/json_io gen x.json                   the [64, 100, 512] N(0, 1) tensor, seed 1 (~36 MB)
//   build/bench/json_io read attnkit x.json --reps 5  parse the text (already in memory) into a Tensor
//   build/bench/json_io write nlohmann --reps 5       the same tensor (made in-process) to JSON text
// Prints one JSON line: {"op", "impl", "text_mb", "tensor_mb", "cpu_s", "wall_s", "mb_per_s", "peak_rss_mb"}.
// MB are 10^6 bytes; MB/s is text bytes over the best CPU time of the thread (on a shared machine
// wall time also counts the time other processes held the core; both are printed).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"

using namespace attnkit;

namespace {

const Shape kShape = {64, 100, 512};  // [N, T, H]

Tensor bench_tensor() {
  Rng rng(1);
  return rand_normal(kShape, rng);
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / 1e6;  // Linux: kilobytes
}

// nlohmann DOM -> Tensor: the shape from the first row of every level, rows checked rectangular.
void flatten(const nlohmann::json& j, size_t level, Shape& shape, std::vector<float>& out) {
  if (!j.is_array()) {
    AK_CHECK(j.is_number() && level == shape.size(), "nlohmann: not a rectangular numeric array");
    out.push_back(j.get<float>());
    return;
  }
  if (level == shape.size()) shape.push_back(static_cast<int64_t>(j.size()));
  AK_CHECK(shape[level] == static_cast<int64_t>(j.size()), "nlohmann: ragged array");
  for (const auto& e : j) flatten(e, level + 1, shape, out);
}

Tensor nlohmann_read(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  Shape shape;
  std::vector<float> data;
  flatten(j, 0, shape, data);
  return Tensor(shape, std::move(data));
}

nlohmann::json to_nlohmann(const float* data, const Shape& shape, size_t level) {
  nlohmann::json j = nlohmann::json::array();
  int64_t stride = 1;
  for (size_t i = level + 1; i < shape.size(); ++i) stride *= shape[i];
  for (int64_t i = 0; i < shape[level]; ++i) {
    if (level + 1 == shape.size()) j.push_back(data[i]);
    else j.push_back(to_nlohmann(data + i * stride, shape, level + 1));
  }
  return j;
}

std::string nlohmann_write(const Tensor& t) { return to_nlohmann(t.data(), t.shape(), 0).dump(); }

int usage() {
  std::fprintf(stderr,
               "usage: json_io gen FILE\n"
               "       json_io read attnkit|nlohmann FILE [--reps N]\n"
               "       json_io write attnkit|nlohmann [--reps N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int reps = 5;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--reps") {
      reps = std::atoi(args[i + 1].c_str());
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      break;
    }
  if (args.empty() || reps < 1) return usage();
  try {
    const std::string op = args[0];
    if (op == "gen" && args.size() == 2) {
      std::string text = io::to_json(bench_tensor());
      text += '\n';
      io::write_file_atomic(args[1], text);
      std::printf("{\"op\":\"gen\",\"file\":\"%s\",\"text_mb\":%.3f}\n", args[1].c_str(), text.size() / 1e6);
      return 0;
    }
    if ((op != "read" || args.size() != 3) && (op != "write" || args.size() != 2)) return usage();
    const std::string impl = args[1];
    if (impl != "attnkit" && impl != "nlohmann") return usage();

    std::vector<double> times, walls;
    double text_mb = 0, tensor_mb = 0;
    using clock = std::chrono::steady_clock;
    if (op == "read") {
      const std::string text = io::read_text(args[2]);
      text_mb = text.size() / 1e6;
      for (int r = 0; r < reps; ++r) {
        auto t0 = clock::now();
        double c0 = cpu_seconds();
        Tensor t = impl == "attnkit" ? io::parse_json(text, args[2]).take_tensor() : nlohmann_read(text);
        times.push_back(cpu_seconds() - c0);
        walls.push_back(std::chrono::duration<double>(clock::now() - t0).count());
        AK_CHECK(t.shape() == kShape, "read {} from {}, expected {}", t.shape_str(), args[2], shape_str(kShape));
        tensor_mb = t.numel() * 4 / 1e6;
      }
    } else {
      const Tensor t = bench_tensor();
      tensor_mb = t.numel() * 4 / 1e6;
      for (int r = 0; r < reps; ++r) {
        auto t0 = clock::now();
        double c0 = cpu_seconds();
        std::string text = impl == "attnkit" ? io::to_json(t) : nlohmann_write(t);
        times.push_back(cpu_seconds() - c0);
        walls.push_back(std::chrono::duration<double>(clock::now() - t0).count());
        text_mb = text.size() / 1e6;
      }
    }
    auto list = [](const std::vector<double>& v) {
      std::string out;
      for (double s : v) out += (out.empty() ? "" : ",") + std::to_string(s);
      return out;
    };
    double best = *std::min_element(times.begin(), times.end());
    std::printf(
        "{\"op\":\"%s\",\"impl\":\"%s\",\"text_mb\":%.3f,\"tensor_mb\":%.3f,\"cpu_s\":[%s],\"wall_s\":[%s],"
        "\"mb_per_s\":%.1f,\"peak_rss_mb\":%.1f}\n",
        op.c_str(), impl.c_str(), text_mb, tensor_mb, list(times).c_str(), list(walls).c_str(), text_mb / best,
        peak_rss_mb());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "json_io: %s\n", e.what());
    return 1;
  }
  return 0;
}
