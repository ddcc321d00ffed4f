// A program built against an installed attnkit (tests/install/run.sh builds it with CMake and with
// pkg-config): the first document's attention example, s0 scored against h1..h4 (dot product),
// through the library's API. Prints the weights and the context as JSON, or the error.
//   cmake: find_package(attnkit CONFIG REQUIRED) + target_link_libraries(app PRIVATE attnkit::attnkit)
//   make:  c++ -std=c++17 main.cpp $(pkg-config --cflags --libs attnkit)
#include <cstdio>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/version.hpp"

int main() {
  using namespace attnkit;
  try {
    const Tensor h = io::parse_json("[[1, 0, 1], [0, 2, 0], [1, 1, 0], [0, 0, 3]]", "h").tensor();  // [S=4, D=3]
    const Tensor s0 = io::parse_json("[[0.5, -1, 0.25]]", "s0").tensor();                            // [T=1, D=3]
    ops::AttentionOptions options;
    options.score = ops::ScoreKind::Dot;
    const ops::AttentionResult r = ops::attention_forward(s0, h, h, options);  // weights [1, 4], context [1, 3]
    io::Value out;
    out.set("weights", r.weights).set("context", r.context);
    std::printf("attnkit %s: %s\n", ATTNKIT_VERSION, io::to_json(out).c_str());
    (void)ops::attention_forward(s0, s0, s0, options).context;  // fine: [1, 3] against [1, 3]
    (void)ops::attention_forward(s0, io::parse_json("[[1, 2]]", "k").tensor(), h, options);  // refused
  } catch (const Error& e) {
    std::printf("refused: %s\n", e.what());
    return 0;
  }
  return 1;
}
