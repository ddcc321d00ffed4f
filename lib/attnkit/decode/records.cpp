#include "attnkit/decode/records.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnkit/io/svg_heatmap.hpp"
#include "attnkit/models/json_line.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::decode {

namespace {

constexpr EnumName<InputFormat> kInputFormatNames[] = {
    {InputFormat::Auto, "auto"}, {InputFormat::Text, "text"}, {InputFormat::Ndjson, "ndjson"}};

}  // namespace

InputFormat parse_input_format(std::string_view name) {
  if (const std::optional<InputFormat> format = parse_name(kInputFormatNames, name)) return *format;
  fail("unknown input format \"{}\" (expected {})", name, names_or(kInputFormatNames));
}

SourceReader::SourceReader(std::istream& in, InputFormat format, std::string name)
    : in_(in), format_(format), name_(std::move(name)) {}

bool SourceReader::next(std::string& text) {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool blank = line.find_first_not_of(" \t") == std::string::npos;
    if (format_ != InputFormat::Ndjson && blank) {  // text, or not known yet: an empty source
      text.clear();
      return true;
    }
    if (format_ == InputFormat::Auto)
      format_ = line[line.find_first_not_of(" \t")] == '{' ? InputFormat::Ndjson : InputFormat::Text;
    if (format_ == InputFormat::Text) {
      text = line;
      return true;
    }
    if (blank) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    AK_CHECK(!j.is_discarded(), "{}: line {}: not a JSON document (NDJSON input: one {{\"src\": ...}} per line)", name_,
             line_);
    AK_CHECK(j.is_object() && j.contains("src") && j["src"].is_string(),
             "{}: line {}: expected an object with a string \"src\"", name_, line_);
    const std::string key = models::repeated_key(line);
    AK_CHECK(key.empty(), "{}: line {}: an object with the key \"{}\" twice", name_, line_, key);
    text = j["src"].get<std::string>();
    AK_CHECK(text.find_first_not_of(" \t") != std::string::npos, "{}: line {}: empty source", name_, line_);
    return true;
  }
  return false;
}

bool StdinBuffer::interactive() const {
  struct stat st {};
  if (::fstat(0, &st) != 0) return false;
  return ::isatty(0) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
}

bool StdinBuffer::waiting() {
  if (gptr() < egptr()) return true;
  pollfd p{0, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;  // (the end of input counts: reading it does not block)
}

StdinBuffer::int_type StdinBuffer::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  ssize_t n;
  do {
    n = ::read(0, buf_, sizeof buf_);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return traits_type::eof();
  setg(buf_, buf_, buf_ + n);
  return traits_type::to_int_type(*gptr());
}

namespace {

// JSON has no NaN or infinity: a non-finite number is refused rather than written as one.
double finite(double x, std::string_view field) {
  AK_CHECK(std::isfinite(x), "decode: the {} is {}, which JSON cannot hold (the model's log-probabilities are not "
           "finite numbers)", field, std::isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
  return x;
}

void append_hypothesis(std::string& out, const LoadedModel& model, const Hypothesis& h, const OutputFields& f) {
  const std::vector<std::string> tokens = target_tokens(model, h.ids);
  out += "\"tokens\":" + nlohmann::json(tokens).dump();
  out += ",\"text\":" + nlohmann::json(target_text(model, tokens)).dump();
  out += fmt::format(",\"score\":{}", static_cast<float>(finite(h.score, "score")));
  if (f.normalized)
    out += fmt::format(",\"normalized\":{}", static_cast<float>(finite(h.normalized, "normalized score")));
  if (!h.ended) out += ",\"ended\":false";
  if (f.attention) {
    out += ",\"attention\":[";
    const int64_t T = h.attention.dim(0), S = h.attention.dim(1);
    for (int64_t t = 0; t < T; ++t) {
      out += t ? ",[" : "[";
      for (int64_t s = 0; s < S; ++s)
        out += fmt::format(s ? ",{}" : "{}", float(finite(h.attention[t * S + s], "attention weight")));
      out += "]";
    }
    out += "]";
  }
}

}  // namespace

std::string result_json(const LoadedModel& model, const std::vector<Hypothesis>& hyps, const OutputFields& fields) {
  AK_CHECK(!hyps.empty(), "decode: no hypothesis");
  std::string out = "{";
  append_hypothesis(out, model, hyps[0], fields);
  if (fields.n_best) {
    out += ",\"n_best\":[";
    for (size_t i = 0; i < hyps.size(); ++i) {
      out += i ? ",{" : "{";
      append_hypothesis(out, model, hyps[i], fields);
      out += "}";
    }
    out += "]";
  }
  out += "}";
  return out;
}

void write_alignment_svg(const std::string& path, const LoadedModel& model, std::string_view source_text,
                         const Hypothesis& best) {
  AK_CHECK(best.attention.rank() == 2, "heatmap: no attention weights were kept");
  io::HeatmapOptions o;
  o.row_labels = target_tokens(model, best.ids);
  if (best.ended) o.row_labels.push_back("<eos>");
  o.col_labels = models::tokenize(source_text, model.src_tokenizer);
  for (std::string& s : o.col_labels)
    if (s == " ") s = "\u2423";  // a visible space
  for (std::string& s : o.row_labels)
    if (s == " ") s = "\u2423";
  o.row_axis = "output";
  o.col_axis = "source";
  o.title = "cross-attention";
  io::write_heatmap_svg(path, best.attention, o);
}

}  // namespace attnkit::decode
