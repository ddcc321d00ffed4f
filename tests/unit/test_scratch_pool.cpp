// ScratchPool (tensor/scratch_pool.hpp): a request takes the smallest free buffer that fits, so a
// bigger one stays for the request it fits.
#include <doctest/doctest.h>

#include <vector>

#include "attnkit/tensor/scratch_pool.hpp"

using namespace attnkit;

namespace {
std::ptrdiff_t best_fit(const std::vector<int64_t>& sizes, int64_t floats) {
  return ScratchPool::best_fit(sizes.data(), sizes.size(), floats);
}
}  // namespace

TEST_CASE("ScratchPool::best_fit: the smallest free buffer of at least the request and at most twice it") {
  // an MHA training step's second call: the 6.3 MB gradients must leave the 8.4 MB panels' buffer alone
  CHECK(best_fit({2'100'000, 1'575'000}, 1'575'000) == 1);
  CHECK(best_fit({2'100'000, 1'575'000}, 2'100'000) == 0);
  CHECK(best_fit({3000, 2500, 2100}, 2000) == 2);
  CHECK(best_fit({2100, 2100}, 2000) == 0);  // the first of equals
  CHECK(best_fit({1999, 4001}, 2000) == -1);  // too small, more than twice
  CHECK(best_fit({4000}, 2000) == 0);         // exactly twice still fits
  CHECK(best_fit({}, 10) == -1);
}
