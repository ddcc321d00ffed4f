#include "attnkit/io/reference.hpp"

#include <cmath>
#include <memory>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/slice.hpp"

namespace attnkit::io {

std::string Reference::text() const {
  if (names.empty()) return path;
  return fmt::format("{}#{}{}", path, fmt::join(names, "/"), index.empty() ? "" : "[" + index + "]");
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
  for (size_t i = 0; i + 1 < r.names.size(); ++i)
    AK_CHECK(r.names[i].find('[') == std::string::npos,
             "reference \"{}\": write an index after a name, as in #h_n[-1] or #output[:,0]", ref);
  std::string& last = r.names.back();  // #h_n[-1]: an index after the last name
  const size_t open = last.find('[');
  if (open != std::string::npos) {
    AK_CHECK(last.back() == ']' && open > 0 && open + 2 < last.size() && last.find_first_of("[]", open + 1) == last.size() - 1,
             "reference \"{}\": write an index after a name, as in #h_n[-1] or #output[:,0]", ref);
    r.index = last.substr(open + 1, last.size() - open - 2);
    last.resize(open);
  }
  return r;
}

Value select_prefix(const Value& bundle, const std::string& prefix, const std::string& at) {
  Value out = Value::bundle();
  const std::string whole = prefix.substr(0, prefix.size() - 1);
  for (const auto& [name, member] : bundle.members()) {
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
      AK_CHECK(out.find(name.substr(prefix.size())) == nullptr, "{}: \"{}\" is given twice under the prefix {}", at,
               name.substr(prefix.size()), prefix);
      out.append(name.substr(prefix.size()), member);
    } else if (name == whole && member.is_bundle()) {
      for (const auto& [n, m] : member.members()) out.set(n, m);
    }
  }
  if (out.members().empty()) {
    auto names = bundle.names();
    fail("{}: no member starts with \"{}\" (has: {})", at, prefix, names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", ")));
  }
  return out;
}

int64_t find_nan(const Tensor& t) {
  const float* d = t.data();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(d[i])) return i;
  return -1;
}

struct Sources::Input {
  std::string path;
  RecordReader reader;
  Value current, next;
  size_t count = 0;     // records read
  bool ended = false;   // no record after the last one read
  bool single = false;  // must hold one document (single_value)
  Input(const std::string& p, const ReadOptions& o) : path(p), reader(p, o) {}
};

Sources::Sources(ReadOptions options) : options_(options) {}
Sources::~Sources() = default;

Sources::Input& Sources::input(const std::string& path) {
  for (auto& in : inputs_)
    if (in->path == path) return *in;
  auto in = std::make_unique<Input>(path, options_);
  in->reader.next(in->current);  // an input without a document throws ("empty input")
  in->count = 1;
  inputs_.push_back(std::move(in));
  return *inputs_.back();
}

const Value& Sources::document(const std::string& path) { return input(path).current; }

const Value& Sources::single_value(std::string_view ref, std::string_view role) {
  Input& in = input(parse_reference(ref).path);
  if (!in.single) {
    in.single = true;
    Value more;
    AK_CHECK(in.count == 1 && !in.reader.next(more), "{}: holds more than one record; {} take{} one document",
             in.reader.source(), role, role.size() > 1 && role.back() == 's' ? "" : "s");
    in.ended = true;
  }
  return value(ref);
}

bool Sources::streaming() const {
  for (const auto& in : inputs_)
    if (in->count > 1) return true;
  return false;
}

bool Sources::next_record() {
  bool more = false;
  for (auto& in : inputs_) {
    if (in->ended) continue;
    if (in->reader.next(in->next)) {
      ++in->count;
      more = true;
    } else {
      in->ended = true;
    }
  }
  if (!more) return false;
  // Streams are paired record by record: one that ended while another goes on is refused (an
  // input of one document goes with every record).
  const Input* longer = nullptr;
  for (const auto& in : inputs_)
    if (in->count == record_ + 2) longer = in.get();
  for (const auto& in : inputs_)
    if (in->ended && in->count > 1)
      fail("{} ends after {} records, {} has more: streams are paired record by record and must hold as many",
           in->reader.source(), in->count, longer->reader.source());
  for (auto& in : inputs_)
    if (!in->ended) std::swap(in->current, in->next);
  made_.clear();
  ++record_;
  return true;
}

const Value& Sources::value(std::string_view ref_text) {
  Reference ref = parse_reference(ref_text);
  const Value* v = &document(ref.path);
  std::string at = ref.path == "-" ? "<stdin>" : ref.path;
  for (const auto& name : ref.names) {
    if (!v->is_bundle()) {
      if (v->kind() == Value::Kind::Other || v->is_string()) fail("{}: cannot take \"{}\" from {}", at, name, v->why());
      fail("{}: is a tensor of shape {}, not a bundle; cannot take \"{}\"", at, v->tensor().shape_str(), name);
    }
    if (name.size() > 1 && name.back() == '.') {  // #enc. : the members enc.*, prefix stripped
      made_.push_back(std::make_unique<Value>(select_prefix(*v, name, at)));
      at += (at.find('#') == std::string::npos ? "#" : "/") + name;
      v = made_.back().get();
      continue;
    }
    const Value* member = v->find(name);
    if (!member) {
      auto names = v->names();
      fail("{}: no tensor named \"{}\" (has: {})", at, name, names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", ")));
    }
    at += (at.find('#') == std::string::npos ? "#" : "/") + name;
    v = member;
  }
  if (!ref.index.empty()) {  // #h_n[-1]
    if (!v->is_tensor()) fail("{}: is not a tensor; [{}] indexes a tensor", at, ref.index);
    try {
      made_.push_back(std::make_unique<Value>(index(v->tensor(), ref.index)));
    } catch (const Error& e) {
      fail("{}[{}]: {}", at, ref.index, e.what());
    }
    v = made_.back().get();
  }
  return *v;
}

const Value& Sources::tensor_or_bundle(std::string_view ref_text) {
  const Value& v = value(ref_text);
  if (v.kind() == Value::Kind::Other || v.is_string()) fail("{}: not a tensor: {}", display_name(ref_text), v.why());
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
  if (v.kind() == Value::Kind::Other || v.is_string()) fail("{}: not a tensor: {}", label, v.why());
  const Tensor& t = v.tensor();
  if (!allow_nan) {
    int64_t i = find_nan(t);
    AK_CHECK(i < 0, "{}: tensor of shape {} has NaN at {} (pass --allow-nan to accept it)", label, t.shape_str(),
             shape_str(unravel_index(i, t.shape())));
  }
  return t;
}

}  // namespace attnkit::io
