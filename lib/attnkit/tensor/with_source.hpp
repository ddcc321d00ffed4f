// with_source(ref, load): runs `load` and puts `ref` (the file or reference it reads) in front of any
// attnkit::Error it throws, so that a refused file is named: "lstm-run: w.json: missing weight ...".
#pragma once
#include <string>
#include <utility>

#include "attnkit/tensor/error.hpp"

namespace attnkit {

template <typename Load>
auto with_source(const std::string& ref, Load&& load) -> decltype(load()) {
  try {
    return std::forward<Load>(load)();
  } catch (const Error& e) {
    throw Error(ref + ": " + e.what());
  }
}

}  // namespace attnkit
