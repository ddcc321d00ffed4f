#include "attnkit/tensor/slice.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "attnkit/tensor/error.hpp"

namespace attnkit {

namespace {

struct AxisPick {
  int64_t start = 0, step = 1, count = 0;
  bool keep = true;  // a slice keeps the axis, an integer drops it
};

std::string trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

// Copies the picked elements: axis `level` of the source at offset `src`.
void gather(const Tensor& t, const std::vector<AxisPick>& picks, const std::vector<int64_t>& strides, size_t level,
            int64_t src, float*& dst) {
  if (level == picks.size()) {
    *dst++ = t.data()[src];
    return;
  }
  const AxisPick& p = picks[level];
  for (int64_t i = 0; i < p.count; ++i) gather(t, picks, strides, level + 1, src + (p.start + i * p.step) * strides[level], dst);
}

}  // namespace

Tensor index(const Tensor& t, const std::string& spec) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (;;) {
    size_t comma = spec.find(',', from);
    parts.push_back(trim(spec.substr(from, comma == std::string::npos ? std::string::npos : comma - from)));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  AK_CHECK(static_cast<int>(parts.size()) <= t.rank(), "index \"{}\": {} entries for a tensor of shape {} ({} axes)", spec,
           parts.size(), t.shape_str(), t.rank());
  std::vector<AxisPick> picks(static_cast<size_t>(t.rank()));
  Shape out;
  for (int axis = 0; axis < t.rank(); ++axis) {
    const int64_t n = t.dim(axis);
    AxisPick& p = picks[static_cast<size_t>(axis)];
    const std::string part = axis < static_cast<int>(parts.size()) ? parts[static_cast<size_t>(axis)] : ":";
    AK_CHECK(!part.empty(), "index \"{}\": entry {} is empty (write : for a whole axis)", spec, axis + 1);
    if (part.find(':') == std::string::npos) {
      int64_t i = 0;
      AK_CHECK(parse_int(part, i), "index \"{}\": \"{}\" is not an integer or a slice START:STOP:STEP", spec, part);
      AK_CHECK(i >= -n && i < n, "index \"{}\": {} is out of range for axis {} of size {} (tensor {})", spec, i, axis, n,
               t.shape_str());
      p.start = i < 0 ? i + n : i;
      p.count = 1;
      p.keep = false;
      continue;
    }
    std::vector<std::string> f;
    size_t s = 0;
    for (;;) {
      size_t colon = part.find(':', s);
      f.push_back(trim(part.substr(s, colon == std::string::npos ? std::string::npos : colon - s)));
      if (colon == std::string::npos) break;
      s = colon + 1;
    }
    AK_CHECK(f.size() <= 3, "index \"{}\": \"{}\" has more than START:STOP:STEP", spec, part);
    int64_t step = 1, start = 0, stop = 0;
    if (f.size() == 3 && !f[2].empty())
      AK_CHECK(parse_int(f[2], step) && step != 0, "index \"{}\": step \"{}\" is not a non-zero integer", spec, f[2]);
    auto field = [&](const std::string& text, int64_t fallback, int64_t lo, int64_t hi) {
      if (text.empty()) return fallback;
      int64_t v = 0;
      AK_CHECK(parse_int(text, v), "index \"{}\": \"{}\" is not an integer", spec, text);
      if (v < 0) v += n;
      return std::min(std::max(v, lo), hi);  // numpy clamps slice bounds
    };
    if (step > 0) {
      start = field(f[0], 0, 0, n);
      stop = field(f.size() > 1 ? f[1] : "", n, 0, n);
      p.count = stop > start ? (stop - start - 1) / step + 1 : 0;  // (no overflow for a step near INT64_MAX)
    } else {
      start = field(f[0], n - 1, -1, n - 1);
      stop = field(f.size() > 1 ? f[1] : "", -1, -1, n - 1);
      // -step overflows for INT64_MIN; any step past -n picks one element alike
      p.count = start > stop ? (start - stop - 1) / -std::max(step, -n - 1) + 1 : 0;
    }
    p.start = start;
    p.step = step;
    out.push_back(p.count);
  }
  std::vector<int64_t> strides(static_cast<size_t>(t.rank()), 1);
  for (int axis = t.rank() - 2; axis >= 0; --axis)
    strides[static_cast<size_t>(axis)] = strides[static_cast<size_t>(axis) + 1] * t.dim(axis + 1);
  Tensor r(out);
  float* dst = r.data();
  if (r.numel() > 0) gather(t, picks, strides, 0, 0, dst);
  return r;
}

namespace {

std::string label(const std::vector<std::string>& names, size_t i) {
  return i < names.size() ? names[i] : fmt::format("input {}", i + 1);
}

}  // namespace

Tensor concatenate(const std::vector<Tensor>& parts, int axis, const std::vector<std::string>& names) {
  AK_CHECK(!parts.empty(), "cat: no tensors");
  const Tensor& first = parts[0];
  const int rank = first.rank();
  AK_CHECK(rank > 0, "cat: {} is a scalar; cat joins along an axis (stack makes a new one)", label(names, 0));
  AK_CHECK(axis >= -rank && axis < rank, "cat: axis {} is out of range for shape {}", axis, first.shape_str());
  const int a = axis < 0 ? axis + rank : axis;
  Shape shape = first.shape();
  shape[static_cast<size_t>(a)] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    bool same = p.rank() == rank;
    for (int d = 0; same && d < rank; ++d) same = d == a || p.dim(d) == first.dim(d);
    AK_CHECK(same, "cat: {} has shape {}, {} has {}; they must agree on every axis but {}", label(names, i), p.shape_str(),
             label(names, 0), first.shape_str(), a);
    shape[static_cast<size_t>(a)] += p.dim(a);
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= first.dim(d);
  for (int d = a + 1; d < rank; ++d) inner *= first.dim(d);
  Tensor r(shape);
  float* dst = r.data();
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& p : parts) {
      const int64_t block = p.dim(a) * inner;
      std::copy(p.data() + o * block, p.data() + (o + 1) * block, dst);
      dst += block;
    }
  return r;
}

Tensor stack(const std::vector<Tensor>& parts, int axis, const std::vector<std::string>& names) {
  AK_CHECK(!parts.empty(), "stack: no tensors");
  const int rank = parts[0].rank();
  AK_CHECK(rank < kMaxRank, "stack: the result would have more than {} axes", kMaxRank);
  AK_CHECK(axis >= -(rank + 1) && axis <= rank, "stack: axis {} is out of range for {} axes", axis, rank + 1);
  const int a = axis < 0 ? axis + rank + 1 : axis;
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < parts.size(); ++i) {
    AK_CHECK(parts[i].shape() == parts[0].shape(), "stack: {} has shape {}, {} has {}; stacked tensors have one shape",
             label(names, i), parts[i].shape_str(), label(names, 0), parts[0].shape_str());
    Shape s = parts[i].shape();
    s.insert(s.begin() + a, 1);
    expanded.push_back(parts[i].reshaped(s));
  }
  return concatenate(expanded, a, names);
}

}  // namespace attnkit
