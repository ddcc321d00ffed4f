#include "attnkit/io/json_writer.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace attnkit::io {

namespace {

// --- Shortest float32 text (what std::to_chars(float) writes, about three times faster) ---
// Schubfach (R. Giulietti, "The Schubfach way to render doubles", 2020; float variant as in the
// JDK's FloatToDecimal): the shortest decimal in the rounding interval of x, the closest one when
// several have that length, then laid out fixed or scientific, whichever is shorter (ties: fixed),
// as std::to_chars does. Checked against std::to_chars on every one of the 2^32 floats
// (bench/float_text_exhaustive.cpp) and in the unit tests on millions.

// g1(k) for k in [-45, 31]: with 10^-k = b * 2^r, 2^125 <= b < 2^126, g1 = floor((floor(b) + 1) / 2^63).
// Generated with exact integer arithmetic (Python fractions).
constexpr uint64_t kG1[77] = {
    0x59aedfc10d7279c5u, 0x47bf19673df52e37u, 0x72cb5bd86321e38cu,
    0x5bd5e313828182d6u, 0x4977e8dc68679bdfu, 0x758ca7c70d7292feu,
    0x5e0a1fd271287598u, 0x4b3b4ca85a86c47au, 0x785ee10d5da46d90u,
    0x604be73de4838ad9u, 0x4d0985cb1d3608aeu, 0x7b426fab61f00de3u,
    0x629b8c891b267182u, 0x4ee2d6d415b85aceu, 0x7e37be2022c0914bu,
    0x64f964e68233a76fu, 0x50c783eb9b5c85f2u, 0x409f9cbc7c4a04c2u,
    0x6765c793fa10079du, 0x52b7d2dcc80cd2e4u, 0x422ca8b0a00a4250u,
    0x69e10de76676d080u, 0x54b40b1f852bda00u, 0x43c33c1937564800u,
    0x6c6b935b8bbd4000u, 0x56bc75e2d6310000u, 0x4563918244f40000u,
    0x6f05b59d3b200000u, 0x58d15e1762800000u, 0x470de4df82000000u,
    0x71afd498d0000000u, 0x5af3107a40000000u, 0x48c2739500000000u,
    0x746a528800000000u, 0x5d21dba000000000u, 0x4a817c8000000000u,
    0x7735940000000000u, 0x5f5e100000000000u, 0x4c4b400000000000u,
    0x7a12000000000000u, 0x61a8000000000000u, 0x4e20000000000000u,
    0x7d00000000000000u, 0x6400000000000000u, 0x5000000000000000u,
    0x4000000000000000u, 0x6666666666666666u, 0x51eb851eb851eb85u,
    0x4189374bc6a7ef9du, 0x68db8bac710cb295u, 0x53e2d6238da3c211u,
    0x431bde82d7b634dau, 0x6b5fca6af2bd215eu, 0x55e63b88c230e77eu,
    0x44b82fa09b5a52cbu, 0x6df37f675ef6eadfu, 0x57f5ff85e592557fu,
    0x465e6604b7a84465u, 0x709709a125da0709u, 0x5a126e1a84ae6c07u,
    0x480ebe7b9d58566cu, 0x734aca5f6226f0adu, 0x5c3bd5191b525a24u,
    0x49c97747490eae83u, 0x760f253edb4ab0d2u, 0x5e72843249088d75u,
    0x4b8ed0283a6d3df7u, 0x78e480405d7b9658u, 0x60b6cd004ac94513u,
    0x4d5f0a66a23a9da9u, 0x7bcb43d769f762a8u, 0x63090312bb2c4eedu,
    0x4f3a68dbc8f03f24u, 0x7ec3daf941806506u, 0x65697bfa9acd1d9fu,
    0x51212ffbaf0a7e18u, 0x40e7599625a1fe7au,
};
constexpr int kKMin = -45;

inline int flog10pow2(int q) { return static_cast<int>((q * int64_t{661971961083}) >> 41); }
inline int flog10threequarterspow2(int q) { return static_cast<int>((q * int64_t{661971961083} - int64_t{274743187321}) >> 41); }
inline int flog2pow10(int e) { return static_cast<int>((e * int64_t{913124641741}) >> 38); }

// floor(g * cp / 2^95), with a sticky low bit when it is not exact.
inline uint32_t rop(uint64_t g, uint64_t cp) {
  auto x1 = static_cast<uint64_t>((static_cast<unsigned __int128>(g) * cp) >> 64);
  uint64_t vbp = x1 >> 31;
  return static_cast<uint32_t>(vbp | (((x1 & 0xffffffffu) + 0xffffffffu) >> 32));
}

struct Decimal {
  uint32_t digits;  // no trailing zeros
  int exponent;     // value = digits * 10^exponent
};

// x = c * 2^q with c > 0; dk adjusts the exponent when c was scaled by 10 (tiny subnormals).
inline Decimal to_decimal(int q, uint32_t c, int dk) {
  constexpr uint32_t kCMin = 1u << 23;
  constexpr int kQMin = -149;
  const uint32_t out = c & 1;
  const uint64_t cb = uint64_t{c} << 2, cbr = cb + 2;
  uint64_t cbl;
  int k;
  if (c != kCMin || q == kQMin) {
    cbl = cb - 2;
    k = flog10pow2(q);
  } else {  // the interval below a power of two is half as wide
    cbl = cb - 1;
    k = flog10threequarterspow2(q);
  }
  const int h = q + flog2pow10(-k) + 33;
  const uint64_t g = kG1[k - kKMin] + 1;
  const uint32_t vb = rop(g, cb << h), vbl = rop(g, cbl << h), vbr = rop(g, cbr << h);
  uint32_t s = vb >> 2, d;
  int e;
  // one digit fewer than s, if exactly one of its two neighbours is inside (the JDK starts at
  // s >= 100 because Java prints at least two digits; std::to_chars prints 3e-44)
  if (s >= 10) {
    uint32_t sp10 = 10 * static_cast<uint32_t>((uint64_t{s} * 1717986919u) >> 34), tp10 = sp10 + 10;
    bool upin = vbl + out <= (sp10 << 2), wpin = (tp10 << 2) + out <= vbr;
    if (upin != wpin) {
      d = upin ? sp10 : tp10;
      e = k;
      goto trim;
    }
  }
  {
    uint32_t t = s + 1;
    bool uin = vbl + out <= (s << 2), win = (t << 2) + out <= vbr;
    e = k + dk;
    if (uin != win) {
      d = uin ? s : t;
    } else {  // both inside: the closer one, the even one on a tie
      int64_t cmp = int64_t{vb} - int64_t{(s + t) << 1};
      d = cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t;
    }
  }
trim:
  while (d % 10 == 0) {
    d /= 10;
    ++e;
  }
  return {d, e};
}

constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

inline int count_digits(uint32_t d) {  // d < 10^9
  return d < 100000 ? (d < 100 ? (d < 10 ? 1 : 2) : d < 1000 ? 3 : d < 10000 ? 4 : 5)
                    : (d < 10000000 ? (d < 1000000 ? 6 : 7) : d < 100000000 ? 8 : 9);
}

// Writes the n digits of d at p.
inline void put_digits(char* p, uint32_t d, int n) {
  char* q = p + n;
  while (d >= 100) {
    uint32_t r = d % 100;
    d /= 100;
    q -= 2;
    std::memcpy(q, kDigitPairs + 2 * r, 2);
  }
  if (d >= 10) {
    q -= 2;
    std::memcpy(q, kDigitPairs + 2 * d, 2);
  } else {
    *--q = static_cast<char>('0' + d);
  }
}

// The shortest text of a finite float, as std::to_chars(p, last, x) writes it (at most kMaxChars).
constexpr int kMaxChars = 15;
inline char* put_shortest(char* p, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (bits >> 31) *p++ = '-';
  const uint32_t t = bits & 0x7fffffu, bq = (bits >> 23) & 0xffu;
  Decimal dec;
  if (bq != 0) {
    dec = to_decimal(static_cast<int>(bq) - 150, t | (1u << 23), 0);
  } else if (t >= 8) {
    dec = to_decimal(-149, t, 0);
  } else if (t != 0) {  // the 7 smallest subnormals: Schubfach needs c >= 8 (the JDK prints 2 digits)
    return std::to_chars(p, p + kMaxChars, std::fabs(x)).ptr;
  } else {
    *p++ = '0';
    return p;
  }
  const int n = count_digits(dec.digits), e = dec.exponent, sci_exp = e + n - 1;
  const int abs_sci = sci_exp < 0 ? -sci_exp : sci_exp;
  const int sci_len = n + (n > 1 ? 1 : 0) + 2 + (abs_sci >= 100 ? 3 : 2);
  const int fixed_len = e >= 0 ? n + e : sci_exp >= 0 ? n + 1 : n + 1 - sci_exp;
  if (fixed_len <= sci_len) {
    if (e > 0) {  // an integer past 2^24: std::to_chars writes its exact digits (9028231168)
      auto exact = static_cast<uint64_t>(std::fabs(x));  // < 10^14 here (else scientific is shorter)
      char buf[24];
      char* q = buf + sizeof buf;
      do {
        *--q = static_cast<char>('0' + exact % 10);
        exact /= 10;
      } while (exact != 0);
      std::memcpy(p, q, static_cast<size_t>(buf + sizeof buf - q));
      return p + (buf + sizeof buf - q);
    }
    if (e == 0) {
      put_digits(p, dec.digits, n);
      return p + n;
    }
    if (sci_exp >= 0) {  // 12.34
      int int_digits = sci_exp + 1;
      put_digits(p + 1, dec.digits, n);
      std::memmove(p, p + 1, static_cast<size_t>(int_digits));
      p[int_digits] = '.';
      return p + n + 1;
    }
    // 0.001234
    int zeros = -sci_exp - 1;
    p[0] = '0';
    p[1] = '.';
    std::memset(p + 2, '0', static_cast<size_t>(zeros));
    put_digits(p + 2 + zeros, dec.digits, n);
    return p + 2 + zeros + n;
  }
  // 1.234e-05, 1e+10
  put_digits(p + 1, dec.digits, n);
  p[0] = p[1];
  if (n > 1) {
    p[1] = '.';
    p += n + 1;
  } else {
    p += 1;
  }
  *p++ = 'e';
  *p++ = sci_exp < 0 ? '-' : '+';
  if (abs_sci >= 100) {
    *p++ = static_cast<char>('0' + abs_sci / 100);
    std::memcpy(p, kDigitPairs + 2 * (abs_sci % 100), 2);
  } else {
    std::memcpy(p, kDigitPairs + 2 * abs_sci, 2);
  }
  return p + 2;
}

constexpr size_t kMaxFloatChars = 16;  // "-1.1754944e-38" is 14; "\"-Infinity\"" is 11

// Writes x at p (room for kMaxFloatChars) and returns the end.
inline char* put_float(char* p, float x) {
  if (!std::isfinite(x)) {
    const char* s = std::isnan(x) ? "\"NaN\"" : x > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    size_t n = std::strlen(s);
    std::memcpy(p, s, n);
    return p + n;
  }
  return put_shortest(p, x);
}

// Appends x[0], sep, x[1], sep, ... straight into the string's buffer (no per-character append),
// a block at a time so that the string never needs much more room than the text takes.
void append_floats(std::string& out, const float* x, int64_t n, std::string_view sep) {
  constexpr int64_t kBlock = 1024;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    int64_t end = std::min(n, begin + kBlock);
    size_t used = out.size();
    size_t room = static_cast<size_t>(end - begin) * (kMaxFloatChars + sep.size());
    if (out.capacity() < used + room) out.reserve(std::max(used + room, out.capacity() + out.capacity() / 2));
    out.resize(used + room);
    char* p = out.data() + used;
    for (int64_t i = begin; i < end; ++i) {
      if (i > 0) {
        std::memcpy(p, sep.data(), sep.size());
        p += sep.size();
      }
      p = put_float(p, x[i]);
    }
    out.resize(static_cast<size_t>(p - out.data()));
  }
}

// Characters a tensor's text will take, estimated from a sample of its values, so that the
// output string is allocated once (no copies while it grows, no 2x peak memory).
size_t estimate_chars(const Tensor& t) {
  int64_t n = t.numel();
  if (n == 0) return 8;
  int64_t step = std::max<int64_t>(1, n / 256), sampled = 0;
  size_t chars = 0;
  char buf[kMaxFloatChars];
  for (int64_t i = 0; i < n; i += step, ++sampled) chars += static_cast<size_t>(put_float(buf, t[i]) - buf);
  int64_t rows = t.rank() == 0 ? 1 : n / std::max<int64_t>(1, t.dim(-1));
  // values + separators + brackets, and 5% to spare
  double per_value = static_cast<double>(chars) / static_cast<double>(sampled) + 1.0;
  return static_cast<size_t>(per_value * 1.05 * static_cast<double>(n)) + static_cast<size_t>(rows) * 8 + 64;
}

size_t estimate_chars(const Value& v) {
  if (v.is_tensor()) return estimate_chars(v.tensor());
  size_t total = 2;
  for (const auto& [name, member] : v.members()) total += name.size() + 4 + estimate_chars(member);
  return total + v.why().size() + v.json().size() + v.str().size();
}

}  // namespace

void append_float(std::string& out, float x) {
  char buf[kMaxFloatChars];
  out.append(buf, put_float(buf, x));
}

namespace {

void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent) {
  out += '\n';
  out.append(static_cast<size_t>(indent), ' ');
}

// Nested arrays: [[1,2],[3,4]] compact; pretty puts each innermost row on its own line:
// [[1, 2],
//  [3, 4]]
void write_nested(std::string& out, const float* data, const Shape& shape, size_t level, int indent, bool pretty) {
  if (level == shape.size()) {
    append_float(out, *data);
    return;
  }
  int64_t stride = 1;
  for (size_t i = level + 1; i < shape.size(); ++i) stride *= shape[i];
  out += '[';
  if (level + 1 == shape.size()) {  // a row of numbers
    append_floats(out, data, shape[level], pretty ? ", " : ",");
    out += ']';
    return;
  }
  for (int64_t i = 0; i < shape[level]; ++i) {
    if (i > 0) {
      out += ',';
      if (pretty) {
        // a blank line between blocks of rank >= 3, as numpy prints them
        for (size_t k = level + 2; k < shape.size(); ++k) out += '\n';
        newline(out, indent + 1 + static_cast<int>(level));
      }
    }
    write_nested(out, data + i * stride, shape, level + 1, indent, pretty);
  }
  out += ']';
}

// Whether nested arrays show this shape. Not when a size of rank >= 2 is 0: [2, 0, 4] would be
// [[], []], which reads back as [2, 0], and [2^40, 0] would be 2^40 "[]"; such tensors (no values)
// are written flat. [0] is "[]".
bool nested_keeps_shape(const Shape& shape) {
  if (shape.size() < 2) return true;
  for (int64_t d : shape)
    if (d == 0) return false;
  return true;
}

void write_tensor(std::string& out, const Tensor& t, const WriteOptions& options, int indent) {
  if (options.format == TensorFormat::Nested && nested_keeps_shape(t.shape())) {
    write_nested(out, t.data(), t.shape(), 0, indent, options.pretty);
    return;
  }
  const char* sep = options.pretty ? ", " : ",";
  out += options.pretty ? "{\"shape\": [" : "{\"shape\":[";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (i) out += sep;
    out += std::to_string(t.shape()[i]);
  }
  out += options.pretty ? "], \"data\": [" : "],\"data\":[";
  append_floats(out, t.data(), t.numel(), sep);
  out += "]}";
}

void write_value(std::string& out, const Value& v, const WriteOptions& options, int indent) {
  if (v.is_tensor()) {
    write_tensor(out, v.tensor(), options, indent);
    return;
  }
  if (v.kind() == Value::Kind::Boolean) {
    out += v.why();
    return;
  }
  if (!v.is_bundle()) {  // String, Other: as it was read, or when made by attnkit the string str() / why()
    if (!v.json().empty()) out += v.json();
    else append_string(out, v.is_string() ? v.str() : v.why());
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [name, member] : v.members()) {
    if (!first) out += ',';
    first = false;
    if (options.pretty) newline(out, indent + 2);
    append_string(out, name);
    out += options.pretty ? ": " : ":";
    int member_indent = indent + 2 + static_cast<int>(name.size()) + 4;  // nested rows align under '['
    write_value(out, member, options, member.is_bundle() ? indent + 2 : member_indent);
  }
  if (options.pretty && !v.members().empty()) newline(out, indent);
  out += '}';
}

}  // namespace

void write_json(std::string& out, const Value& value, const WriteOptions& options) {
  size_t estimate = estimate_chars(value) + (options.pretty ? 64 : 0);
  if (out.capacity() < out.size() + estimate) out.reserve(out.size() + estimate);
  write_value(out, value, options, 0);
}

std::string to_json(const Value& value, const WriteOptions& options) {
  std::string out;
  write_json(out, value, options);
  return out;
}

}  // namespace attnkit::io
