#include "attnkit/models/graphone.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

namespace {

constexpr const char* kFormat = "attnkit-graphone";
constexpr const char* kVersion = "1";
constexpr double kInf = std::numeric_limits<double>::infinity();

// a float32 cell that must hold an integer in [lo, hi]
int64_t integer_cell(float x, int64_t lo, int64_t hi, const std::string& what, const std::string& name, int64_t row,
                     int64_t col) {
  AK_CHECK(std::isfinite(x) && x == std::floor(x) && x >= static_cast<float>(lo) && x <= static_cast<float>(hi),
           "{}: {}[{}, {}] is {}, not an integer in [{}, {}]", what, name, row, col, x, lo, hi);
  return static_cast<int64_t>(x);
}

const Tensor& matrix(const io::Value& v, std::string_view name, int64_t cols, const std::string& what) {
  const io::Value* m = v.find(name);
  AK_CHECK(m != nullptr && m->is_tensor(), "{}: no tensor \"{}\"", what, name);
  const Tensor& t = m->tensor();
  AK_CHECK(t.rank() == 2 && t.dim(1) == cols, "{}: \"{}\" is {}, expected [rows, {}]", what, name, t.shape_str(),
           cols);
  return t;
}

}  // namespace

uint64_t graphone_key(const std::array<int32_t, 2>& src, const std::array<int32_t, 2>& tgt) {
  uint64_t k = 0;
  for (int32_t id : {src[0], src[1], tgt[0], tgt[1]}) k = (k << 16) | static_cast<uint64_t>(id + 1);
  return k;
}

uint64_t chunk_key(const std::vector<int32_t>& src, size_t i, size_t dx, const std::vector<int32_t>& tgt, size_t j,
                   size_t dy) {
  return graphone_key({src[i], dx > 1 ? src[i + 1] : -1}, {dy > 0 ? tgt[j] : -1, dy > 1 ? tgt[j + 1] : -1});
}

std::string GraphoneModel::key(const int32_t* ids, int n) {
  std::string k(static_cast<size_t>(2 * n), '\0');
  for (int i = 0; i < n; ++i) {
    k[size_t(2 * i)] = static_cast<char>(ids[i] & 0xff);
    k[size_t(2 * i + 1)] = static_cast<char>((ids[i] >> 8) & 0xff);
  }
  return k;
}

GraphoneModel::GraphoneModel(Vocab source, Vocab target, Tokenizer src_tokenizer, Tokenizer tgt_tokenizer,
                             std::vector<Graphone> units, int order, double discount,
                             const std::vector<GraphoneCounts>& counts, const std::string& what)
    : source_(std::move(source)),
      target_(std::move(target)),
      src_tokenizer_(src_tokenizer),
      tgt_tokenizer_(tgt_tokenizer),
      units_(std::move(units)),
      order_(order),
      discount_(discount),
      counts_(counts) {
  AK_CHECK(order >= 1 && order <= kMaxOrder, "{}: order {} is outside 1-{}", what, order, kMaxOrder);
  AK_CHECK(std::isfinite(discount) && discount > 0 && discount < 1, "{}: discount {} is outside (0, 1)", what,
           discount);
  AK_CHECK(source_.size() < 65535 && target_.size() < 65535, "{}: vocabularies of {} and {} tokens: at most 65534",
           what, source_.size(), target_.size());
  const int64_t U = static_cast<int64_t>(units_.size());
  AK_CHECK(U >= 2 && U <= kMaxGraphones, "{}: {} graphones: give 1 to {} besides the boundary", what, U - 1,
           kMaxGraphones - 1);
  AK_CHECK(units_[0].n_src == 0 && units_[0].n_tgt == 0, "{}: graphone 0 is the boundary: it has no tokens", what);
  units_[0] = Graphone{};
  for (int64_t u = 1; u < U; ++u) {
    Graphone& g = units_[size_t(u)];
    AK_CHECK(g.n_src >= 1 && g.n_src <= 2 && g.n_tgt >= 0 && g.n_tgt <= 2,
             "{}: graphone {} has {} source and {} target tokens: give 1-2 and 0-2", what, u, g.n_src, g.n_tgt);
    for (int i = 0; i < 2; ++i) {
      const bool src_used = i < g.n_src, tgt_used = i < g.n_tgt;
      AK_CHECK(src_used ? g.src[size_t(i)] >= Vocab::kNumSpecials && g.src[size_t(i)] < source_.size()
                        : g.src[size_t(i)] == -1,
               "{}: graphone {}: source token {} is {}, not a token id of the source vocabulary", what, u, i,
               g.src[size_t(i)]);
      AK_CHECK(tgt_used ? g.tgt[size_t(i)] >= Vocab::kNumSpecials && g.tgt[size_t(i)] < target_.size()
                        : g.tgt[size_t(i)] == -1,
               "{}: graphone {}: target token {} is {}, not a token id of the target vocabulary", what, u, i,
               g.tgt[size_t(i)]);
    }
    // the stored float32 value, so that a model and its saved copy score alike
    g.log_prob = static_cast<float>(g.log_prob);
    AK_CHECK(std::isfinite(g.log_prob) && g.log_prob <= 0, "{}: graphone {} has log-probability {}", what, u,
             g.log_prob);
    AK_CHECK(unit_of_.emplace(graphone_key(g.src, g.tgt), static_cast<int32_t>(u)).second,
             "{}: graphone {} repeats an earlier one", what, u);
  }
  AK_CHECK(static_cast<int>(counts_.size()) == order, "{}: counts of {} orders for order {}", what, counts_.size(),
           order);
  ngram_.resize(size_t(order));
  context_.resize(size_t(order));
  for (int m = 1; m <= order; ++m) {
    const GraphoneCounts& c = counts_[size_t(m - 1)];
    AK_CHECK(c.ids.size() == c.count.size() * size_t(m), "{}: order {}: {} ids for {} counts", what, m, c.ids.size(),
             c.count.size());
    for (size_t g = 0; g < c.count.size(); ++g) {
      const int32_t* ids = c.ids.data() + g * size_t(m);
      for (int i = 0; i < m; ++i)
        AK_CHECK(ids[i] >= 0 && ids[i] < U, "{}: order {}, n-gram {}: graphone {} is not one of the {}", what, m, g,
                 ids[i], U);
      AK_CHECK(c.count[g] >= 1, "{}: order {}, n-gram {}: count {} is below 1", what, m, g, c.count[g]);
      AK_CHECK(ngram_[size_t(m - 1)].emplace(key(ids, m), c.count[g]).second, "{}: order {}, n-gram {} repeats", what,
               m, g);
      Context& h = context_[size_t(m - 1)][key(ids, m - 1)];
      h.total += c.count[g];
      h.types += 1;
    }
  }
  AK_CHECK(!counts_[0].count.empty(), "{}: no unigram counts", what);
  outcomes_ = U;
}

std::vector<int32_t> GraphoneModel::align(const std::vector<int32_t>& src, const std::vector<int32_t>& tgt) const {
  const size_t n = src.size(), m = tgt.size();
  if (n == 0 || n > size_t(kMaxTokens) || m > size_t(kMaxTokens)) return {};
  const size_t W = m + 1;
  std::vector<double> best((n + 1) * W, -kInf);
  std::vector<int32_t> from((n + 1) * W, -1);  // the graphone that ends there
  best[0] = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j <= m; ++j) {
      const double s = best[i * W + j];
      if (s == -kInf) continue;
      for (size_t dx = 1; dx <= 2 && i + dx <= n; ++dx)
        for (size_t dy = 0; dy <= 2 && j + dy <= m; ++dy) {
          const auto it = unit_of_.find(chunk_key(src, i, dx, tgt, j, dy));
          if (it == unit_of_.end()) continue;
          const double v = s + units_[size_t(it->second)].log_prob;
          double& to = best[(i + dx) * W + j + dy];
          if (v > to) {  // ties: the first found (shorter source chunk, then shorter target chunk)
            to = v;
            from[(i + dx) * W + j + dy] = it->second;
          }
        }
    }
  if (best[n * W + m] == -kInf) return {};
  std::vector<int32_t> out;
  for (size_t i = n, j = m; i > 0 || j > 0;) {
    const int32_t u = from[i * W + j];
    out.push_back(u);
    i -= size_t(units_[size_t(u)].n_src);
    j -= size_t(units_[size_t(u)].n_tgt);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

double GraphoneModel::prob(const std::vector<int32_t>& history, int32_t q) const {
  AK_CHECK(q >= 0 && q < outcomes_, "graphone model: graphone {} is not one of the {}", q, outcomes_);
  // the last order-1 graphones, padded in front with the start marker (0)
  std::vector<int32_t> h(size_t(order_), 0);
  const size_t have = std::min(history.size(), size_t(order_ - 1));
  std::copy(history.end() - std::ptrdiff_t(have), history.end(), h.begin() + std::ptrdiff_t(size_t(order_ - 1) - have));
  h[size_t(order_ - 1)] = q;
  double p = 1.0 / static_cast<double>(outcomes_);
  for (int m = 1; m <= order_; ++m) {
    const int32_t* gram = h.data() + (order_ - m);  // the last m ids: history of m - 1, then q
    const auto c = context_[size_t(m - 1)].find(key(gram, m - 1));
    if (c == context_[size_t(m - 1)].end()) continue;
    const auto g = ngram_[size_t(m - 1)].find(key(gram, m));
    const double count = g == ngram_[size_t(m - 1)].end() ? 0.0 : static_cast<double>(g->second);
    const double total = static_cast<double>(c->second.total);
    p = std::max(count - discount_, 0.0) / total + discount_ * static_cast<double>(c->second.types) / total * p;
  }
  return p;
}

double GraphoneModel::sequence_log_prob(const std::vector<int32_t>& graphones) const {
  std::vector<int32_t> history;
  double lp = 0;
  for (const int32_t q : graphones) {
    AK_CHECK(q >= 1 && q < outcomes_, "graphone model: graphone {} is not one of 1-{}", q, outcomes_ - 1);
    lp += std::log(prob(history, q));
    history.push_back(q);
  }
  return lp + std::log(prob(history, 0));
}

double GraphoneModel::log_prob(const std::vector<int32_t>& src, const std::vector<int32_t>& tgt) const {
  const std::vector<int32_t> q = align(src, tgt);
  return q.empty() ? -kInf : sequence_log_prob(q);
}

double GraphoneModel::log_prob(const std::vector<std::string>& src, const std::vector<std::string>& tgt) const {
  std::vector<int32_t> a, b;
  for (const std::string& t : src) {
    if (!source_.contains(t)) return -kInf;
    a.push_back(static_cast<int32_t>(source_.id(t)));
  }
  for (const std::string& t : tgt) {
    if (!target_.contains(t)) return -kInf;
    b.push_back(static_cast<int32_t>(target_.id(t)));
  }
  return log_prob(a, b);
}

io::Value GraphoneModel::to_value() const {
  io::Value v;
  v.set("format", text_value(kFormat));
  v.set("version", text_value(kVersion));
  io::Value config;
  config.set("order", text_value(std::to_string(order_)));
  config.set("discount", real_value(discount_));
  config.set("src_tokenizer", text_value(tokenizer_name(src_tokenizer_)));
  config.set("tgt_tokenizer", text_value(tokenizer_name(tgt_tokenizer_)));
  v.set("config", std::move(config));
  io::Value vocab;
  vocab.set("source", source_.to_value());
  vocab.set("target", target_.to_value());
  v.set("vocab", std::move(vocab));
  const int64_t U = static_cast<int64_t>(units_.size());
  Tensor g(Shape{U - 1, 5});
  for (int64_t u = 1; u < U; ++u) {
    const Graphone& x = units_[size_t(u)];
    float* row = g.data() + (u - 1) * 5;
    row[0] = float(x.src[0]), row[1] = float(x.src[1]), row[2] = float(x.tgt[0]), row[3] = float(x.tgt[1]);
    row[4] = static_cast<float>(x.log_prob);
  }
  v.set("graphones", std::move(g));
  io::Value counts;
  for (int m = 1; m <= order_; ++m) {
    const GraphoneCounts& c = counts_[size_t(m - 1)];
    const int64_t G = static_cast<int64_t>(c.count.size());
    Tensor t(Shape{G, m + 1});
    for (int64_t k = 0; k < G; ++k) {
      AK_CHECK(c.count[size_t(k)] <= (int64_t(1) << 24), "graphone model: a count of {} is above 2^24, which float32 "
               "tensors cannot hold exactly", c.count[size_t(k)]);
      for (int i = 0; i < m; ++i) t.data()[k * (m + 1) + i] = float(c.ids[size_t(k * m + i)]);
      t.data()[k * (m + 1) + m] = float(c.count[size_t(k)]);
    }
    counts.set(std::to_string(m), std::move(t));
  }
  v.set("counts", std::move(counts));
  return v;
}

GraphoneModel GraphoneModel::from_value(const io::Value& value, const std::string& what) {
  const Fields f(value, what);
  const std::string format = f.text("format");
  AK_CHECK(format == kFormat, "{}: format \"{}\" is not a graphone model (\"{}\", written by graphone-train)", what,
           format, kFormat);
  const std::string version = f.text("version");
  AK_CHECK(version == kVersion, "{}: version {} of the graphone format: this build reads version {}", what, version,
           kVersion);
  const Fields config(f.member("config"), what + ": config");
  const int order = static_cast<int>(config.integer("order", 1, kMaxOrder));
  const double discount = config.real("discount");
  const Tokenizer st = config.choice("src_tokenizer", tokenizer_from_name);
  const Tokenizer tt = config.choice("tgt_tokenizer", tokenizer_from_name);
  const Fields vocab(f.member("vocab"), what + ": vocab");
  Vocab source = Vocab::from_value(vocab.member("source"), what + ": vocab/source");
  Vocab target = Vocab::from_value(vocab.member("target"), what + ": vocab/target");
  const Tensor& g = matrix(value, "graphones", 5, what);
  AK_CHECK(g.dim(0) + 1 <= kMaxGraphones, "{}: {} graphones: at most {}", what, g.dim(0), kMaxGraphones - 1);
  std::vector<Graphone> units(size_t(g.dim(0) + 1));
  for (int64_t u = 0; u < g.dim(0); ++u) {
    const float* row = g.data() + u * 5;
    Graphone& x = units[size_t(u + 1)];
    for (int i = 0; i < 2; ++i) {
      x.src[size_t(i)] = static_cast<int32_t>(integer_cell(row[i], -1, source.size() - 1, what, "graphones", u, i));
      x.tgt[size_t(i)] =
          static_cast<int32_t>(integer_cell(row[2 + i], -1, target.size() - 1, what, "graphones", u, 2 + i));
    }
    x.n_src = (x.src[0] >= 0) + (x.src[1] >= 0);
    x.n_tgt = (x.tgt[0] >= 0) + (x.tgt[1] >= 0);
    AK_CHECK(x.src[0] >= 0, "{}: graphones[{}]: no source token (a graphone has 1-2)", what, u);
    AK_CHECK(x.tgt[1] < 0 || x.tgt[0] >= 0, "{}: graphones[{}]: a second target token without a first", what, u);
    AK_CHECK(std::isfinite(row[4]) && row[4] <= 0, "{}: graphones[{}, 4] is {}, not a log-probability (finite, <= 0)",
             what, u, row[4]);
    x.log_prob = row[4];
  }
  const io::Value* counts_value = value.find("counts");
  AK_CHECK(counts_value != nullptr && counts_value->is_bundle(), "{}: no \"counts\" object", what);
  std::vector<GraphoneCounts> counts(static_cast<size_t>(order));
  const int64_t U = static_cast<int64_t>(units.size());
  for (int m = 1; m <= order; ++m) {
    const std::string name = std::to_string(m);
    const Tensor& t = matrix(*counts_value, name, m + 1, what + ": counts");
    GraphoneCounts& c = counts[size_t(m - 1)];
    c.ids.resize(size_t(t.dim(0) * m));
    c.count.resize(size_t(t.dim(0)));
    for (int64_t k = 0; k < t.dim(0); ++k) {
      for (int i = 0; i < m; ++i)
        c.ids[size_t(k * m + i)] = static_cast<int32_t>(
            integer_cell(t.data()[k * (m + 1) + i], 0, U - 1, what, "counts/" + name, k, i));
      c.count[size_t(k)] = integer_cell(t.data()[k * (m + 1) + m], 1, int64_t(1) << 24, what, "counts/" + name, k, m);
    }
  }
  AK_CHECK(counts_value->members().size() == size_t(order), "{}: counts of {} orders for order {}", what,
           counts_value->members().size(), order);
  return GraphoneModel(std::move(source), std::move(target), st, tt, std::move(units), order, discount, counts, what);
}

GraphoneModel read_graphone_model(const std::string& path) {
  return GraphoneModel::from_value(io::read_value_file(path), path);
}

void save_graphone_model(const GraphoneModel& model, const std::string& path) {
  io::write_value_file(path, model.to_value());
}

}  // namespace attnkit::models
