// A port of numpy's array printing for float32 (numpy/core/arrayprint.py, 1.24, legacy=False):
// FloatingFormat.fillFormat / __call__ for the numbers and _formatArray for the layout. Tested
// against numpy's own text in tests/fixtures/numpy/show (written by tests/fixtures/gen_numpy.py).
#include "attnkit/io/pretty_print.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace attnkit::io {
namespace {

constexpr int kPrecision = 8;
// numpy's line width 75, less the suffix "," that repr reserves for ", dtype=float32)".
constexpr size_t kLineWidth = 75 - 1;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// dragon4_positional(x, precision=8, unique=True, trim='.'): the shortest round-trip digits,
// rounded to at most 8 fraction digits, trailing zeros dropped, the '.' kept ("1.", "-0.25").
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

// dragon4_scientific(x, precision=8, unique=True, trim='.'): mantissa and exponent digits apart,
// e.g. 1.5e-05 -> {"1.5", "-", "05"}; the exponent has at least two digits.
struct Scientific {
  std::string mantissa;  // with the sign and the '.'
  char exp_sign = '+';
  std::string exp_digits;
};

Scientific scientific(float x, int digits = -1) {
  char buf[64];
  auto r = digits < 0 ? std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific)
                      : std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific, digits);
  std::string s(buf, r.ptr);
  size_t e = s.find('e');
  Scientific out;
  out.mantissa = s.substr(0, e);
  out.exp_sign = s[e + 1];
  out.exp_digits = s.substr(e + 2);
  while (out.exp_digits.size() > 2 && out.exp_digits[0] == '0') out.exp_digits.erase(out.exp_digits.begin());
  if (out.exp_digits.size() < 2) out.exp_digits.insert(out.exp_digits.begin(), '0');
  if (out.mantissa.find('.') == std::string::npos) out.mantissa += '.';
  return out;
}

Scientific scientific_unique(float x) {
  Scientific s = scientific(x);
  size_t dot = s.mantissa.find('.');
  if (s.mantissa.size() - dot - 1 > static_cast<size_t>(kPrecision)) {
    s = scientific(x, kPrecision);
    while (s.mantissa.back() == '0') s.mantissa.pop_back();
  }
  return s;
}

struct FloatFormat {
  bool exp = false;
  size_t pad_left = 0, pad_right = 0;
  size_t precision = 0, exp_size = 0;  // exponential mode: fraction digits, exponent digits

  explicit FloatFormat(const std::vector<float>& data) {
    std::vector<float> finite;
    bool any_neg_inf = false, any_non_finite = false;
    for (float v : data) {
      if (std::isfinite(v)) finite.push_back(v);
      else {
        any_non_finite = true;
        any_neg_inf = any_neg_inf || (std::isinf(v) && v < 0);
      }
    }
    double max_val = 0, min_val = 0;
    bool any = false;
    for (float v : finite) {
      if (v == 0) continue;
      double a = std::fabs(static_cast<double>(v));
      max_val = any ? std::max(max_val, a) : a;
      min_val = any ? std::min(min_val, a) : a;
      any = true;
    }
    exp = any && (max_val >= 1e8 || min_val < 0.0001 || max_val / min_val > 1000.0);
    if (finite.empty()) {
      pad_left = pad_right = 0;
    } else if (exp) {
      for (float v : finite) {
        Scientific s = scientific_unique(v);
        size_t dot = s.mantissa.find('.');
        pad_left = std::max(pad_left, dot);
        precision = std::max(precision, s.mantissa.size() - dot - 1);
        exp_size = std::max(exp_size, s.exp_digits.size());
      }
      pad_right = exp_size + 2 + precision;
    } else {
      for (float v : finite) {
        std::string s = positional(v);
        size_t dot = s.find('.');
        pad_left = std::max(pad_left, dot);
        pad_right = std::max(pad_right, s.size() - dot - 1);
      }
    }
    if (any_non_finite) {
      size_t offset = pad_right + 1;
      size_t nan_len = 3, inf_len = 3 + (any_neg_inf ? 1 : 0);
      if (nan_len > offset) pad_left = std::max(pad_left, nan_len - offset);
      if (inf_len > offset) pad_left = std::max(pad_left, inf_len - offset);
    }
  }

  std::string operator()(float v) const {
    if (!std::isfinite(v)) {
      std::string s = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
      size_t width = pad_left + pad_right + 1;
      return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
    }
    if (exp) {
      // numpy: precision = min_digits = the most fraction digits any shown value needs, so every
      // value is the exact one rounded to that many digits (6.6666669e-01, not 6.6666670e-01)
      Scientific s = scientific(v, static_cast<int>(precision));
      size_t dot = s.mantissa.find('.');
      std::string out(pad_left > dot ? pad_left - dot : 0, ' ');
      out += s.mantissa;
      out += 'e';
      out += s.exp_sign;
      out.append(exp_size > s.exp_digits.size() ? exp_size - s.exp_digits.size() : 0, '0');
      out += s.exp_digits;
      return out;
    }
    std::string s = positional(v);
    size_t dot = s.find('.');
    std::string out(pad_left > dot ? pad_left - dot : 0, ' ');
    out += s;
    out.append(pad_right - (s.size() - dot - 1), ' ');
    return out;
  }
};

int64_t stride_of(const Shape& shape, size_t axis) {
  int64_t stride = 1;
  for (size_t i = axis + 1; i < shape.size(); ++i) stride *= shape[i];
  return stride;
}

// numpy's _leading_trailing: the values numpy looks at to choose the format (the shown ones).
void collect_shown(const Tensor& t, size_t axis, int64_t offset, bool summarise, std::vector<float>& out) {
  const Shape& shape = t.shape();
  if (axis == shape.size()) {
    out.push_back(t[offset]);
    return;
  }
  int64_t stride = stride_of(shape, axis), n = shape[axis];
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect_shown(t, axis + 1, offset + i * stride, summarise, out);
  }
}

// numpy's _extendLine: wrap before `word` if the line would pass `width` (unless that cannot help).
void extend_line(std::string& s, std::string& line, const std::string& word, size_t width, const std::string& hanging) {
  bool wrap = line.size() + word.size() > width && line.size() > hanging.size();
  if (wrap) {
    size_t end = line.find_last_not_of(' ');
    s.append(line, 0, end == std::string::npos ? 0 : end + 1);
    s += '\n';
    line = hanging;
  }
  line += word;
}

struct Layout {
  const Tensor& t;
  const FloatFormat& ff;
  bool summarise;

  // numpy's _formatArray.recurser: the text of the block at `offset`, its first line already
  // standing at the hanging indent.
  std::string recurse(size_t axis, int64_t offset, const std::string& hanging, size_t width) const {
    const Shape& shape = t.shape();
    if (axis == shape.size()) return ff(t[offset]);
    std::string next_hanging = hanging + ' ';
    size_t next_width = width - 1;
    int64_t n = shape[axis], stride = stride_of(shape, axis);
    bool summary = summarise && 2 * kEdgeItems < n;
    int64_t leading = summary ? kEdgeItems : 0, trailing = summary ? kEdgeItems : n;
    std::string s;
    if (axis + 1 == shape.size()) {
      size_t elem_width = width - 1;  // room for ',' or ']'
      std::string line = hanging;
      for (int64_t i = 0; i < leading; ++i) {
        extend_line(s, line, recurse(axis + 1, offset + i * stride, next_hanging, next_width), elem_width, hanging);
        line += ", ";
      }
      if (summary) {
        extend_line(s, line, "...", elem_width, hanging);
        line += ", ";
      }
      for (int64_t i = trailing; i > 1; --i) {
        extend_line(s, line, recurse(axis + 1, offset + (n - i) * stride, next_hanging, next_width), elem_width, hanging);
        line += ", ";
      }
      extend_line(s, line, recurse(axis + 1, offset + (n - 1) * stride, next_hanging, next_width), elem_width, hanging);
      s += line;
    } else {
      std::string line_sep = "," + std::string(shape.size() - axis - 1, '\n');
      for (int64_t i = 0; i < leading; ++i)
        s += hanging + recurse(axis + 1, offset + i * stride, next_hanging, next_width) + line_sep;
      if (summary) s += hanging + "..." + line_sep;
      for (int64_t i = trailing; i > 1; --i)
        s += hanging + recurse(axis + 1, offset + (n - i) * stride, next_hanging, next_width) + line_sep;
      s += hanging + recurse(axis + 1, offset + (n - 1) * stride, next_hanging, next_width);
    }
    return "[" + s.substr(hanging.size()) + "]";
  }
};

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
  if (t.numel() == 0) return "[]";  // numpy prints every empty array so (the shape says the rest)
  bool summarise = t.numel() > kThreshold;
  std::vector<float> shown;
  collect_shown(t, 0, 0, summarise, shown);
  FloatFormat ff(shown);
  Layout layout{t, ff, summarise};
  // numpy: the hanging indent skips the prefix and the '['
  return layout.recurse(0, 0, std::string(static_cast<size_t>(std::max(indent, 0)) + 1, ' '), kLineWidth);
}

std::string pretty_print(const Value& v) {
  std::string out;
  print_value(v, "", out);
  return out;
}

}  // namespace attnkit::io
