#include "attnkit/io/binary_format.hpp"

#include <cmath>
#include <set>
#include <unordered_map>

#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io::binary {

namespace {

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half -> float (exact: every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    int e = -1;  // subnormal: normalise
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    return bits_to_float(sign | ((127 - 15 - e) << 23) | ((mant & 0x3ff) << 13));
  }
  return bits_to_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Whether an integer of this magnitude is a float32 exactly: its odd part fits in 24 bits.
bool exact_in_float(uint64_t magnitude) {
  if (magnitude == 0) return true;
  return (magnitude >> __builtin_ctzll(magnitude)) < (uint64_t{1} << 24);
}

// Converts n elements at `src` into `dst`; tells options.note (once) when a value changed.
void convert(const unsigned char* src, const DTypeInfo& dt, bool swap, int64_t n, const Shape& shape, float* dst,
             const std::string& what, const ReadOptions& options) {
  int64_t changed = 0, first = -1;
  double first_value = 0;
  auto lost = [&](int64_t i, double original) {
    if (changed++ == 0) first = i, first_value = original;
  };
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char* p = src + i * dt.size;
    switch (dt.type) {
      case DType::F32: dst[i] = bits_to_float(load32(p, swap)); break;
      case DType::F16: dst[i] = half_to_float(load16(p, swap)); break;
      case DType::BF16: dst[i] = bits_to_float(static_cast<uint32_t>(load16(p, swap)) << 16); break;
      case DType::F64: {
        const uint64_t u = load64(p, swap);
        double d;
        std::memcpy(&d, &u, 8);
        dst[i] = static_cast<float>(d);
        if (!std::isnan(d) && static_cast<double>(dst[i]) != d) lost(i, d);
        break;
      }
      case DType::I8: dst[i] = static_cast<float>(static_cast<int8_t>(*p)); break;
      case DType::U8: dst[i] = static_cast<float>(*p); break;
      case DType::Bool: dst[i] = *p ? 1.0f : 0.0f; break;
      case DType::I16: dst[i] = static_cast<float>(static_cast<int16_t>(load16(p, swap))); break;
      case DType::U16: dst[i] = static_cast<float>(load16(p, swap)); break;
      case DType::I32: {
        const int32_t v = static_cast<int32_t>(load32(p, swap));
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v < 0 ? uint64_t{0} - static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v))) lost(i, v);
        break;
      }
      case DType::U32: {
        const uint32_t v = load32(p, swap);
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v)) lost(i, v);
        break;
      }
      case DType::I64: {
        const int64_t v = static_cast<int64_t>(load64(p, swap));
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v))) lost(i, static_cast<double>(v));
        break;
      }
      case DType::U64: {
        const uint64_t v = load64(p, swap);
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v)) lost(i, static_cast<double>(v));
        break;
      }
    }
  }
  if (changed && options.note)
    options.note(fmt::format("{}: {} rounded to float32: {} of {} values changed (first at {}: {} -> {})", what, dt.name,
                             changed, n, shape_str(unravel_index(first, shape)), first_value, static_cast<double>(dst[first])));
}

}  // namespace

// numel of a shape from a file: each size and the product checked (overflow, max_elements).
int64_t checked_numel(const Shape& shape, const std::string& what, const ReadOptions& options) {
  AK_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), "{}: shape {} has {} dimensions, more than {}", what,
           shape_str(shape), shape.size(), kMaxRank);
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    AK_CHECK(d >= 0, "{}: shape {} has a negative size", what, shape_str(shape));
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  AK_CHECK(!overflow && n <= options.max_elements, "{}: shape {} has more than {} elements (see --max-elements)", what,
           shape_str(shape), options.max_elements);
  return n;
}

Tensor make_tensor(const unsigned char* data, const DTypeInfo& dt, bool swap, const Shape& shape, int64_t n,
                   const std::string& what, const ReadOptions& options) {
  Tensor t{Shape(shape)};
  convert(data, dt, swap, n, shape, t.data(), what, options);
  return t;
}

// Names joined by '.', tensors only: the members a flat file holds.
void flatten(const Value& v, const std::string& prefix, std::vector<std::pair<std::string, const Tensor*>>& out,
             std::string_view target, std::string_view format) {
  for (const auto& [name, member] : v.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (member.is_bundle()) {
      flatten(member, full, out, target, format);
    } else if (member.is_tensor()) {
      out.emplace_back(full, &member.tensor());
    } else {
      fail("{}: member \"{}\" is not a tensor ({}); {} holds tensors only (write JSON to keep it)", target, full,
           member.why(), format);
    }
  }
}

namespace {

std::vector<std::pair<std::string, const Tensor*>> flat_members(const Value& value, std::string_view target,
                                                                 std::string_view format) {
  AK_CHECK(value.is_bundle(), "{}: {} holds a bundle of named tensors, and this is one tensor of shape {} (name it: tensor pack NAME=FILE -o {})",
           target, format, value.is_tensor() ? value.tensor().shape_str() : std::string("?"), target);
  std::vector<std::pair<std::string, const Tensor*>> out;
  flatten(value, "", out, target, format);
  std::set<std::string> seen;
  for (const auto& [name, t] : out)
    AK_CHECK(seen.insert(name).second, "{}: two members are named \"{}\" once nested names are joined with '.'", target, name);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Documents: bundles that hold more than tensors (io/tensor_file.hpp, "Documents")

bool holds_other(const Value& v) {
  for (const auto& [name, m] : v.members())
    if (m.is_bundle() ? holds_other(m) : !m.is_tensor()) return true;
  return false;
}

// `v` with each tensor replaced by null; the tensors into `out` under their names joined by '.'.
Value skeleton_of(const Value& v, const std::string& prefix, std::vector<std::pair<std::string, const Tensor*>>& out,
                  std::string_view target) {
  Value s = Value::bundle();
  for (const auto& [name, m] : v.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    AK_CHECK(m.kind() != Value::Kind::Other || m.json() != "null",
             "{}: member \"{}\" is null, which {} uses to place tensors (write JSON to keep it)", target, full,
             kMetaName);
    if (m.is_tensor()) {
      out.emplace_back(full, &m.tensor());
      s.append(name, Value::other("a tensor", "null"));
    } else if (m.is_bundle()) {
      s.append(name, skeleton_of(m, full, out, target));
    } else {
      s.append(name, m);
    }
  }
  return s;
}

// Puts the tensors `items` where the skeleton `s` has null (by joined name), marking them used.
// Every tensor's joined name must be new (written back, the names must not collide) and not one the formats
// reserve.
Value place_tensors(const Value& s, const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& items,
                    const std::unordered_map<std::string, size_t>& index, std::vector<bool>& used,
                    std::set<std::string>& names, const std::string& what) {
  Value out = Value::bundle();
  for (const auto& [name, m] : s.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    const bool placed = m.kind() == Value::Kind::Other && m.json() == "null";
    if (placed || m.is_tensor()) {
      AK_CHECK(names.insert(full).second, "{}: {} has two tensors named \"{}\" once nested names are joined with '.'",
               what, kMetaName, full);
      AK_CHECK(full != kMetaName && full != "__metadata__", "{}: {} names a tensor \"{}\", a name the files reserve",
               what, kMetaName, full);
    }
    if (m.is_bundle()) {
      out.append(name, place_tensors(m, full, items, index, used, names, what));
    } else if (placed) {
      const auto it = index.find(full);
      AK_CHECK(it != index.end(), "{}: {} places a tensor \"{}\" that the file does not hold", what, kMetaName, full);
      AK_CHECK(!used[it->second], "{}: {} places the tensor \"{}\" twice", what, kMetaName, full);
      used[it->second] = true;
      out.append(name, Value(std::move(items[it->second].second)));
    } else {
      out.append(name, m);
    }
  }
  return out;
}

}  // namespace

FlatFile flat_file(const Value& value, std::string_view target, std::string_view format) {
  FlatFile f;
  if (!value.is_bundle() || !holds_other(value)) {
    f.tensors = flat_members(value, target, format);
  } else {
    f.meta = to_json(skeleton_of(value, "", f.tensors, target));
    std::set<std::string> seen;
    for (const auto& [name, t] : f.tensors)
      AK_CHECK(seen.insert(name).second, "{}: two tensors are named \"{}\" once nested names are joined with '.'", target,
               name);
  }
  for (const auto& [name, t] : f.tensors) {
    AK_CHECK(format != ".npz" || name != kMetaName,
             "{}: a tensor named \"{}\" would collide with the member that holds a document's other values", target,
             kMetaName);
    AK_CHECK(format != ".safetensors" || name != "__metadata__", "{}: a tensor cannot be named \"__metadata__\" in {}",
             target, format);
  }
  return f;
}


// The bundle a binary file reads as: its tensors in file order, or with `meta` the document it describes.
Value assemble(std::vector<std::pair<std::string, Tensor>> items, const std::optional<std::string>& meta,
               const std::string& what, const ReadOptions& options) {
  Value out = Value::bundle();
  if (!meta) {
    for (auto& [name, t] : items) out.append(std::move(name), Value(std::move(t)));
    return out;
  }
  const std::string where = what + "#" + kMetaName;
  const Value skeleton = parse_json(*meta, where, options);
  AK_CHECK(skeleton.is_bundle(), "{}: the document is not a JSON object{}", where,
           (skeleton.kind() == Value::Kind::Other || skeleton.is_string()) ? " (" + skeleton.why() + ")" : std::string());
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < items.size(); ++i) index.emplace(items[i].first, i);
  std::vector<bool> used(items.size());
  std::set<std::string> names;
  out = place_tensors(skeleton, "", items, index, used, names, what);
  for (size_t i = 0; i < items.size(); ++i)
    AK_CHECK(used[i], "{}#{}: a tensor that the document in {} does not place", what, items[i].first, kMetaName);
  if (holds_other(out)) return out;
  // tensors only: a flat bundle, as such a bundle is written (and would read back)
  std::vector<std::pair<std::string, const Tensor*>> flat;
  flatten(out, "", flat, what, "a bundle");
  Value bundle = Value::bundle();
  for (const auto& [name, t] : flat) bundle.append(name, Value(*t));
  return bundle;
}

void append_le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
void append_le16(std::string& s, uint16_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>(v >> 8);
}
void append_floats(std::string& s, const Tensor& t) {
  static_assert(sizeof(float) == 4, "float32");
  const size_t at = s.size();
  s.resize(at + static_cast<size_t>(t.numel()) * 4);
  if (t.numel()) std::memcpy(&s[at], t.data(), static_cast<size_t>(t.numel()) * 4);  // little-endian hosts
}

}  // namespace attnkit::io::binary
