#include "attnkit/io/base64.hpp"

#include <algorithm>
#include <cstdint>

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t x = 0;  // 24 bits: the group's bytes, high first
    for (size_t k = 0; k < 3; ++k) x = (x << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(x >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string base64_decode(std::string_view text, std::string_view what) {
  AK_CHECK(text.size() % 4 == 0, "{}: base64 text of {} characters (a multiple of 4 expected)", what, text.size());
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    size_t pad = 0;
    uint32_t x = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++pad;
        x <<= 6;
        continue;
      }
      const int s = sextet(c);
      AK_CHECK(s >= 0 && pad == 0, "{}: base64 text: unexpected character at offset {}", what, i + k);
      x = (x << 6) | uint32_t(s);
    }
    AK_CHECK((x & ((1u << (8 * pad)) - 1)) == 0, "{}: base64 text: non-zero padding bits at offset {}", what, i);
    for (size_t k = 0; k < 3 - pad; ++k) out += static_cast<char>((x >> (16 - 8 * k)) & 0xFF);
  }
  return out;
}

}  // namespace attnkit::io
