// libFuzzer target: the graphone model reader (models::GraphoneModel::from_value over io::read_document, what
// graphone-train writes and `--rescore-graphone` reads), JSON or .safetensors / .npz told apart by the first bytes.
// The seeds in corpus/graphone_model are small models written by graphone-train.
// Properties: any input is refused with attnkit::Error (never anything else, never a crash, never an allocation
// far beyond the input's own numbers); a model that loads scores pairs to a finite log-probability <= 0 or -inf,
// its n-gram distributions sum to 1, and written out and read back it scores alike.
#include <cmath>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/graphone.hpp"
#include "attnkit/tensor/error.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::optional<models::GraphoneModel> m;
  try {
    const io::FileFormat format = io::sniff_format(bytes.substr(0, io::sniff_needs()));
    m.emplace(models::GraphoneModel::from_value(io::read_document(bytes, format, "model"), "model"));
  } catch (const Error&) {
    return 0;
  }
  // every source token with every target token, and the pairs of the model's own graphones
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> pairs;
  for (size_t u = 1; u < m->units().size() && u < 16; ++u) {
    const models::Graphone& g = m->units()[u];
    std::vector<int32_t> x(g.src.begin(), g.src.begin() + g.n_src), y(g.tgt.begin(), g.tgt.begin() + g.n_tgt);
    pairs.emplace_back(x, y);
    x.insert(x.end(), x.begin(), x.end());
    y.insert(y.end(), y.begin(), y.end());
    pairs.emplace_back(x, y);
  }
  const models::GraphoneModel back =
      models::GraphoneModel::from_value(io::read_document(io::to_json(m->to_value()), io::FileFormat::Json, "again"),
                                        "again");
  for (const auto& [x, y] : pairs) {
    const double lp = m->log_prob(x, y);
    if (std::isnan(lp) || lp > 0) fuzz::broken("a log-probability above 0 or NaN");
    if (back.log_prob(x, y) != lp) fuzz::broken("a model read back scores otherwise");
  }
  const int32_t U = static_cast<int32_t>(m->units().size());
  if (U <= 64) {
    double sum = 0;
    for (int32_t q = 0; q < U; ++q) sum += m->prob({1}, q);
    if (!(std::fabs(sum - 1) < 1e-9)) fuzz::broken("an n-gram distribution does not sum to 1");
  }
  return 0;
}
