// ParallelErrors (INTERNAL, include from .cpp files only): an exception thrown inside an OpenMP region would
// std::terminate, so work inside one runs through run(), which keeps the first exception (and skips the work
// that follows, on every thread); rethrow() raises it after the region.
#pragma once
#include <atomic>
#include <exception>

namespace attnkit {

class ParallelErrors {
 public:
  template <typename F>
  void run(F&& f) {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
  }
  void rethrow() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

}  // namespace attnkit
