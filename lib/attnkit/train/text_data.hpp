// Plain text for language models: a file read in blocks (never whole), split into tokens, mapped to ids.
// Legend: n tokens of a file, C context (tokens per training row), N rows per batch.
//
//   tokenizers  char: one token per UTF-8 character (text that is not valid UTF-8 is refused, naming the line
//               and the byte offset); byte: one token per byte, any bytes (models/tokenizer.hpp's byte tokens);
//               spm: SentencePiece pieces (models/spm.hpp), the file read line by line, each line encoded by
//               the model and the newline token between lines (invalid UTF-8 and U+2581 refused, naming the line
//               and the byte offset).
//   vocabulary  the specials, then char: every character of the training file in byte order; byte: all 256
//               byte tokens in byte order (so any text encodes without <unk>); spm: the SentencePiece model's.
//   windows     training row r of a batch: inputs ids[s .. s + C), targets ids[s + 1 .. s + C + 1), s uniform in
//               [0, n - C - 1] drawn from the caller's Rng (so a training file needs at least C + 1 tokens).
//   streams     (the recurrent models' truncated BPTT, as char-rnn) the file cut into N streams of m = (n - 1) / N
//               tokens; batch k reads rows r: ids[r m + p .. r m + p + T) from position p = the tokens read so far
//               (T = min(C, m - p)), so that row r of each batch continues row r of the one before; after m
//               tokens the streams start again at 0.
//   evaluation  contiguous windows of C tokens over the whole file: every token but the first predicted once,
//               from the tokens before it in its window; the last window may be shorter (its rest is <pad>).
// Bits per byte: the summed loss in nats / ln 2 / the bytes of the tokens predicted (every byte of the file but
// the first token's), so that models with different tokenizers compare on one scale.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/models/inputs.hpp"
#include "attnkit/models/spm.hpp"
#include "attnkit/models/tokenizer.hpp"
#include "attnkit/models/vocab.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::train {

struct TextCorpus {
  std::string name;              // the file
  std::vector<int32_t> ids;      // [n] every token of the file, in order
  int64_t bytes = 0;             // the file's size
  int64_t first_token_bytes = 0; // bytes of ids[0] (not predicted)
  int64_t unknown = 0;           // tokens outside the vocabulary (read as <unk>)
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  int64_t predicted_bytes() const { return bytes - first_token_bytes; }
};

struct TextDataSpec {
  std::string train_path, valid_path;  // valid_path optional
  models::Tokenizer tokenizer = models::Tokenizer::Char;  // char, byte or spm
  int64_t context = 64;                // C >= 1
  std::optional<models::Vocab> vocab;  // given (a checkpoint's): the files are encoded with it
  std::optional<models::SpmModel> spm; // spm: the model (trained on the file, read, or a checkpoint's)
};

struct TextData {
  TextCorpus train, valid;
  models::Vocab vocab;
  models::Tokenizer tokenizer = models::Tokenizer::Char;
  std::optional<models::SpmModel> spm;  // spm: the model the vocabulary is
};

// The vocabulary a tokenizer's text builds from, the byte tokenizer's whole one (all 256 bytes).
models::Vocab byte_vocab();

// Reads the files (the training file builds the vocabulary unless spec.vocab is given). Refuses, naming the
// file: one that cannot be read, an empty one, invalid UTF-8 with char (line and byte offset), a training file
// of fewer than C + 1 tokens, a validation file of fewer than 2, a tokenizer other than char, byte and spm, spm
// without its model.
TextData load_text_data(const TextDataSpec& spec);

// N random training windows of C tokens (above): tgt_in and tgt_out [N, C], no sources (S = 0).
models::TeacherForcedBatch random_windows(const TextCorpus& corpus, int64_t N, int64_t C, Rng& rng);
// The batch of N streams (above) at position p (0 <= p < m), T = min(C, m - p) tokens; refuses a file of fewer
// than N C + 1 tokens, naming it.
models::TeacherForcedBatch stream_batch(const TextCorpus& corpus, int64_t N, int64_t C, int64_t p);
int64_t stream_length(const TextCorpus& corpus, int64_t N);  // m
// The evaluation windows (above) first .. first + N - 1 of C tokens (fewer at the end), and how many there are.
models::TeacherForcedBatch eval_windows(const TextCorpus& corpus, int64_t first, int64_t N, int64_t C);
int64_t eval_window_count(const TextCorpus& corpus, int64_t C);

}  // namespace attnkit::train
