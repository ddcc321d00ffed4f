#include "attnkit/nn/positional.hpp"

#include <cmath>
#include <cstring>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

Tensor sinusoidal_table(int64_t T, int64_t E, int64_t offset) {
  AK_CHECK(T >= 0 && E >= 1 && offset >= 0, "positional encoding: length {}, size {} and offset {} (need E >= 1)", T, E,
           offset);
  Tensor pe({T, E});  // [T, E]
  for (int64_t i = 0; 2 * i < E; ++i) {
    // 1 / 10000^(2i/E)
    const double inv_freq = std::exp(-std::log(10000.0) * double(2 * i) / double(E));
    for (int64_t t = 0; t < T; ++t) {
      const double angle = double(offset + t) * inv_freq;
      pe.data()[t * E + 2 * i] = static_cast<float>(std::sin(angle));                        // PE(pos, 2i)
      if (2 * i + 1 < E) pe.data()[t * E + 2 * i + 1] = static_cast<float>(std::cos(angle));  // PE(pos, 2i+1)
    }
  }
  return pe;
}

namespace {

constexpr EnumName<PositionalKind> kPositionalNames[] = {{PositionalKind::Sinusoidal, "sinusoidal"},
                                                         {PositionalKind::Learned, "learned"}};

}  // namespace

PositionalKind parse_positional_kind(std::string_view name) {
  if (const std::optional<PositionalKind> kind = parse_name(kPositionalNames, name)) return *kind;
  fail("unknown positional encoding \"{}\" (expected {})", name, names_or(kPositionalNames));
}

std::string_view positional_kind_name(PositionalKind kind) { return name_of(kPositionalNames, kind); }

PositionalEncoding::PositionalEncoding(PositionalKind kind, int64_t embed, int64_t max_positions,
                                       const std::string& prefix)
    : kind_(kind), embed_(embed), max_positions_(max_positions) {
  AK_CHECK(embed >= 1, "positional encoding: size {} must be >= 1", embed);
  if (kind == PositionalKind::Learned) {
    AK_CHECK(max_positions >= 1, "positional encoding: a learned table of {} positions (need >= 1)", max_positions);
    weight = Parameter(prefix + ".weight", Tensor({max_positions, embed}));  // [P, E]
  }
}

PositionalEncoding::PositionalEncoding(PositionalKind kind, int64_t embed, int64_t max_positions, Rng& rng,
                                       const std::string& prefix)
    : kind_(kind), embed_(embed), max_positions_(max_positions) {
  AK_CHECK(embed >= 1, "positional encoding: size {} must be >= 1", embed);
  if (kind == PositionalKind::Learned) {
    AK_CHECK(max_positions >= 1, "positional encoding: a learned table of {} positions (need >= 1)", max_positions);
    weight = Parameter(prefix + ".weight", rand_normal({max_positions, embed}, rng));  // [P, E]
  }
}

std::vector<Parameter*> PositionalEncoding::named_parameters() {
  if (kind_ == PositionalKind::Learned) return {&weight};
  return {};
}

Tensor PositionalEncoding::rows(int64_t T, int64_t offset) const {
  if (kind_ == PositionalKind::Sinusoidal) {
    if (offset + T <= cached_rows()) {
      Tensor out({T, embed_});
      std::memcpy(out.data(), cache_.data() + offset * embed_, sizeof(float) * size_t(T * embed_));
      return out;
    }
    return sinusoidal_table(T, embed_, offset);
  }
  AK_CHECK(offset >= 0 && T >= 0 && offset + T <= max_positions_,
           "positional encoding: positions {} .. {} past the learned table's {} ({})", offset, offset + T - 1,
           max_positions_, weight.name);
  Tensor out({T, embed_});
  std::memcpy(out.data(), weight.value.data() + offset * embed_, sizeof(float) * size_t(T * embed_));
  return out;
}

autograd::Var PositionalEncoding::forward(const autograd::Var& x, int64_t offset) {
  const Shape& s = x.shape();
  AK_CHECK((s.size() == 3 || s.size() == 2) && s.back() == embed_,
           "positional encoding: input {} must be [N, T, {}] or [T, {}]", shape_str(s), embed_, embed_);
  const int64_t T = s[s.size() - 2];
  AK_CHECK(offset >= 0, "positional encoding: offset {} < 0", offset);
  if (kind_ == PositionalKind::Sinusoidal) {
    if (offset + T > cached_rows()) cache_ = sinusoidal_table(std::max<int64_t>(2 * (offset + T), 64), embed_);
    return autograd::add(x, autograd::Var(rows(T, offset)));  // [N, T, E] + [T, E]
  }
  AK_CHECK(offset + T <= max_positions_, "positional encoding: positions {} .. {} past the learned table's {} ({})",
           offset, offset + T - 1, max_positions_, weight.name);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = offset + t;
  autograd::Var pe = autograd::embedding(autograd::Var::param(weight), std::move(pos), {T}, {}, "positional encoding");
  return autograd::add(x, pe);  // [N, T, E] + [T, E]
}

}  // namespace attnkit::nn
