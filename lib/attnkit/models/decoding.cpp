#include "attnkit/models/decoding.hpp"

#include <algorithm>
#include <cstring>

#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

Tensor gather_rows(const Tensor& t, int dim, const std::vector<int64_t>& rows) {
  AK_CHECK(dim >= 0 && dim < t.rank(), "gather_rows: dimension {} of a tensor of shape {}", dim, t.shape_str());
  const int64_t n = t.shape()[size_t(dim)];
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= t.shape()[size_t(i)];
  for (int i = dim + 1; i < t.rank(); ++i) inner *= t.shape()[size_t(i)];
  for (int64_t r : rows)
    AK_CHECK(r >= 0 && r < n, "gather_rows: row {} of dimension {} of a tensor of shape {}", r, dim, t.shape_str());
  Shape shape = t.shape();
  shape[size_t(dim)] = static_cast<int64_t>(rows.size());  // [.., R', ..]
  Tensor out(shape);
  const int64_t R = static_cast<int64_t>(rows.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < R; ++r)
      std::copy_n(t.data() + (o * n + rows[size_t(r)]) * inner, inner, out.data() + (o * R + r) * inner);
  return out;
}

void check_decoding_sources(const SourceBatch& sources, std::string_view who) {
  AK_CHECK(sources.N >= 1 && sources.S >= 1 && static_cast<int64_t>(sources.src.size()) == sources.N * sources.S &&
               static_cast<int64_t>(sources.src_lengths.size()) == sources.N,
           "{}: sources of {} rows and length {} with {} ids and {} lengths", who, sources.N, sources.S,
           sources.src.size(), sources.src_lengths.size());
}

void check_previous_tokens(const std::vector<int64_t>& prev, int64_t rows, int64_t vocab, std::string_view who) {
  AK_CHECK(rows >= 1, "{}: step with no rows left", who);
  AK_CHECK(static_cast<int64_t>(prev.size()) == rows, "{}: {} previous tokens for {} rows", who, prev.size(), rows);
  for (int64_t id : prev)
    AK_CHECK(id >= 0 && id < vocab, "{}: token id {} outside the target vocabulary [0, {})", who, id, vocab);
}

template <typename T>
std::vector<T> select_list(const std::vector<T>& list, const std::vector<int64_t>& rows, std::string_view who) {
  std::vector<T> out;
  out.reserve(rows.size());
  for (int64_t r : rows) {
    AK_CHECK(r >= 0 && r < static_cast<int64_t>(list.size()), "{}: select_rows: row {} of {}", who, r, list.size());
    out.push_back(list[size_t(r)]);
  }
  return out;
}
template std::vector<int64_t> select_list(const std::vector<int64_t>&, const std::vector<int64_t>&, std::string_view);
template std::vector<std::vector<int64_t>> select_list(const std::vector<std::vector<int64_t>>&,
                                                       const std::vector<int64_t>&, std::string_view);

}  // namespace attnkit::models
