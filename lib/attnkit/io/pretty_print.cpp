#include "attnkit/io/pretty_print.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace attnkit::io {
namespace {

constexpr int kPrecision = 8;
constexpr int kLineWidth = 75;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// Shortest round-trip digits, cut to `kPrecision` fraction digits (numpy's dragon4, unique=True).
std::string positional(float x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  std::string s(buf, r.ptr);
  size_t dot = s.find('.');
  if (dot != std::string::npos && s.size() - dot - 1 > static_cast<size_t>(kPrecision)) {
    r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed, kPrecision);
    s.assign(buf, r.ptr);
    while (s.back() == '0') s.pop_back();
  }
  if (s.find('.') == std::string::npos) s += '.';
  return s;
}

// "1.2345e+10", "1.e-05": shortest digits, mantissa cut to kPrecision, exponent of 2+ digits.
std::string scientific(float x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  size_t e = s.find('e');
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  size_t dot = mant.find('.');
  if (dot != std::string::npos && mant.size() - dot - 1 > static_cast<size_t>(kPrecision)) {
    r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific, kPrecision);
    s.assign(buf, r.ptr);
    e = s.find('e');
    mant = s.substr(0, e);
    exp = s.substr(e + 1);
    while (mant.back() == '0') mant.pop_back();
  }
  if (mant.find('.') == std::string::npos) mant += '.';
  char sign = exp[0];
  std::string digits = exp.substr(1);
  while (digits.size() > 2 && digits[0] == '0') digits.erase(digits.begin());
  return mant + "e" + sign + digits;
}

struct FloatFormat {
  bool exp = false;
  size_t pad_left = 0, pad_right = 0;  // integer part (with sign), fraction part (with '.')
  size_t exp_width = 0;

  explicit FloatFormat(const std::vector<float>& shown) {
    double max_val = 0, min_val = 0;
    bool any = false;
    for (float v : shown) {
      if (!std::isfinite(v) || v == 0) continue;
      double a = std::fabs(static_cast<double>(v));
      if (!any) max_val = min_val = a;
      max_val = std::max(max_val, a);
      min_val = std::min(min_val, a);
      any = true;
    }
    exp = any && (max_val >= 1e8 || min_val < 0.0001 || max_val / min_val > 1000.0);
    for (float v : shown) {
      if (!std::isfinite(v)) continue;
      std::string s = exp ? scientific(v) : positional(v);
      size_t dot = s.find('.');
      size_t e = s.find('e');
      pad_left = std::max(pad_left, dot);
      pad_right = std::max(pad_right, (e == std::string::npos ? s.size() : e) - dot);
      if (e != std::string::npos) exp_width = std::max(exp_width, s.size() - e);
    }
  }

  std::string operator()(float v) const {
    if (!std::isfinite(v)) {
      std::string s = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
      size_t width = pad_left + pad_right + exp_width;
      return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
    }
    std::string s = exp ? scientific(v) : positional(v);
    size_t dot = s.find('.');
    size_t e = s.find('e');
    std::string mant = s.substr(0, e), tail = e == std::string::npos ? "" : s.substr(e);
    std::string out(pad_left - dot, ' ');
    out += mant;
    out.append(pad_right - (mant.size() - dot), ' ');
    if (exp) {
      // exponent digits padded with zeros to a common width: e+05, e-10
      std::string sign = tail.substr(0, 2), digits = tail.substr(2);
      while (sign.size() + digits.size() < exp_width) digits.insert(digits.begin(), '0');
      out += sign + digits;
    }
    return out;
  }
};

bool summarise(const Tensor& t) { return t.numel() > kThreshold; }

// The elements numpy looks at to choose the format (the shown ones when summarised).
void collect_shown(const Tensor& t, size_t level, int64_t offset, bool summ, std::vector<float>& out) {
  const Shape& shape = t.shape();
  if (level == shape.size()) {
    out.push_back(t[offset]);
    return;
  }
  int64_t stride = 1;
  for (size_t i = level + 1; i < shape.size(); ++i) stride *= shape[i];
  int64_t n = shape[level];
  for (int64_t i = 0; i < n; ++i) {
    if (summ && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect_shown(t, level + 1, offset + i * stride, summ, out);
  }
}

// numpy's _formatArray, simplified: rows wrap at kLineWidth, blocks are separated by blank lines.
void format_block(const Tensor& t, const FloatFormat& ff, size_t level, int64_t offset, bool summ,
                  const std::string& indent, std::string& out) {
  const Shape& shape = t.shape();
  int64_t n = shape[level];
  int64_t stride = 1;
  for (size_t i = level + 1; i < shape.size(); ++i) stride *= shape[i];
  std::string next_indent = indent + ' ';
  out += '[';
  if (level + 1 == shape.size()) {
    size_t line_start = out.rfind('\n');
    size_t col = out.size() - (line_start == std::string::npos ? 0 : line_start + 1);
    for (int64_t i = 0; i < n; ++i) {
      std::string word;
      if (summ && n > 2 * kEdgeItems && i == kEdgeItems) {
        word = "...";
        i = n - kEdgeItems - 1;
      } else {
        word = ff(t[offset + i * stride]);
      }
      bool last = i == n - 1;
      size_t need = word.size() + (last ? 1 + level : 1);  // ',' or the closing brackets
      if (col > next_indent.size() && col + (col > next_indent.size() ? 1 : 0) + need > static_cast<size_t>(kLineWidth)) {
        out.back() == ' ' ? out.pop_back() : void();
        out += '\n';
        out += next_indent;
        col = next_indent.size();
      }
      out += word;
      col += word.size();
      if (!last) {
        out += ", ";
        col += 2;
      }
    }
  } else {
    std::string sep = "," + std::string(shape.size() - level - 1, '\n') + next_indent;
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += sep;
      if (summ && n > 2 * kEdgeItems && i == kEdgeItems) {
        out += "...";
        out += sep;
        i = n - kEdgeItems;
      }
      format_block(t, ff, level + 1, offset + i * stride, summ, next_indent, out);
    }
  }
  out += ']';
}

void print_value(const Value& v, const std::string& name, std::string& out) {
  if (v.is_bundle()) {
    for (const auto& [key, member] : v.members()) print_value(member, name.empty() ? key : name + "/" + key, out);
    return;
  }
  std::string prefix = name.empty() ? "" : name + ": ";
  if (!v.is_tensor()) {
    out += prefix + "(not a tensor: " + v.why() + ")\n";
    return;
  }
  const Tensor& t = v.tensor();
  std::string head = prefix + "tensor(";
  out += head + format_array(t, static_cast<int>(head.size())) + ", shape=" + t.shape_str() + ")\n";
}

}  // namespace

std::string format_array(const Tensor& t, int indent) {
  if (t.rank() == 0) {
    std::vector<float> one{t[0]};
    FloatFormat ff(one);
    std::string s = ff(t[0]);
    return s;
  }
  if (t.numel() == 0) {
    std::string s;
    for (int i = 0; i < t.rank(); ++i) s += '[';
    for (int i = 0; i < t.rank(); ++i) s += ']';
    return s;
  }
  bool summ = summarise(t);
  std::vector<float> shown;
  collect_shown(t, 0, 0, summ, shown);
  FloatFormat ff(shown);
  std::string out;
  format_block(t, ff, 0, 0, summ, std::string(static_cast<size_t>(indent), ' '), out);
  return out;
}

std::string pretty_print(const Value& v) {
  std::string out;
  print_value(v, "", out);
  return out;
}

}  // namespace attnkit::io
