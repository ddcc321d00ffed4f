#include "attnkit/train/data.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/models/json_line.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

bool blank(std::string_view line) { return line.find_first_not_of(' ') == std::string_view::npos; }

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parser_message(const std::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  return m;
}

// Splits one line into source and target text; "" or the reason it cannot.
std::string split_tsv(std::string_view line, std::string& src, std::string& tgt) {
  size_t tab = line.find('\t');
  if (tab == std::string_view::npos) return "no tab between source and target";
  size_t tabs = 1;
  for (size_t i = tab + 1; i < line.size(); ++i) tabs += line[i] == '\t';
  if (tabs > 1) return fmt::format("{} tabs (expected 1 between source and target)", tabs);
  src.assign(line.substr(0, tab));
  tgt.assign(line.substr(tab + 1));
  return "";
}

std::string split_jsonl(std::string_view line, std::string& src, std::string& tgt) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::exception& e) {
    return "invalid JSON: " + parser_message(e);
  }
  if (!j.is_object()) return "expected a JSON object {\"src\": ..., \"tgt\": ...}";
  if (const std::string key = models::repeated_key(line); !key.empty())
    return fmt::format("an object with the key \"{}\" twice", key);
  for (const char* key : {"src", "tgt"}) {
    auto it = j.find(key);
    if (it == j.end()) return fmt::format("missing \"{}\"", key);
    if (it->is_string()) continue;
    const std::string type = it->type_name();
    const char* article = it->is_null() ? "" : (type[0] == 'a' || type[0] == 'o') ? "an " : "a ";
    return fmt::format("\"{}\" is not a string ({}{})", key, article, type);
  }
  src = j["src"].get<std::string>();
  tgt = j["tgt"].get<std::string>();
  return "";
}

// One side's text as the pieces of its SentencePiece model, a newline as the model's newline token; "" or the
// reason it cannot.
std::string spm_pieces(const models::SpmModel& spm, std::string_view text, std::vector<std::string>& out) {
  out.clear();
  std::vector<int64_t> ids;
  for (size_t start = 0;;) {
    const size_t end = text.find('\n', start);
    if (std::string why = spm.encode_line(text.substr(start, end - start), ids); !why.empty()) return why;
    if (end == std::string_view::npos) break;
    ids.push_back(spm.newline_id());
    start = end + 1;
  }
  for (const int64_t id : ids) out.push_back(spm.vocab().token(id));
  return "";
}

// Tokenizes both sides and checks them; "" or the reason.
std::string make_example(const std::string& src, const std::string& tgt, const DataOptions& options, Example& ex) {
  const std::pair<const std::string*, std::vector<std::string>*> sides[2] = {{&src, &ex.src}, {&tgt, &ex.tgt}};
  const char* names[2] = {"source", "target"};
  const Tokenizer tokenizers[2] = {options.tokenizer, options.target_tokenizer.value_or(options.tokenizer)};
  const std::optional<models::SpmModel>* spm[2] = {&options.src_spm, &options.tgt_spm};
  for (int s = 0; s < 2; ++s) {
    std::string bad = tokenizers[s] == Tokenizer::Spm && *spm[s]
                          ? spm_pieces(**spm[s], *sides[s].first, *sides[s].second)
                          : tokenize(*sides[s].first, tokenizers[s], *sides[s].second);
    if (!bad.empty()) return fmt::format("{}: {}", names[s], bad);
    if (sides[s].second->empty()) return fmt::format("empty {}", names[s]);
    const auto n = static_cast<int64_t>(sides[s].second->size());
    if (options.max_len > 0 && n > options.max_len)
      return fmt::format("{} has {} tokens, more than the maximum length {}", names[s], n, options.max_len);
  }
  return "";
}

}  // namespace

std::string Corpus::bad_lines_summary() const {
  if (bad_lines == 0) return "";
  std::string out = fmt::format("{}: skipped {} bad line{}; ", name, bad_lines, bad_lines == 1 ? "" : "s");
  out += bad_line_messages.size() < static_cast<size_t>(bad_lines) ? "first: " : "";
  for (size_t i = 0; i < bad_line_messages.size(); ++i) out += (i ? "; " : "") + bad_line_messages[i];
  return out;
}

DataFormat data_format(std::string_view name, DataFormat format) {
  if (format != DataFormat::Auto) return format;
  if (ends_with(name, ".jsonl") || ends_with(name, ".ndjson") || ends_with(name, ".json")) return DataFormat::Jsonl;
  return DataFormat::Tsv;
}

namespace {

// Calls `take(src, tgt, line)` for each line of `text` split into its source and target (blank lines skipped); a
// line that cannot be split, or whose `take` returns a reason, is bad: refused, or with skip_bad_lines counted into
// `corpus` (its first messages kept). `corpus` gets the name; refuses an empty text unless allow_empty.
template <typename Take>
void for_each_pair(std::string_view text, std::string_view name, const DataOptions& options, Corpus& corpus,
                   Take take) {
  AK_CHECK(options.max_len >= 0, "{}: the maximum length must be >= 0, got {}", name, options.max_len);
  const DataFormat format = data_format(name, options.format);
  corpus.name = std::string(name);
  AK_CHECK(!text.empty() || options.allow_empty, "{}: the file is empty (expected one example per line)", name);
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte-order mark

  std::string src, tgt;
  int64_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    const int64_t line_byte = options.first_byte + static_cast<int64_t>(start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (blank(line)) continue;

    std::string bad = format == DataFormat::Tsv ? split_tsv(line, src, tgt) : split_jsonl(line, src, tgt);
    if (bad.empty()) bad = take(src, tgt, line_no);
    if (!bad.empty()) {
      std::string message = options.first_byte >= 0 ? fmt::format("{}: the line at byte {}: {}", name, line_byte, bad)
                                                    : fmt::format("{}:{}: {}", name, line_no, bad);
      if (!options.skip_bad_lines) throw Error(message);
      ++corpus.bad_lines;
      if (static_cast<int64_t>(corpus.bad_line_messages.size()) < options.max_reported)
        corpus.bad_line_messages.push_back(std::move(message));
    }
  }
}

}  // namespace

Corpus parse_corpus(std::string_view text, std::string_view name, const DataOptions& options) {
  Corpus corpus;
  corpus.src_tokenizer = options.tokenizer;
  corpus.tgt_tokenizer = options.target_tokenizer.value_or(options.tokenizer);
  for_each_pair(text, name, options, corpus, [&](const std::string& src, const std::string& tgt, int64_t line) {
    Example ex;
    ex.line = line;
    std::string bad = make_example(src, tgt, options, ex);
    if (bad.empty()) corpus.examples.push_back(std::move(ex));
    return bad;
  });
  if (corpus.examples.empty() && !options.allow_empty) {
    AK_CHECK(corpus.bad_lines > 0, "{}: no examples (every line is blank)", name);
    fail("{}: no examples left: {}", name, corpus.bad_lines_summary());
  }
  return corpus;
}

TextPairs read_text_pairs(const std::string& path, const DataOptions& options) {
  const std::string text = io::read_plain_text(path);
  const std::string name = path == "-" ? "<stdin>" : path;
  TextPairs pairs;
  Corpus counts;
  for_each_pair(text, name, options, counts, [&](const std::string& src, const std::string& tgt, int64_t line) {
    pairs.src.push_back(src);
    pairs.tgt.push_back(tgt);
    pairs.lines.push_back(line);
    return std::string();
  });
  AK_CHECK(!pairs.src.empty(), "{}: no pairs of source and target (every line is blank or bad)", name);
  return pairs;
}

Corpus read_corpus(const std::string& path, const DataOptions& options) {
  const std::string text = io::read_plain_text(path);
  return parse_corpus(text, path == "-" ? "<stdin>" : path, options);
}

void add_to_vocab(VocabBuilder& builder, const Corpus& corpus, Side side) {
  for (const auto& ex : corpus.examples) {
    if (side != Side::Target) builder.add(ex.src);
    if (side != Side::Source) builder.add(ex.tgt);
  }
}

Vocab build_vocab(const Corpus& corpus, Side side, VocabOrder order, int64_t min_count, int64_t max_size) {
  VocabBuilder builder;
  add_to_vocab(builder, corpus, side);
  try {
    return builder.build(order, min_count, max_size);
  } catch (const Error& e) {
    fail("{}: {}", corpus.name, e.what());
  }
}

EncodedCorpus encode(const Corpus& corpus, const Vocab& src_vocab, const Vocab& tgt_vocab) {
  EncodedCorpus out;
  out.src.reserve(corpus.examples.size());
  out.tgt.reserve(corpus.examples.size());
  for (const auto& ex : corpus.examples) {
    out.src.push_back(src_vocab.encode(ex.src, &out.unknown_src));
    out.tgt.push_back(tgt_vocab.encode(ex.tgt, &out.unknown_tgt));
  }
  return out;
}

void reverse_targets(EncodedCorpus& corpus) {
  for (std::vector<int64_t>& t : corpus.tgt) std::reverse(t.begin(), t.end());
}

std::vector<ReferenceGroup> group_by_source(const Corpus& corpus) {
  std::vector<ReferenceGroup> groups;
  std::map<std::vector<std::string>, size_t> index;
  for (size_t i = 0; i < corpus.examples.size(); ++i) {
    const Example& ex = corpus.examples[i];
    auto [it, added] = index.emplace(ex.src, groups.size());
    if (added) groups.push_back({ex.src, {}, static_cast<int64_t>(i)});
    auto& refs = groups[it->second].references;
    bool seen = false;
    for (const auto& r : refs) seen = seen || r == ex.tgt;
    if (!seen) refs.push_back(ex.tgt);
  }
  return groups;
}

}  // namespace attnkit::train
