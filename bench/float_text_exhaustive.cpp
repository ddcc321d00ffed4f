// float_text_exhaustive: checks attnkit's float writer (io::append_float, a Schubfach port)
// against std::to_chars on every float32 bit pattern, or on a range of them:
//   build/bench/float_text_exhaustive [FIRST LAST]     (bit patterns, default 0 0xffffffff)
// Exit 0 when every finite value gives the same text. Takes a few minutes on one core.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attnkit/io/json_writer.hpp"

int main(int argc, char** argv) {
  uint64_t first = 0, last = 0xffffffffu;
  if (argc == 3) {
    first = std::strtoull(argv[1], nullptr, 0);
    last = std::strtoull(argv[2], nullptr, 0);
  }
  uint64_t checked = 0, bad = 0;
  std::string ours;
  char want[64];
  for (uint64_t u = first; u <= last; ++u) {
    auto bits = static_cast<uint32_t>(u);
    float x;
    std::memcpy(&x, &bits, 4);
    if (!std::isfinite(x)) continue;
    ours.clear();
    attnkit::io::append_float(ours, x);
    char* end = std::to_chars(want, want + sizeof want, x).ptr;
    if (ours.size() != static_cast<size_t>(end - want) || std::memcmp(ours.data(), want, ours.size()) != 0) {
      if (++bad <= 20) std::printf("0x%08x: attnkit %s, std::to_chars %.*s\n", bits, ours.c_str(), static_cast<int>(end - want), want);
    }
    ++checked;
  }
  std::printf("%llu finite floats checked, %llu differ\n", static_cast<unsigned long long>(checked), static_cast<unsigned long long>(bad));
  return bad == 0 ? 0 : 1;
}
