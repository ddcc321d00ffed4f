// The one error type of attnkit, and the check macro that throws it.
// Messages name the operation, the tensors and their shapes:
//   attention: keys [4, 16] and query [3, 8] disagree on the feature size
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace attnkit {

// Bad input: data, files, shapes. Tools map it to exit status 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace attnkit

// AK_CHECK(cond, "fmt {}", args...): throw attnkit::Error with the formatted message unless cond.
#define AK_CHECK(cond, ...)                  \
  do {                                       \
    if (!(cond)) ::attnkit::fail(__VA_ARGS__); \
  } while (0)
