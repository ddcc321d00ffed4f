// Small helpers shared by the unit tests.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "attnkit/tensor/error.hpp"

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

}  // namespace attnkit::test
