// Legend: N batch size (rows), S longest source in the batch, T longest target in the batch + 1.
#include "attnkit/train/batch.hpp"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <numeric>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/tasks.hpp"

namespace attnkit::train {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// An integer stored as a decimal string; `what` and `name` say where in messages.
template <typename Int>
Int integer_member(const io::Value& bundle, const char* name, std::string_view what) {
  const io::Value* v = bundle.find(name);
  AK_CHECK(v != nullptr, "{}: the data order has no \"{}\"", what, name);
  const nlohmann::json j = v->is_string() ? nlohmann::json(v->str()) : nlohmann::json::parse(v->json(), nullptr, false);
  AK_CHECK((v->is_string() || v->kind() == io::Value::Kind::Other) && j.is_string(),
           "{}: \"{}\" must be an integer written as a string (\"12\")", what, name);
  const std::string s = j.get<std::string>();
  Int x{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  AK_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty() && s[0] != '-' && s[0] != '+',
           "{}: \"{}\" is \"{}\", not a non-negative integer", what, name, s);
  return x;
}

io::Value integer_value(uint64_t x) { return io::Value::string(std::to_string(x)); }

// Fisher-Yates: i = n-1 .. 1, swap i with uniform_below(i + 1). `v` holds at least one element.
void shuffle(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size() - 1; i >= 1; --i) {
    const size_t j = uniform_below(rng, static_cast<uint32_t>(i + 1));
    std::swap(v[i], v[j]);
  }
}

}  // namespace

Batch make_batch(const EncodedCorpus& data, const std::vector<int64_t>& rows, bool sort_by_length) {
  AK_CHECK(!rows.empty(), "batch: no rows");
  Batch b;
  b.index = rows;
  for (int64_t i : b.index)
    AK_CHECK(i >= 0 && i < data.size(), "batch: example {} is out of range (the data set has {})", i, data.size());
  if (sort_by_length) {
    std::stable_sort(b.index.begin(), b.index.end(), [&](int64_t a, int64_t c) {
      return data.src[static_cast<size_t>(a)].size() > data.src[static_cast<size_t>(c)].size();
    });
  }
  b.N = static_cast<int64_t>(b.index.size());
  for (int64_t i : b.index) {
    const auto& s = data.src[static_cast<size_t>(i)];
    const auto& t = data.tgt[static_cast<size_t>(i)];
    AK_CHECK(!s.empty() && !t.empty(), "batch: example {} has an empty {}", i, s.empty() ? "source" : "target");
    b.src_lengths.push_back(static_cast<int64_t>(s.size()));
    b.tgt_lengths.push_back(static_cast<int64_t>(t.size()) + 1);
    b.S = std::max(b.S, b.src_lengths.back());
    b.T = std::max(b.T, b.tgt_lengths.back());
  }
  b.src.assign(static_cast<size_t>(b.N * b.S), Vocab::kPad);      // [N, S]
  b.tgt_in.assign(static_cast<size_t>(b.N * b.T), Vocab::kPad);   // [N, T]
  b.tgt_out.assign(static_cast<size_t>(b.N * b.T), Vocab::kPad);  // [N, T]
  for (int64_t r = 0; r < b.N; ++r) {
    const auto& s = data.src[static_cast<size_t>(b.index[r])];
    const auto& t = data.tgt[static_cast<size_t>(b.index[r])];
    std::copy(s.begin(), s.end(), b.src.begin() + r * b.S);
    int64_t* in = b.tgt_in.data() + r * b.T;
    int64_t* out = b.tgt_out.data() + r * b.T;
    in[0] = Vocab::kBos;                      // <bos> y_1 .. y_m
    std::copy(t.begin(), t.end(), in + 1);
    std::copy(t.begin(), t.end(), out);       // y_1 .. y_m <eos>
    out[t.size()] = Vocab::kEos;
  }
  return b;
}

std::vector<Batch> batches_in_order(const EncodedCorpus& data, int64_t batch_size, bool sort_by_length) {
  AK_CHECK(batch_size >= 1, "batch: the batch size must be >= 1, got {}", batch_size);
  std::vector<Batch> out;
  for (int64_t start = 0; start < data.size(); start += batch_size) {
    std::vector<int64_t> rows(static_cast<size_t>(std::min(batch_size, data.size() - start)));
    std::iota(rows.begin(), rows.end(), start);
    out.push_back(make_batch(data, rows, sort_by_length));
  }
  return out;
}

Batcher::Batcher(const EncodedCorpus& data, const BatcherOptions& options) : data_(data), options_(options) {
  AK_CHECK(data.size() >= 1, "batcher: the data set is empty");
  AK_CHECK(data.size() <= int64_t{0xFFFFFFFF}, "batcher: at most 2^32 - 1 examples, got {}", data.size());
  AK_CHECK(static_cast<int64_t>(data.tgt.size()) == data.size(), "batcher: {} sources but {} targets", data.size(),
           data.tgt.size());
  AK_CHECK(options.batch_size >= 1, "batcher: the batch size must be >= 1, got {}", options.batch_size);
  AK_CHECK(options.maxi_batch >= 0 && options.maxi_batch <= kMaxMaxiBatch,
           "batcher: the maxi-batch must be in [0, {}] batches, got {}", kMaxMaxiBatch, options.maxi_batch);
  AK_CHECK(!options.drop_last || options.batch_size <= data.size(),
           "batcher: with drop_last, the batch size {} must not exceed the data set's {} examples", options.batch_size,
           data.size());
  state_.seed = options.seed;
  state_.examples = data.size();
}

int64_t Batcher::batches_per_epoch() const {
  const int64_t n = data_.size(), bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

std::vector<int64_t> Batcher::epoch_order(int64_t e) const {
  std::vector<int64_t> order(static_cast<size_t>(data_.size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!options_.shuffle) return order;
  const uint64_t epoch_seed = splitmix64(state_.seed + static_cast<uint64_t>(e + 1) * 0x9E3779B97F4A7C15ULL);
  Rng rng(epoch_seed);
  shuffle(order, rng);
  if (options_.maxi_batch <= 1) return order;
  // Windows of maxi_batch batches, each sorted by length; then the full batches shuffled among themselves.
  const int64_t n = data_.size(), bs = options_.batch_size;
  const int64_t window = bs > n / options_.maxi_batch ? n : bs * options_.maxi_batch;
  auto shorter = [&](int64_t a, int64_t c) {
    const size_t sa = data_.src[size_t(a)].size(), sc = data_.src[size_t(c)].size();
    return sa != sc ? sa < sc : data_.tgt[size_t(a)].size() < data_.tgt[size_t(c)].size();
  };
  for (int64_t start = 0; start < n; start += window)
    std::stable_sort(order.begin() + start, order.begin() + std::min(n, start + window), shorter);
  const int64_t full = n / bs;  // the full batches; a remainder of n % bs examples stays at the end
  if (full < 2) return order;
  std::vector<int64_t> pick(static_cast<size_t>(full));
  std::iota(pick.begin(), pick.end(), int64_t{0});
  Rng batch_rng(epoch_seed, 1);
  shuffle(pick, batch_rng);
  std::vector<int64_t> out;
  out.reserve(order.size());
  for (int64_t b : pick) out.insert(out.end(), order.begin() + b * bs, order.begin() + (b + 1) * bs);
  out.insert(out.end(), order.begin() + full * bs, order.end());
  return out;
}

bool Batcher::at_epoch_end() const {
  const int64_t left = data_.size() - state_.position;
  return left == 0 || (options_.drop_last && left < options_.batch_size);
}

Batch Batcher::next() {
  const int64_t n = data_.size(), bs = options_.batch_size;
  if (at_epoch_end()) {
    ++state_.epoch;
    state_.position = 0;
  }
  if (order_epoch_ != state_.epoch) {
    order_ = epoch_order(state_.epoch);
    order_epoch_ = state_.epoch;
  }
  const int64_t count = std::min(bs, n - state_.position);
  std::vector<int64_t> rows(order_.begin() + state_.position, order_.begin() + state_.position + count);
  Batch b = make_batch(data_, rows, options_.sort_by_length);
  b.epoch = state_.epoch;
  state_.position += count;
  return b;
}

void Batcher::restore(const BatcherState& state) {
  AK_CHECK(state.examples == data_.size(),
           "batcher: the saved data order is for {} examples, but the data set has {} (the data changed)",
           state.examples, data_.size());
  AK_CHECK(state.epoch >= 0 && state.position >= 0 && state.position <= data_.size(),
           "batcher: the saved position {} (epoch {}) is outside the data set's {} examples", state.position,
           state.epoch, data_.size());
  state_ = state;
  order_epoch_ = -1;
}

io::Value batcher_state_value(const BatcherState& state) {
  io::Value v;
  v.set("seed", integer_value(state.seed));
  v.set("epoch", integer_value(static_cast<uint64_t>(state.epoch)));
  v.set("position", integer_value(static_cast<uint64_t>(state.position)));
  v.set("examples", integer_value(static_cast<uint64_t>(state.examples)));
  return v;
}

BatcherState read_batcher_state(const io::Value& value, std::string_view what) {
  AK_CHECK(value.is_bundle(), "{}: the data order must be an object {{\"seed\", \"epoch\", \"position\", \"examples\"}}",
           what);
  BatcherState s;
  s.seed = integer_member<uint64_t>(value, "seed", what);
  s.epoch = integer_member<int64_t>(value, "epoch", what);
  s.position = integer_member<int64_t>(value, "position", what);
  s.examples = integer_member<int64_t>(value, "examples", what);
  return s;
}

io::Value Batcher::state_value() const { return batcher_state_value(state_); }

void Batcher::load_state(const io::Value& value, std::string_view what) {
  const BatcherState s = read_batcher_state(value, what);
  try {
    restore(s);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
}

}  // namespace attnkit::train
