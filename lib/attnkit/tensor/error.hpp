// The one error type of attnkit, and the check macro that throws it; and the assertion of the
// library's own invariants. Messages name the operation, the tensors and their shapes:
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

// A broken invariant of the library (a bug, never bad input): prints
// "attnkit: internal error at FILE:LINE: message" on standard error and aborts.
[[noreturn]] void internal_error(const char* file, int line, const std::string& message) noexcept;

}  // namespace attnkit

// AK_CHECK(cond, "fmt {}", args...): throw attnkit::Error with the formatted message unless cond.
#define AK_CHECK(cond, ...)                  \
  do {                                       \
    if (!(cond)) ::attnkit::fail(__VA_ARGS__); \
  } while (0)

// AK_ASSERT(cond, "fmt {}", args...): for what the library itself guarantees, not for input (that is
// AK_CHECK's): unless cond, attnkit::internal_error with the formatted message (no exception to
// catch: the process aborts, so that the bug is seen where it happened).
#define AK_ASSERT(cond, ...)                                                              \
  do {                                                                                    \
    if (!(cond)) ::attnkit::internal_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
