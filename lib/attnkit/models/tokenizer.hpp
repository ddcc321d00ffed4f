// Tokenizers: text <-> the tokens a vocabulary maps to ids (models/vocab.hpp).
//   char   one token per Unicode character (a UTF-8 sequence); spaces are tokens too ("jan 5" -> j a n ␠ 5).
//          Text that is not valid UTF-8 is refused.
//   space  tokens separated by runs of spaces or tabs ("hh ax l ow" -> hh ax l ow); leading and trailing
//          spaces are ignored.
//   ids    whitespace-separated non-negative integers below 2^31, kept as their canonical decimal text
//          ("007" -> "7"); anything else ("-3", "x1", "+4") is refused. Ids are tokens like any other: they
//          are mapped through the vocabulary (id k is NOT row k of an embedding: rows 0-3 are the specials).
//   byte   one token per byte, any bytes (no UTF-8 check): the printable ASCII bytes 0x20-0x7E are their own
//          character, every other byte is written "<0xNN>" (two upper-case hex digits), so that a vocabulary
//          stays valid UTF-8 ("é" -> <0xC3> <0xA9>); join_tokens turns them back into the bytes.
//   spm    SentencePiece subword pieces ("▁the", "▁c", "at"): needs its model (models/spm.hpp), so the
//          functions here refuse it; the language models' text and decoding use the model's own encode and decode.
//   The special tokens' texts (<pad> <bos> <eos> <unk>) are reserved: data containing one as a token is
//   refused (a space-tokenized "<eos>" in a data file would otherwise be silently taken as the real one).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::models {

enum class Tokenizer { Char, Space, Ids, Byte, Spm };

// "char", "space", "ids", "byte", "spm" -> Tokenizer; anything else is an attnkit::Error listing them.
Tokenizer tokenizer_from_name(std::string_view name);
std::string_view tokenizer_name(Tokenizer tokenizer);

// Splits `text` into `out` (cleared first). Returns "" on success, else the reason it cannot
// ("invalid UTF-8 at byte 3", "\"x1\" is not a non-negative integer", "\"<eos>\" is a reserved special token");
// the data readers turn the reason into a bad-line message.
std::string tokenize(std::string_view text, Tokenizer tokenizer, std::vector<std::string>& out);
// The same, throwing attnkit::Error with the reason.
std::vector<std::string> tokenize(std::string_view text, Tokenizer tokenizer);
// The inverse for display: char concatenates, byte concatenates the bytes, spm concatenates with "▁" as a
// space, space and ids join with one space.
std::string join_tokens(const std::vector<std::string>& tokens, Tokenizer tokenizer);

// The byte tokenizer's token for byte b ("a", " ", "<0x0A>").
std::string byte_token(unsigned char b);
// Length of the UTF-8 sequence starting at s[i] (1-4), or 0 when it is not a valid one (or is cut by the end
// of `s`).
size_t utf8_sequence_length(std::string_view s, size_t i);
// "" or "invalid UTF-8 at byte N" (1-based).
std::string check_utf8(std::string_view s);
// One of the special tokens' texts.
bool is_special_token(std::string_view token);
// A canonical non-negative decimal integer: "0", or digits without a leading zero.
bool is_canonical_integer(std::string_view s);
// A token as messages show it: quoted JSON-style, cut after 40 bytes.
std::string shown_token(std::string_view s);

}  // namespace attnkit::models
