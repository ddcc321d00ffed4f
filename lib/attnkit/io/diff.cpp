#include "attnkit/io/diff.hpp"

#include <fmt/format.h>

#include "attnkit/io/reference.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {
namespace {

Tensor shape_tensor(const Shape& s) {
  Tensor t(Shape{static_cast<int64_t>(s.size())});
  for (size_t i = 0; i < s.size(); ++i) t[static_cast<int64_t>(i)] = static_cast<float>(s[i]);
  return t;
}

struct Sides {
  const std::string& a;
  const std::string& b;
};

void walk(const Value* a, const Value* b, const std::string& name, const Tolerance& tol, bool allow_nan,
          const Sides& sides, DiffReport& r) {
  MemberDiff m;
  m.name = name;
  std::string label = name.empty() ? "tensor" : "\"" + name + "\"";
  if (a && b && a->is_bundle() && b->is_bundle()) {
    for (const auto& [key, value] : a->members()) walk(&value, b->find(key), name.empty() ? key : name + "/" + key, tol, allow_nan, sides, r);
    for (const auto& [key, value] : b->members())
      if (!a->find(key)) walk(nullptr, &value, name.empty() ? key : name + "/" + key, tol, allow_nan, sides, r);
    return;
  }
  if (!a || !b) {
    m.problem = fmt::format("{} is only in {}", label, a ? sides.a : sides.b);
  } else if (!a->is_tensor() || !b->is_tensor()) {
    const Value* bad = !a->is_tensor() ? a : b;
    m.problem = fmt::format("{} in {} is {}", label, bad == a ? sides.a : sides.b,
                            bad->is_bundle() ? "a bundle" : "not a tensor: " + bad->why());
  } else {
    for (const Value* v : {a, b}) {
      int64_t i = allow_nan ? -1 : find_nan(v->tensor());
      AK_CHECK(i < 0, "{} in {} has NaN at {} (pass --allow-nan to compare NaNs as equal)", label, v == a ? sides.a : sides.b,
               shape_str(unravel_index(i, v->tensor().shape())));
    }
    m.shape_a = a->tensor().shape();
    m.shape_b = b->tensor().shape();
    m.comparison = compare(a->tensor(), b->tensor(), tol);
    if (!m.comparison.same_shape)
      m.problem = fmt::format("{} has shape {} in {} and {} in {}", label, shape_str(m.shape_a), sides.a, shape_str(m.shape_b), sides.b);
  }
  if (!m.problem.empty() || !m.comparison.close) r.equal = false;
  r.members.push_back(std::move(m));
}

Value member_value(const MemberDiff& m) {
  Value v = Value::bundle();
  bool equal = m.problem.empty() && m.comparison.close;
  v.set("equal", Value::boolean(equal));
  if (!m.problem.empty()) {
    v.set("problem", Value::other(m.problem));
    return v;
  }
  const Comparison& c = m.comparison;
  v.set("shape", shape_tensor(m.shape_a));
  v.set("mismatches", Tensor::scalar(static_cast<float>(c.mismatches)));
  v.set("max_abs_error", Tensor::scalar(static_cast<float>(c.max_abs_error)));
  v.set("max_abs_error_at", shape_tensor(c.max_abs_at));
  v.set("max_rel_error", Tensor::scalar(static_cast<float>(c.max_rel_error)));
  v.set("max_rel_error_at", shape_tensor(c.max_rel_at));
  if (!c.close) v.set("first_mismatch_at", shape_tensor(c.first_mismatch_at));
  return v;
}

bool nested(const Value& v) {
  for (const auto& [key, value] : v.members())
    if (value.is_bundle()) return true;
  return false;
}

// A bundle's members by their names joined with '.', as .npz and .safetensors store them.
void flatten_into(const Value& v, const std::string& prefix, Value& out) {
  for (const auto& [key, value] : v.members()) {
    if (value.is_bundle() && !value.members().empty()) flatten_into(value, prefix + key + ".", out);
    else out.append(prefix + key, value);
  }
}

Value flattened(const Value& v) {
  Value out = Value::bundle();
  flatten_into(v, "", out);
  return out;
}

}  // namespace

DiffReport diff(const Value& a, const Value& b, const Tolerance& tol, bool allow_nan, const std::string& name_a,
                const std::string& name_b) {
  DiffReport r;
  // one side nested, the other flat (a result written to .json and to .npz): compared by joined names
  if (a.is_bundle() && b.is_bundle() && nested(a) != nested(b)) {
    const Value fa = flattened(a), fb = flattened(b);
    walk(&fa, &fb, "", tol, allow_nan, Sides{name_a, name_b}, r);
    return r;
  }
  walk(&a, &b, "", tol, allow_nan, Sides{name_a, name_b}, r);
  return r;
}

Value DiffReport::to_value() const {
  if (members.size() == 1 && members[0].name.empty()) return member_value(members[0]);
  Value v = Value::bundle();
  v.set("equal", Value::boolean(equal));
  Value per = Value::bundle();
  for (const auto& m : members) per.set(m.name, member_value(m));
  v.set("members", std::move(per));
  return v;
}

std::string DiffReport::summary() const {
  std::vector<std::string> lines;
  for (const auto& m : members) {
    if (!m.problem.empty()) {
      lines.push_back(m.problem);
    } else if (!m.comparison.close) {
      const Comparison& c = m.comparison;
      lines.push_back(fmt::format("{}{} of {} values differ; largest absolute error {} at {}, largest relative error {} at {}",
                                  m.name.empty() ? "" : m.name + ": ", c.mismatches, shape_numel(m.shape_a),
                                  c.max_abs_error, shape_str(c.max_abs_at), c.max_rel_error, shape_str(c.max_rel_at)));
    }
  }
  return lines.empty() ? "equal" : fmt::format("{}", fmt::join(lines, "; "));
}

}  // namespace attnkit::io
