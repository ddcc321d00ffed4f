// Shared by the libFuzzer targets (tests/fuzz/*_fuzz.cpp). Each target defines
// LLVMFuzzerTestOneInput; a property it checks that does not hold calls broken(), which aborts,
// so libFuzzer keeps the input as a crash and the replay test (replay_main.cpp) fails on it.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/tensor/error.hpp"

namespace fuzz {

[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what);
  std::abort();
}

// Same kind, same names, same shapes and bits (NaN equals NaN). Nested JSON cannot carry the
// shape of an empty tensor with a zero outer size ([0, 3] is written "[]"), so with
// `exact_empty_shapes` false, empty tensors only need to be empty on both sides.
inline bool same(const attnkit::io::Value& a, const attnkit::io::Value& b, bool exact_empty_shapes) {
  using Kind = attnkit::io::Value::Kind;
  if (a.kind() != b.kind()) return false;
  if (a.kind() == Kind::Bundle) {
    if (a.members().size() != b.members().size()) return false;
    for (size_t i = 0; i < a.members().size(); ++i) {
      if (a.members()[i].first != b.members()[i].first) return false;
      if (!same(a.members()[i].second, b.members()[i].second, exact_empty_shapes)) return false;
    }
    return true;
  }
  if (a.kind() != Kind::Tensor) return true;
  const auto& x = a.tensor();
  const auto& y = b.tensor();
  if (x.numel() != y.numel()) return false;
  if ((x.numel() > 0 || exact_empty_shapes) && x.shape() != y.shape()) return false;
  for (int64_t i = 0; i < x.numel(); ++i) {
    float p = x.data()[i], q = y.data()[i];
    if (std::isnan(p) && std::isnan(q)) continue;
    if (std::memcmp(&p, &q, sizeof p) != 0) return false;
  }
  return true;
}

// The input as a weights document (tensors up to 2^16 elements); false if it does not parse.
inline bool parse_weights(const uint8_t* data, size_t size, attnkit::io::Value& out) {
  attnkit::io::ReadOptions options;
  options.max_elements = 1 << 16;
  try {
    out = attnkit::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "weights.json", options);
  } catch (const attnkit::Error&) {
    return false;
  }
  return true;
}

}  // namespace fuzz
