// The only file that includes SentencePiece's headers (models/spm.hpp keeps them out of the public ones).
#include "attnkit/models/spm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>
#include <unordered_map>

#include "attnkit/tensor/error.hpp"

#ifdef ATTNKIT_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace attnkit::models {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr std::string_view kUnkSurface = " \xE2\x81\x87 ";  // " ⁇ ", SentencePiece's text for <unk>
constexpr int64_t kMaxModelBytes = int64_t{1} << 30;

}  // namespace

std::string spm_unencodable(std::string_view s, size_t* offset) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || s.substr(i, n) == kSpaceMark) {
      if (offset) *offset = i;
      return n == 0 ? fmt::format("invalid UTF-8 at byte {}", i + 1)
                    : fmt::format("U+2581 (SentencePiece's mark for a space, which would read back as a space) at "
                                  "byte {}", i + 1);
    }
    i += n;
  }
  return "";
}

void check_same_spm(const SpmModel& expected, std::string_view expected_name, const SpmModel& actual,
                    std::string_view actual_name) {
  if (expected == actual) return;
  std::string how = vocab_difference(expected.vocab(), expected_name, actual.vocab(), actual_name);
  if (expected.pieces() != actual.pieces())
    how = fmt::format("{} pieces in {}, {} in {}", expected.pieces(), expected_name, actual.pieces(), actual_name);
  else if (how.empty())
    how = "the same pieces, other scores or settings";
  fail("the SentencePiece model of {} differs from the one of {} ({})", actual_name, expected_name, how);
}

#ifdef ATTNKIT_HAVE_SENTENCEPIECE

struct SpmModel::Impl {
  std::string bytes;
  sentencepiece::SentencePieceProcessor sp;
  Vocab vocab;
  std::vector<int64_t> to_vocab;  // [P] SentencePiece id -> vocabulary id (control pieces: -1, unknown: <unk>)
  std::vector<int> to_spm;        // [V] vocabulary id -> SentencePiece id (specials and newline: -1)
  int64_t newline = 0;
};

bool SpmModel::available() { return true; }

SpmModel SpmModel::from_serialized(std::string bytes, std::string_view what) {
  auto impl = std::make_shared<Impl>();
  impl->bytes = std::move(bytes);
  const sentencepiece::util::Status status = impl->sp.LoadFromSerializedProto(impl->bytes);
  AK_CHECK(status.ok(), "{}: not a SentencePiece model ({})", what, status.message());
  const int P = impl->sp.GetPieceSize();
  std::vector<std::string> tokens;
  impl->to_vocab.assign(size_t(P), -1);
  for (int id = 0; id < P; ++id) {
    if (impl->sp.IsUnknown(id)) impl->to_vocab[size_t(id)] = Vocab::kUnk;
    if (impl->sp.IsControl(id) || impl->sp.IsUnknown(id)) continue;
    impl->to_vocab[size_t(id)] = Vocab::kNumSpecials + int64_t(tokens.size());
    tokens.push_back(impl->sp.IdToPiece(id));
  }
  tokens.emplace_back("\n");
  try {
    impl->vocab = Vocab(tokens);
  } catch (const Error& e) {
    fail("{}: its pieces cannot make a vocabulary: {}", what, e.what());
  }
  impl->newline = impl->vocab.size() - 1;
  impl->to_spm.assign(size_t(impl->vocab.size()), -1);
  for (int id = 0; id < P; ++id)
    if (impl->to_vocab[size_t(id)] >= Vocab::kNumSpecials) impl->to_spm[size_t(impl->to_vocab[size_t(id)])] = id;
  return SpmModel(std::move(impl));
}

SpmModel SpmModel::read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  AK_CHECK(f.good(), "{}: cannot read ({})", path, std::strerror(errno));
  const int64_t size = f.tellg();
  AK_CHECK(size >= 0 && size <= kMaxModelBytes, "{}: {} bytes, more than a SentencePiece model's limit of {}", path,
           size, kMaxModelBytes);
  std::string bytes(size_t(size), '\0');
  f.seekg(0);
  f.read(bytes.data(), size);
  AK_CHECK(f.gcount() == size, "{}: read failed", path);
  return from_serialized(std::move(bytes), path);
}

namespace {

// The training text's lines for SentencePiece's trainer: empty lines skipped, long ones cut into sentences of at
// most kMaxSentenceBytes; stops at the first line it refuses (error()). `next` gives the next line (false at the
// end); `refusal` is the message for a refused line, given its 1-based number, the refused byte's offset in it
// and the reason.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  using Refusal = std::function<std::string(int64_t, size_t, const std::string&)>;
  LineIterator(std::function<bool(std::string&)> next, Refusal refusal)
      : next_(std::move(next)), refusal_(std::move(refusal)) {
    Next();
  }
  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }
  void Next() override {
    while (rest_.empty()) {
      if (!next_(line_)) {
        done_ = true;
        return;
      }
      ++line_number_;
      size_t at = 0;
      const std::string why = spm_unencodable(line_, &at);
      if (!why.empty()) {
        error_ = refusal_(line_number_, at, why);
        done_ = true;
        return;
      }
      rest_ = line_;
    }
    size_t n = std::min(rest_.size(), SpmModel::kMaxSentenceBytes);
    while (n < rest_.size() && (static_cast<unsigned char>(rest_[n]) & 0xC0) == 0x80) --n;  // a UTF-8 boundary
    value_ = rest_.substr(0, n);
    rest_.erase(0, n);
    ++sentences_;
  }
  const std::string& error() const { return error_; }
  int64_t sentences() const { return sentences_; }

 private:
  std::function<bool(std::string&)> next_;
  Refusal refusal_;
  std::string line_, rest_, value_, error_;
  int64_t line_number_ = 0, sentences_ = 0;
  bool done_ = false;
};

// SentencePiece's "file.cc(660) [condition] message" without its source position.
std::string trainer_message(const sentencepiece::util::Status& status) {
  std::string m = status.message();
  const size_t close = m.find("] ");
  if (m.rfind("./src/", 0) == 0 && close != std::string::npos && close + 2 < m.size()) m.erase(0, close + 2);
  return m;
}

// Trains on the lines `lines` gives; `what` names the text in messages.
SpmModel train_on(LineIterator& lines, const std::string& what, const SpmTrainOptions& o, SpmTrainReport* report) {
  const std::string option = o.option.empty() ? "--vocab-size" : o.option;
  AK_CHECK(o.vocab_size >= SpmModel::kMinVocabSize && o.vocab_size <= SpmModel::kMaxVocabSize,
           "{} {}: a SentencePiece model's is in [{}, {}]", option, o.vocab_size, SpmModel::kMinVocabSize,
           SpmModel::kMaxVocabSize);
  AK_CHECK(o.type == "unigram" || o.type == "bpe", "--spm-type \"{}\": expected unigram or bpe", o.type);
  AK_CHECK(o.max_sentences >= SpmModel::kMinSentences, "--spm-sentences {}: need >= {}", o.max_sentences,
           SpmModel::kMinSentences);
  const unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(SpmModel::kMaxSentenceBytes)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"character_coverage", "1.0"},
      {"user_defined_symbols", "\t"},
      {"pad_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"unk_id", "3"},
      {"pad_piece", "<pad>"}, {"bos_piece", "<bos>"}, {"eos_piece", "<eos>"}, {"unk_piece", "<unk>"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"}};
  std::string bytes;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &bytes);
  AK_CHECK(lines.error().empty(), "{}", lines.error());
  AK_CHECK(lines.sentences() > 0, "{}: no text to train SentencePiece on (every line is empty)", what);
  if (!status.ok()) {
    const std::string m = trainer_message(status);
    std::smatch g;
    if (std::regex_search(m, g, std::regex(R"(Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+))")))
      fail("{} {} is too large for {}: SentencePiece finds at most {} pieces in its text (give {} {} or less, or more "
           "text)", option, o.vocab_size, what, g[2].str(), option, g[2].str());
    if (std::regex_search(m, g, std::regex(R"(smaller than required_chars\. (\d+) vs (\d+))")))
      fail("{} {} is too small for {}: its characters and the 5 special pieces (<pad> <bos> <eos> <unk> and tab) "
           "need {} {} or more", option, o.vocab_size, what, option, g[2].str());
    fail("{}: SentencePiece could not train a model with {} {} --spm-type {}: {}", what, option, o.vocab_size, o.type,
         m);
  }
  if (report) {
    report->lines = lines.sentences();
    report->sampled = std::min(lines.sentences(), o.max_sentences);
  }
  return SpmModel::from_serialized(std::move(bytes), what);
}

}  // namespace

SpmModel SpmModel::train(const std::string& path, const SpmTrainOptions& o, SpmTrainReport* report) {
  std::ifstream f(path, std::ios::binary);
  AK_CHECK(f.good(), "{}: cannot read ({})", path, std::strerror(errno));
  int64_t offset = 0, line_start = 0;  // the byte offsets of the next line and of the last one read
  const auto next = [&](std::string& line) {
    if (!std::getline(f, line)) {
      AK_CHECK(!f.bad(), "{}: read failed at byte {}", path, offset);
      return false;
    }
    line_start = offset;
    offset += int64_t(line.size()) + 1;
    return true;
  };
  const auto refusal = [&](int64_t number, size_t at, const std::string& why) {
    return fmt::format("{}: line {}: {} of the line, byte offset {} of the file (SentencePiece reads UTF-8 text)",
                       path, number, why, line_start + int64_t(at));
  };
  LineIterator lines(next, refusal);
  return train_on(lines, path, o, report);
}

SpmModel SpmModel::train_texts(const std::vector<std::string>& texts, const std::string& what,
                               const SpmTrainOptions& o, SpmTrainReport* report) {
  size_t text = 0, at = 0;  // the next text, and where its next line starts
  const auto next = [&](std::string& line) {
    if (text == texts.size()) return false;
    const size_t end = texts[text].find('\n', at);
    line = texts[text].substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (end == std::string::npos) ++text, at = 0;
    else at = end + 1;
    return true;
  };
  const auto refusal = [&](int64_t number, size_t, const std::string& why) {
    return fmt::format("{}: line {} of its text: {} (SentencePiece reads UTF-8 text)", what, number, why);
  };
  LineIterator lines(next, refusal);
  return train_on(lines, what, o, report);
}

const std::string& SpmModel::serialized() const { return impl_->bytes; }
int64_t SpmModel::pieces() const { return impl_->sp.GetPieceSize(); }
const Vocab& SpmModel::vocab() const { return impl_->vocab; }
int64_t SpmModel::newline_id() const { return impl_->newline; }

std::string SpmModel::encode_line(std::string_view line, std::vector<int64_t>& out, size_t* bad_offset) const {
  if (std::string why = spm_unencodable(line, bad_offset); !why.empty()) return why;
  for (const int id : impl_->sp.EncodeAsIds(line)) out.push_back(impl_->to_vocab[size_t(id)]);
  return "";
}

std::vector<int64_t> SpmModel::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  size_t start = 0, offset = 0;
  while (true) {
    const size_t end = text.find('\n', start);
    const std::string why = encode_line(text.substr(start, end - start), ids, &offset);
    AK_CHECK(why.empty(), "spm tokenizer: {}", spm_unencodable(text));
    if (end == std::string_view::npos) break;
    ids.push_back(impl_->newline);
    start = end + 1;
  }
  return ids;
}

std::string SpmModel::decode(const std::vector<int64_t>& ids, bool line_start) const {
  std::string out;
  std::vector<int> line;  // SentencePiece ids of the line being read
  bool first = true;      // the first line of `ids`
  auto flush = [&] {
    if (line_start || !first) {
      out += impl_->sp.DecodeIds(line);  // drops the line's prefix "▁"
    } else {
      for (const int id : line) {  // a continuation: every "▁" shown
        if (impl_->sp.IsUnknown(id)) {
          out += kUnkSurface;
          continue;
        }
        if (impl_->sp.IsByte(id)) {
          out += static_cast<char>(std::stoi(impl_->sp.IdToPiece(id).substr(3, 2), nullptr, 16));
          continue;
        }
        std::string piece = impl_->sp.IdToPiece(id);
        for (size_t p = piece.find(kSpaceMark); p != std::string::npos; p = piece.find(kSpaceMark, p + 1))
          piece.replace(p, kSpaceMark.size(), " ");
        out += piece;
      }
    }
    line.clear();
    first = false;
  };
  for (const int64_t id : ids) {
    AK_CHECK(id >= 0 && id < impl_->vocab.size(), "spm tokenizer: id {} outside the vocabulary's [0, {})", id,
             impl_->vocab.size());
    if (id == impl_->newline) {
      flush();
      out += '\n';
    } else if (id == Vocab::kUnk) {
      line.push_back(impl_->sp.unk_id());
    } else if (id >= Vocab::kNumSpecials) {
      line.push_back(impl_->to_spm[size_t(id)]);
    }
  }
  flush();
  return out;
}

#else  // no SentencePiece: every use refuses

namespace {

[[noreturn]] void no_sentencepiece() {
  fail("SentencePiece tokens (--tokenizer spm): this build has no SentencePiece (install libsentencepiece-dev, "
       "e.g. with scripts/setup.sh, and build again)");
}

}  // namespace

struct SpmModel::Impl {
  std::string bytes;
  Vocab vocab;
};

bool SpmModel::available() { return false; }
SpmModel SpmModel::from_serialized(std::string, std::string_view) { no_sentencepiece(); }
SpmModel SpmModel::read_file(const std::string&) { no_sentencepiece(); }
SpmModel SpmModel::train(const std::string&, const SpmTrainOptions&, SpmTrainReport*) { no_sentencepiece(); }
SpmModel SpmModel::train_texts(const std::vector<std::string>&, const std::string&, const SpmTrainOptions&,
                               SpmTrainReport*) {
  no_sentencepiece();
}
const std::string& SpmModel::serialized() const { return impl_->bytes; }
int64_t SpmModel::pieces() const { return 0; }
const Vocab& SpmModel::vocab() const { return impl_->vocab; }
int64_t SpmModel::newline_id() const { return 0; }
std::string SpmModel::encode_line(std::string_view, std::vector<int64_t>&, size_t*) const { no_sentencepiece(); }
std::vector<int64_t> SpmModel::encode(std::string_view) const { no_sentencepiece(); }
std::string SpmModel::decode(const std::vector<int64_t>&, bool) const { no_sentencepiece(); }

#endif

}  // namespace attnkit::models
