#include "attnkit/models/fields.hpp"

#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace attnkit::models {

io::Value text_value(std::string_view text) { return io::Value::string(std::string(text)); }

io::Value real_value(double x) { return text_value(fmt::format("{}", x)); }

Fields::Fields(const io::Value& bundle, std::string what, std::string label)
    : bundle_(bundle), what_(std::move(what)), label_(std::move(label)) {
  AK_CHECK(bundle.is_bundle(), "{}: expected an object", what_);
}

const io::Value& Fields::member(std::string_view name) const {
  const io::Value* v = bundle_.find(name);
  AK_CHECK(v != nullptr, "{}: missing {}\"{}\"", what_, label_, name);
  return *v;
}

std::optional<std::string> Fields::text_if(std::string_view name) const {
  const io::Value* v = bundle_.find(name);
  if (v == nullptr) return std::nullopt;
  if (v->is_tensor()) {
    AK_CHECK(v->tensor().numel() == 1 && v->tensor().rank() == 0, "{}: {}\"{}\" must be a number, not a tensor {}",
             what_, label_, name, v->tensor().shape_str());
    const float x = v->tensor()[0];
    AK_CHECK(std::isfinite(x), "{}: {}\"{}\" is {}", what_, label_, name, x);
    return fmt::format("{}", x);
  }
  if (v->is_string()) return v->str();
  if (v->kind() == io::Value::Kind::Other) {  // made by hand: Value::other(why, JSON text)
    const nlohmann::json j = nlohmann::json::parse(v->json(), nullptr, false);
    if (j.is_string()) return j.get<std::string>();
    if (j.is_boolean()) return std::string(j.get<bool>() ? "true" : "false");
  }
  fail("{}: {}\"{}\" must be a string, number or boolean", what_, label_, name);
}

std::string Fields::text(std::string_view name) const {
  std::optional<std::string> t = text_if(name);
  AK_CHECK(t.has_value(), "{}: missing {}\"{}\"", what_, label_, name);
  return std::move(*t);
}

std::string Fields::text(std::string_view name, std::string_view fallback) const {
  std::optional<std::string> t = text_if(name);
  return t ? std::move(*t) : std::string(fallback);
}

int64_t Fields::parse_integer(std::string_view name, const std::string& s) const {
  int64_t x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  AK_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "{}: {}\"{}\" is \"{}\", not an integer",
           what_, label_, name, s);
  return x;
}

int64_t Fields::integer(std::string_view name, int64_t lo, int64_t hi) const {
  const int64_t x = parse_integer(name, text(name));
  AK_CHECK(x >= lo && x <= hi, "{}: {}\"{}\" is {}, expected {} to {}", what_, label_, name, x, lo, hi);
  return x;
}

int64_t Fields::integer(std::string_view name, int64_t fallback, int64_t lo, int64_t hi) const {
  return has(name) ? integer(name, lo, hi) : fallback;
}

int64_t Fields::count(std::string_view name) const {
  const std::string s = text(name);
  int64_t x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  AK_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty() && x >= 0,
           "{}: {}\"{}\" is \"{}\", not a non-negative integer", what_, label_, name, s);
  return x;
}

uint64_t Fields::u64(std::string_view name) const {
  const std::string s = text(name);
  uint64_t x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  AK_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "{}: {}\"{}\" is \"{}\", not an integer",
           what_, label_, name, s);
  return x;
}

double Fields::real(std::string_view name) const {
  const std::string s = text(name);
  double x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  AK_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty() && std::isfinite(x),
           "{}: {}\"{}\" is \"{}\", not a number", what_, label_, name, s);
  return x;
}

float Fields::real32(std::string_view name, float fallback) const {
  const std::optional<std::string> s = text_if(name);
  if (!s) return fallback;
  float x = 0;
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), x);
  AK_CHECK(ec == std::errc() && end == s->data() + s->size() && !s->empty() && std::isfinite(x),
           "{}: {}\"{}\" is \"{}\", not a number", what_, label_, name, *s);
  return x;
}

bool Fields::boolean(std::string_view name) const {
  const std::string s = text(name);
  AK_CHECK(s == "true" || s == "false", "{}: {}\"{}\" is \"{}\", expected true or false", what_, label_, name, s);
  return s == "true";
}

bool Fields::boolean(std::string_view name, bool fallback) const { return has(name) ? boolean(name) : fallback; }

void Fields::rethrow_where(const Error& e) const {
  if (std::string_view(e.what()).rfind(what_, 0) == 0) throw e;
  std::string_view label = label_;
  while (!label.empty() && label.back() == ' ') label.remove_suffix(1);
  if (label.empty()) fail("{}: {}", what_, e.what());
  fail("{}: {}: {}", what_, label, e.what());
}

}  // namespace attnkit::models
