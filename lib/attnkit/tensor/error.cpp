#include "attnkit/tensor/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace attnkit {

void internal_error(const char* file, int line, const std::string& message) noexcept {
  std::fprintf(stderr, "attnkit: internal error at %s:%d: %s\n", file, line, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace attnkit
