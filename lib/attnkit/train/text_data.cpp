#include "attnkit/train/text_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

using models::Tokenizer;
using models::Vocab;

constexpr size_t kBlockBytes = size_t{1} << 20;  // read 1 MiB at a time
constexpr int64_t kMaxTokens = int64_t{1} << 31;  // ids are counted and indexed in int64, stored in int32

// Calls each(token, bytes) for every token of the file, reading it in blocks; a UTF-8 sequence cut by a
// block's end is carried into the next block.
template <typename Each>
int64_t for_each_token(const std::string& path, Tokenizer tokenizer, Each each) {
  std::ifstream f(path, std::ios::binary);
  AK_CHECK(f.good(), "{}: cannot read ({})", path, std::strerror(errno));
  std::string block;
  std::vector<char> buf(kBlockBytes);
  int64_t offset = 0, line = 1, tokens = 0;  // offset: bytes before block[0]
  while (true) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize got = f.gcount();
    AK_CHECK(!f.bad(), "{}: read failed at byte {}", path, offset + int64_t(block.size()));
    block.append(buf.data(), size_t(got));
    const bool end = got == 0 || f.eof();
    size_t i = 0;
    while (i < block.size()) {
      size_t n = 1;
      if (tokenizer == Tokenizer::Char) {
        n = models::utf8_sequence_length(block, i);
        if (n == 0 && !end && block.size() - i < 4) break;  // cut by the block's end: completed by the next
        AK_CHECK(n > 0, "{}: line {}: invalid UTF-8 at byte offset {} (the char tokenizer reads UTF-8 text; "
                 "--tokenizer byte takes any bytes)", path, line, offset + int64_t(i));
      }
      const std::string_view token(block.data() + i, n);
      if (token == "\n") ++line;
      each(token);
      AK_CHECK(++tokens < kMaxTokens, "{}: more than {} tokens", path, kMaxTokens);
      i += n;
    }
    offset += int64_t(i);
    block.erase(0, i);
    if (end) break;
  }
  AK_CHECK(offset > 0, "{}: empty file (a language model needs text)", path);
  return offset;
}

// Reads `path` with a fixed vocabulary (tokens outside it: <unk>).
TextCorpus read_with(const std::string& path, Tokenizer tokenizer, const Vocab& vocab) {
  TextCorpus c;
  c.name = path;
  std::string text;
  c.bytes = for_each_token(path, tokenizer, [&](std::string_view raw) {
    if (c.ids.empty()) c.first_token_bytes = int64_t(raw.size());
    const int64_t id = tokenizer == Tokenizer::Byte ? vocab.id(models::byte_token(static_cast<unsigned char>(raw[0])))
                                                    : vocab.id(raw);
    c.unknown += id == vocab.unk_id();
    c.ids.push_back(static_cast<int32_t>(id));
  });
  return c;
}

// Reads the training file, building its char vocabulary: ids in order of first appearance, then renumbered
// into the vocabulary's byte order.
TextCorpus read_building(const std::string& path, Vocab& vocab) {
  TextCorpus c;
  c.name = path;
  std::map<std::string, int32_t, std::less<>> seen;  // token -> order of first appearance
  c.bytes = for_each_token(path, Tokenizer::Char, [&](std::string_view raw) {
    if (c.ids.empty()) c.first_token_bytes = int64_t(raw.size());
    auto it = seen.find(raw);
    if (it == seen.end()) it = seen.emplace(std::string(raw), static_cast<int32_t>(seen.size())).first;
    c.ids.push_back(it->second);
  });
  std::vector<std::string> tokens;
  std::vector<int32_t> renumber(seen.size());
  for (const auto& [token, first] : seen) {  // byte order
    renumber[size_t(first)] = static_cast<int32_t>(Vocab::kNumSpecials + int64_t(tokens.size()));
    tokens.push_back(token);
  }
  for (int32_t& id : c.ids) id = renumber[size_t(id)];
  vocab = Vocab(tokens);
  return c;
}

// Reads `path` with a SentencePiece model, a line at a time.
TextCorpus read_spm(const std::string& path, const models::SpmModel& spm) {
  std::ifstream f(path, std::ios::binary);
  AK_CHECK(f.good(), "{}: cannot read ({})", path, std::strerror(errno));
  TextCorpus c;
  c.name = path;
  const auto push = [&](int64_t id) {
    c.unknown += id == Vocab::kUnk;
    c.ids.push_back(static_cast<int32_t>(id));
    AK_CHECK(c.size() < kMaxTokens, "{}: more than {} tokens", path, kMaxTokens);
  };
  std::string line;
  std::vector<int64_t> ids;  // one line's
  int64_t number = 0;
  bool newline_last = false;  // the file ends with '\n'
  while (std::getline(f, line)) {
    ++number;
    if (number > 1) push(spm.newline_id());
    size_t at = 0;
    ids.clear();
    const std::string why = spm.encode_line(line, ids, &at);
    AK_CHECK(why.empty(), "{}: line {}: {} of the line, byte offset {} of the file (the spm tokenizer reads UTF-8 "
             "text)", path, number, why, c.bytes + int64_t(at));
    for (const int64_t id : ids) push(id);
    newline_last = !f.eof();
    c.bytes += int64_t(line.size()) + (newline_last ? 1 : 0);
  }
  AK_CHECK(!f.bad(), "{}: read failed at byte {}", path, c.bytes);
  if (newline_last) push(spm.newline_id());
  AK_CHECK(c.bytes > 0, "{}: empty file (a language model needs text)", path);
  if (!c.ids.empty()) c.first_token_bytes = int64_t(spm.decode({c.ids[0]}).size());
  return c;
}

}  // namespace

models::Vocab byte_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(models::byte_token(static_cast<unsigned char>(b)));
  return Vocab(tokens);
}

TextData load_text_data(const TextDataSpec& spec) {
  AK_CHECK(spec.tokenizer == Tokenizer::Char || spec.tokenizer == Tokenizer::Byte || spec.tokenizer == Tokenizer::Spm,
           "language-model text: tokenizer {} (expected char, byte or spm)", models::tokenizer_name(spec.tokenizer));
  AK_CHECK(spec.context >= 1, "language-model text: context {} (need >= 1)", spec.context);
  AK_CHECK(spec.tokenizer != Tokenizer::Spm || spec.spm, "language-model text: the spm tokenizer needs its model");
  TextData d;
  d.tokenizer = spec.tokenizer;
  if (spec.tokenizer == Tokenizer::Spm) {
    d.spm = spec.spm;
    d.vocab = spec.spm->vocab();
    if (spec.vocab) models::check_same_vocab(*spec.vocab, "the checkpoint", d.vocab, "the SentencePiece model",
                                             "language-model text");
    d.train = read_spm(spec.train_path, *spec.spm);
  } else if (spec.vocab) {
    d.vocab = *spec.vocab;
    d.train = read_with(spec.train_path, spec.tokenizer, d.vocab);
  } else if (spec.tokenizer == Tokenizer::Byte) {
    d.vocab = byte_vocab();
    d.train = read_with(spec.train_path, spec.tokenizer, d.vocab);
  } else {
    d.train = read_building(spec.train_path, d.vocab);
  }
  AK_CHECK(d.train.size() > spec.context,
           "{}: {} tokens, but a context of {} needs at least {} (a window and the token after it)", spec.train_path,
           d.train.size(), spec.context, spec.context + 1);
  if (!spec.valid_path.empty()) {
    d.valid = spec.spm ? read_spm(spec.valid_path, *spec.spm) : read_with(spec.valid_path, spec.tokenizer, d.vocab);
    AK_CHECK(d.valid.size() >= 2, "{}: {} token: validation needs at least 2 (one to predict)", spec.valid_path,
             d.valid.size());
  }
  return d;
}

models::TeacherForcedBatch random_windows(const TextCorpus& corpus, int64_t N, int64_t C, Rng& rng) {
  AK_CHECK(N >= 1 && C >= 1 && corpus.size() > C, "{}: {} windows of {} tokens from {} tokens", corpus.name, N, C,
           corpus.size());
  const uint64_t starts = uint64_t(corpus.size() - C);  // s in [0, n - C - 1]
  const uint64_t limit = UINT64_MAX - UINT64_MAX % starts;  // rejection: exactly uniform
  models::TeacherForcedBatch b;
  b.N = N;
  b.T = C;
  b.tgt_in.resize(size_t(N * C));
  b.tgt_out.resize(size_t(N * C));
  b.tgt_lengths.assign(size_t(N), C);
  b.src_lengths.assign(size_t(N), 0);
  for (int64_t r = 0; r < N; ++r) {
    uint64_t x;
    do x = (uint64_t(rng.next_u32()) << 32) | rng.next_u32();
    while (x >= limit);
    const int64_t s = int64_t(x % starts);
    b.index.push_back(s);
    std::copy_n(corpus.ids.begin() + s, C, b.tgt_in.begin() + r * C);       // [C]
    std::copy_n(corpus.ids.begin() + s + 1, C, b.tgt_out.begin() + r * C);  // [C]
  }
  return b;
}

int64_t stream_length(const TextCorpus& corpus, int64_t N) { return (corpus.size() - 1) / N; }

models::TeacherForcedBatch stream_batch(const TextCorpus& corpus, int64_t N, int64_t C, int64_t p) {
  const int64_t m = N >= 1 ? stream_length(corpus, N) : 0;
  AK_CHECK(N >= 1 && C >= 1 && m >= C, "{}: {} tokens, but {} streams of {} tokens need at least {}", corpus.name,
           corpus.size(), N, C, N * C + 1);
  AK_CHECK(p >= 0 && p < m, "{}: stream position {} outside [0, {})", corpus.name, p, m);
  const int64_t T = std::min(C, m - p);
  models::TeacherForcedBatch b;
  b.N = N;
  b.T = T;
  b.tgt_in.resize(size_t(N * T));
  b.tgt_out.resize(size_t(N * T));
  b.tgt_lengths.assign(size_t(N), T);
  b.src_lengths.assign(size_t(N), 0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t s = r * m + p;
    std::copy_n(corpus.ids.begin() + s, T, b.tgt_in.begin() + r * T);       // [T]
    std::copy_n(corpus.ids.begin() + s + 1, T, b.tgt_out.begin() + r * T);  // [T]
    b.index.push_back(s);
  }
  return b;
}

int64_t eval_window_count(const TextCorpus& corpus, int64_t C) { return (corpus.size() - 1 + C - 1) / C; }

models::TeacherForcedBatch eval_windows(const TextCorpus& corpus, int64_t first, int64_t N, int64_t C) {
  const int64_t count = eval_window_count(corpus, C);
  AK_CHECK(first >= 0 && first < count && N >= 1, "{}: evaluation windows {} .. {} of {}", corpus.name, first,
           first + N - 1, count);
  N = std::min(N, count - first);
  models::TeacherForcedBatch b;
  b.N = N;
  b.T = C;
  b.tgt_in.assign(size_t(N * C), Vocab::kPad);
  b.tgt_out.assign(size_t(N * C), Vocab::kPad);
  b.src_lengths.assign(size_t(N), 0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t s = (first + r) * C;
    const int64_t len = std::min(C, corpus.size() - 1 - s);  // tokens predicted by this window
    std::copy_n(corpus.ids.begin() + s, len, b.tgt_in.begin() + r * C);
    std::copy_n(corpus.ids.begin() + s + 1, len, b.tgt_out.begin() + r * C);
    b.tgt_lengths.push_back(len);
    b.index.push_back(first + r);
  }
  return b;
}

}  // namespace attnkit::train
