#include "attnkit/io/reference.hpp"

#include <cmath>

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

std::string Reference::text() const {
  if (names.empty()) return path;
  return fmt::format("{}#{}", path, fmt::join(names, "/"));
}

bool is_stdin(std::string_view ref) { return !ref.empty() && ref[0] == '-' && (ref.size() == 1 || ref[1] == '#'); }

std::string display_name(std::string_view ref) {
  if (is_stdin(ref)) return "<stdin>" + std::string(ref.substr(1));
  return std::string(ref);
}

Reference parse_reference(std::string_view ref) {
  Reference r;
  size_t hash = ref.find('#');
  r.path = std::string(ref.substr(0, hash));
  AK_CHECK(!r.path.empty(), "reference \"{}\": no file before '#' (use - for standard input)", ref);
  if (hash == std::string_view::npos) return r;
  std::string_view rest = ref.substr(hash + 1);
  AK_CHECK(!rest.empty(), "reference \"{}\": no name after '#'", ref);
  for (;;) {
    size_t slash = rest.find('/');
    std::string_view name = rest.substr(0, slash);
    AK_CHECK(!name.empty(), "reference \"{}\": empty name between '/'", ref);
    r.names.emplace_back(name);
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  return r;
}

int64_t find_nan(const Tensor& t) {
  const float* d = t.data();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(d[i])) return i;
  return -1;
}

size_t Sources::stdin_records() {
  if (!stdin_read_) {
    std::string text = read_text("-");
    stdin_ = parse_json_stream(text, "<stdin>", options_);
    stdin_read_ = true;
    if (stdin_.empty()) {  // where the input ends, for the "empty input" message
      int64_t line = 1, col = 1;
      for (char c : text) {
        if (c == '\n') ++line, col = 1;
        else ++col;
      }
      stdin_end_ = fmt::format("{}:{}", line, col);
    }
  }
  return stdin_.size();
}

void Sources::select_stdin_record(size_t index) {
  AK_CHECK(index < stdin_records(), "<stdin>: no record {} (has {})", index + 1, stdin_.size());
  stdin_index_ = index;
}

const Value& Sources::document(const std::string& path) {
  if (path == "-") {
    size_t n = stdin_records();
    AK_CHECK(n > 0, "<stdin>:{}: empty input, expected a JSON value", stdin_end_);
    AK_CHECK(n == 1 || stdin_index_ < n, "<stdin>: no record {}", stdin_index_ + 1);
    return stdin_[stdin_index_];
  }
  auto it = files_.find(path);
  if (it == files_.end())
    it = files_.emplace(path, std::make_unique<Value>(parse_json(read_text(path), path, options_))).first;
  return *it->second;
}

const Value& Sources::value(std::string_view ref_text) {
  Reference ref = parse_reference(ref_text);
  const Value* v = &document(ref.path);
  std::string at = ref.path == "-" ? "<stdin>" : ref.path;
  for (const auto& name : ref.names) {
    if (!v->is_bundle()) {
      if (v->kind() == Value::Kind::Other) fail("{}: cannot take \"{}\" from {}", at, name, v->why());
      fail("{}: is a tensor of shape {}, not a bundle; cannot take \"{}\"", at, v->tensor().shape_str(), name);
    }
    const Value* member = v->find(name);
    if (!member) {
      auto names = v->names();
      fail("{}: no tensor named \"{}\" (has: {})", at, name, names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", ")));
    }
    at += (at.find('#') == std::string::npos ? "#" : "/") + name;
    v = member;
  }
  return *v;
}

const Value& Sources::tensor_or_bundle(std::string_view ref_text) {
  const Value& v = value(ref_text);
  if (v.kind() == Value::Kind::Other) fail("{}: not a tensor: {}", display_name(ref_text), v.why());
  return v;
}

Tensor Sources::tensor(std::string_view ref_text, std::string_view role, bool allow_nan) {
  const Value& v = value(ref_text);
  std::string label = role.empty() ? display_name(ref_text) : fmt::format("{} ({})", role, ref_text);
  if (v.is_bundle()) {
    auto names = v.names();
    fail("{}: is a bundle, not a tensor (has: {}); pick one with #NAME", label,
         names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", ")));
  }
  if (v.kind() == Value::Kind::Other) fail("{}: not a tensor: {}", label, v.why());
  const Tensor& t = v.tensor();
  if (!allow_nan) {
    int64_t i = find_nan(t);
    AK_CHECK(i < 0, "{}: tensor of shape {} has NaN at {} (pass --allow-nan to accept it)", label, t.shape_str(),
             shape_str(unravel_index(i, t.shape())));
  }
  return t;
}

}  // namespace attnkit::io
