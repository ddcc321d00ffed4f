// Small helpers shared by the unit tests.
#pragma once
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::test {

// The message of the attnkit::Error that `f` throws, "" if it throws nothing: for checking
// messages verbatim (CHECK(error_of(f).empty()) for "no error"). The one helper of the unit tests.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The text of tests/fixtures/NAME.
inline std::string fixture_text(const std::string& name) {
  std::string path = std::string(ATTNKIT_FIXTURES) + "/" + name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fills the buffers that freed tensors leave for Tensor::uninitialized (tensor/tensor.cpp keeps 8, from 2^18 floats
// on) with tensors of `floats` values `value`, so that the next big uninitialised tensors of that size start so.
inline void fill_recycled_buffers(int64_t floats, float value) {
  std::vector<Tensor> held;
  for (int i = 0; i < 8; ++i) {  // only uninitialized() buffers are kept when freed
    held.push_back(Tensor::uninitialized({floats}));
    std::fill(held.back().values().begin(), held.back().values().end(), value);
  }
}

}  // namespace attnkit::test
