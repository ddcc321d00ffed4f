// io::parse_json: the structure of a JSON document (values, arrays, tensors, objects), on the token
// level of io/json_scanner.hpp.
#include "attnkit/io/json_parser.hpp"

#include <charconv>
#include <cmath>
#include <unordered_set>

#include <fast_float/fast_float.h>

#include "attnkit/io/json_scanner.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

namespace {

using detail::is_ws;

// The numeric content of one nested array while it is being read.
struct TensorBuilder {
  std::vector<float> data;
  Shape dims;                 // dims[level], -1 until the first array of that level closes
  std::vector<int> leaf;      // per level: -1 unknown, 0 holds arrays, 1 holds numbers
  std::string problem;        // first reason this is not a tensor (with its position)
};

class Parser : detail::JsonScanner {
 public:
  Parser(std::string_view text, std::string_view source, const ReadOptions& options, int64_t first_line = 1)
      : JsonScanner(text, source, options, first_line) {}

  bool at_end() {
    skip_ws();
    return p_ == end_;
  }

  Value document() {
    skip_ws();
    if (p_ == end_) syntax_error("empty input, expected a JSON value");
    Value v = value(0);
    return v;
  }

  // After a document: only whitespace up to the end of its line (NDJSON) or the end of input.
  void end_of_document(bool stream) {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || (!stream && *p_ == '\n'))) ++p_;
    if (p_ == end_) return;
    if (stream && *p_ == '\n') return;
    syntax_error(stream ? "expected the end of the line after a JSON document" : "unexpected text after the JSON value");
  }

 private:
  // --- values ---
  // A value of any kind; a non-tensor keeps its JSON text.
  Value value(int depth) {
    const char* at = p_;
    Value v = any_value(depth);
    if (v.kind() == Value::Kind::Other) return Value::other(v.why(), compact(at, p_));
    if (v.is_string()) return Value::string(v.str(), v.why(), compact(at, p_));
    return v;
  }

  Value any_value(int depth) {
    if (p_ == end_) expected("a JSON value");
    const char* at = p_;
    switch (*p_) {
      case '[': return array(depth);
      case '{': return object(depth);
      case '"': {
        std::string s = string();
        float f;
        if (non_finite(s, f)) return Value(Tensor::scalar(f));
        return Value::string(std::move(s), fmt::format("a string ({})", where(at)), "");
      }
      case 't':
        if (literal("true")) return Value::other(fmt::format("true ({})", where(at)));
        break;
      case 'f':
        if (literal("false")) return Value::other(fmt::format("false ({})", where(at)));
        break;
      case 'n':
        if (literal("null")) return Value::other(fmt::format("null ({})", where(at)));
        break;
      default:
        if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) {
          float f = number();
          if (std::isinf(f)) {
            inf_at_ = nullptr;
            return Value::other(fmt::format("{} ({})", out_of_range(at, p_), where(at)));
          }
          return Value(Tensor::scalar(f));
        }
    }
    expected("a JSON value");
  }

  Value array(int depth) {
    TensorBuilder b;
    tensor_array(b, 0, depth, 0);
    if (!b.problem.empty()) return Value::other(b.problem);
    Shape shape(b.dims.begin(), b.dims.end());
    for (auto& d : shape)
      if (d < 0) d = 0;
    return Value(Tensor(std::move(shape), std::move(b.data)));
  }

  void note_problem(TensorBuilder& b, const char* at, const std::string& what) {
    if (b.problem.empty()) b.problem = fmt::format("{} ({})", what, where(at));
  }

  // One array at tensor nesting `level`; `row` is its 1-based index in its parent.
  // Syntax errors throw at once; reasons it is not a tensor are noted, and reading goes on.
  void tensor_array(TensorBuilder& b, size_t level, int depth, int64_t row) {
    enter(depth);
    const char* open = p_;
    ++p_;  // '['
    if (level >= static_cast<size_t>(kMaxRank)) note_problem(b, open, fmt::format("an array nested deeper than {} dimensions", kMaxRank));
    if (b.dims.size() <= level) {
      b.dims.push_back(-1);
      b.leaf.push_back(-1);
    }
    int64_t count = 0;
    skip_ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
    } else {
      for (;;) {
        skip_ws();
        if (p_ == end_) syntax_error_at(open, "unterminated array");
        const char* at = p_;
        char c = *p_;
        if (c == '[') {
          if (b.leaf[level] == 1) note_problem(b, at, "an array that mixes numbers and arrays");
          b.leaf[level] = 0;
          if (b.problem.empty()) tensor_array(b, level + 1, depth + 1, count + 1);
          else skip_value(depth + 1);
        } else if ((c == '-' || (c >= '0' && c <= '9')) && b.leaf[level] != 0 && b.problem.empty()) {
          b.leaf[level] = 1;
          count += number_run(b) - 1;  // the common case: a row of numbers, read in one tight loop
          if (inf_at_) {  // a number past the float32 range (set by number_slow, checked once a row)
            note_problem(b, inf_at_, out_of_range(inf_at_, inf_end_));
            inf_at_ = nullptr;
          }
        } else if (c == '-' || (c >= '0' && c <= '9') || c == '"') {
          float f = 0.0f;
          if (c == '"') {
            std::string s = string();
            if (!non_finite(s, f)) note_problem(b, at, "an array holding a string");
          } else {
            f = number();
            if (std::isinf(f)) note_problem(b, at, out_of_range(at, p_)), inf_at_ = nullptr;
          }
          if (b.leaf[level] == 0) note_problem(b, at, "an array that mixes numbers and arrays");
          b.leaf[level] = 1;
          if (b.problem.empty()) {
            if (static_cast<int64_t>(b.data.size()) >= options_.max_elements)
              syntax_error_at(at, fmt::format("tensor has more than {} elements (see --max-elements)", options_.max_elements));
            b.data.push_back(f);
          }
        } else if (c == '{' || c == 't' || c == 'f' || c == 'n') {
          const char* kind = c == '{' ? "an object" : c == 'n' ? "null" : "a boolean (write true and false as 1 and 0)";
          skip_value(depth + 1);
          note_problem(b, at, fmt::format("an array holding {}", kind));
        } else {
          expected(b.leaf[level] == 1 ? "a number" : "a JSON value");
        }
        ++count;
        if (!another_member(']', open)) break;
      }
    }
    if (!b.problem.empty()) return;
    if (b.dims[level] < 0) {
      b.dims[level] = count;
    } else if (b.dims[level] != count) {
      note_problem(b, open, fmt::format("ragged array: row {} has {} values, row 1 has {}", row, count, b.dims[level]));
    }
    // A row that is empty where its siblings hold arrays (or the reverse) is ragged too.
    if (count == 0 && level + 1 < b.dims.size() && b.dims[level + 1] > 0 && b.problem.empty())
      note_problem(b, open, "ragged array: an empty row among non-empty rows");
  }

  // Numbers "x, y, z" from p_ (on a number) into b.data, while each is followed by ',' and another
  // number; returns how many, with p_ just after the last (the caller reads what follows).
  int64_t number_run(TensorBuilder& b) {
    int64_t n = 0;
    for (;;) {
      const char* at = p_;
      float f = number();
      if (static_cast<int64_t>(b.data.size()) >= options_.max_elements)
        syntax_error_at(at, fmt::format("tensor has more than {} elements (see --max-elements)", options_.max_elements));
      b.data.push_back(f);
      ++n;
      const char* q = p_;
      while (q < end_ && is_ws(*q)) ++q;
      if (q == end_ || *q != ',') return n;
      ++q;
      while (q < end_ && is_ws(*q)) ++q;
      if (q == end_ || (*q != '-' && (*q < '0' || *q > '9'))) return n;
      p_ = q;
    }
  }

  // After a member of the array or object opened at `open` (close is ']' or '}'): true on ','
  // (another member follows), false past the closing bracket; anything else is a syntax error.
  bool another_member(char close, const char* open) {
    const bool array = close == ']';
    skip_ws();
    if (p_ == end_) syntax_error_at(open, array ? "unterminated array" : "unterminated object");
    if (*p_ == ',') {
      ++p_;
      skip_ws();
      if (p_ < end_ && *p_ == close) syntax_error(array ? "trailing comma in an array" : "trailing comma in an object");
      return true;
    }
    if (*p_ == close) {
      ++p_;
      return false;
    }
    expected(array ? "',' or ']' in an array" : "',' or '}' in an object");
  }

  // Validates any value without keeping it.
  void skip_value(int depth) {
    enter(depth);
    skip_ws();
    if (p_ == end_) expected("a JSON value");
    char c = *p_;
    if (c == '[' || c == '{') {
      const char* open = p_;
      char close = c == '[' ? ']' : '}';
      ++p_;
      skip_ws();
      if (p_ < end_ && *p_ == close) {
        ++p_;
        return;
      }
      for (;;) {
        skip_ws();
        if (p_ == end_) syntax_error_at(open, c == '[' ? "unterminated array" : "unterminated object");
        if (c == '{') {
          if (*p_ != '"') expected("a string key in an object");
          string();
          skip_ws();
          if (p_ == end_ || *p_ != ':') expected("':' after an object key");
          ++p_;
        }
        skip_value(depth + 1);
        if (!another_member(close, open)) return;
      }
    }
    (void)value(depth);  // scalars
  }

  Value object(int depth) {
    enter(depth);
    const char* open = p_;
    ++p_;  // '{'
    Value bundle = Value::bundle();
    std::string problem;
    const char* shape_at = nullptr;
    std::unordered_set<std::string> seen;  // used past kLinearKeys members (a linear search below)
    constexpr size_t kLinearKeys = 16;
    skip_ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
    } else {
      for (;;) {
        skip_ws();
        if (p_ == end_) syntax_error_at(open, "unterminated object");
        if (*p_ != '"') expected("a string key in an object");
        const char* key_at = p_;
        std::string key = string();
        skip_ws();
        if (p_ == end_ || *p_ != ':') expected("':' after an object key");
        ++p_;
        skip_ws();
        if (key == "shape") shape_at = p_;  // a flat form's sizes are read again from the text, exactly
        Value member = value(depth + 1);
        if (problem.empty()) {
          size_t n = bundle.members().size();
          bool twice;
          if (n < kLinearKeys) {
            twice = bundle.find(key) != nullptr;
          } else {
            if (seen.empty())
              for (const auto& m : bundle.members()) seen.insert(m.first);
            twice = !seen.insert(key).second;
          }
          if (twice) problem = fmt::format("an object with the key \"{}\" twice ({})", key, where(key_at));
          else bundle.append(std::move(key), std::move(member));
        }
        if (!another_member('}', open)) break;
      }
    }
    if (!problem.empty()) return Value::other(problem);
    return flat_form(std::move(bundle), open, shape_at);
  }

  // The sizes in the "shape" list at `at` (already read as an array of numbers), exactly: a size
  // written as an integer is read as one (up to 2^63 - 1), not through float32, so that every shape a
  // tensor can have reads back unchanged ([16777217, 0]). Written with a fraction or an exponent
  // (3.0, 1e3) it must be a whole number up to 2^53. Returns "" or the text of the first bad size.
  std::string exact_sizes(const char* at, Shape& shape) const {
    const char* q = at + 1;  // past '['
    for (;;) {
      while (q < end_ && (is_ws(*q) || *q == ',')) ++q;
      if (q >= end_ || *q == ']') return "";
      const char* start = q;
      bool digits = true;
      while (q < end_ && !is_ws(*q) && *q != ',' && *q != ']') digits &= *q >= '0' && *q <= '9', ++q;
      std::string_view text(start, static_cast<size_t>(q - start));
      int64_t d = -1;
      if (digits) {
        auto r = std::from_chars(start, q, d);
        if (r.ec != std::errc() || r.ptr != q) d = -1;
      } else if (*start != '"') {
        double x = -1;
        auto r = fast_float::from_chars(start, q, x);
        if (r.ec == std::errc() && r.ptr == q && x >= 0 && x == std::floor(x) && x <= 9007199254740992.0)
          d = static_cast<int64_t>(x);
      }
      if (d < 0) return std::string(text.substr(0, 40));
      shape.push_back(d);
    }
  }

  // {"shape": [...], "data": [...], "dtype"?: "..."} is a tensor; any other object is a bundle.
  Value flat_form(Value bundle, const char* open, const char* shape_at) {
    const Value* shape_v = bundle.find("shape");
    const Value* data_v = bundle.find("data");
    size_t extra = bundle.members().size() - (shape_v ? 1 : 0) - (data_v ? 1 : 0) - (bundle.find("dtype") ? 1 : 0);
    if (!shape_v || !data_v || extra != 0) return bundle;
    auto bad = [&](const std::string& what) { return Value::other(fmt::format("{} ({})", what, where(open))); };
    if (!shape_v->is_tensor() || shape_v->tensor().rank() != 1)
      return bad("a flat tensor whose \"shape\" is not a list of sizes");
    Shape shape;
    if (std::string size = exact_sizes(shape_at, shape); !size.empty())
      return bad(fmt::format("a flat tensor whose \"shape\" holds {} (sizes are non-negative integers)", size));
    if (shape.size() > static_cast<size_t>(kMaxRank)) return bad(fmt::format("a flat tensor with more than {} dimensions", kMaxRank));
    int64_t numel = 1;
    bool overflow = false;
    for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
    if (overflow || numel > options_.max_elements)  // the whole product: [2^40, 0] holds nothing
        syntax_error_at(open, fmt::format("flat tensor of shape {} has more than {} elements (see --max-elements)",
                                          shape_str(shape), options_.max_elements));
    if (const Value* dtype = bundle.find("dtype"); dtype && dtype->kind() != Value::Kind::Other && !dtype->is_string())
      return bad("a flat tensor whose \"dtype\" is not a string");
    if (!data_v->is_tensor() || data_v->tensor().rank() != 1)
      return bad("a flat tensor whose \"data\" is not a list of numbers");
    if (data_v->tensor().numel() != numel)
      return bad(fmt::format("a flat tensor of shape {} needs {} values in \"data\", has {}", shape_str(shape), numel,
                             data_v->tensor().numel()));
    Tensor t = const_cast<Value*>(data_v)->take_tensor();
    t.reshape(shape);
    return Value(std::move(t));
  }
};

}  // namespace

Value parse_json(std::string_view text, std::string_view source, const ReadOptions& options) {
  Parser parser(text, source, options);
  Value v = parser.document();
  parser.end_of_document(false);
  return v;
}

std::vector<Value> parse_json_stream(std::string_view text, std::string_view source, const ReadOptions& options) {
  Parser parser(text, source, options);
  std::vector<Value> out;
  while (!parser.at_end()) {
    out.push_back(parser.document());
    parser.end_of_document(true);
  }
  return out;
}

Value parse_json_record(std::string_view text, std::string_view source, const ReadOptions& options,
                        int64_t first_line) {
  Parser parser(text, source, options, first_line);
  Value v = parser.document();
  parser.end_of_document(true);
  return v;
}

}  // namespace attnkit::io
