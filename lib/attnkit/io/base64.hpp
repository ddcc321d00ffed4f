// Base64 (RFC 4648, the standard alphabet, '=' padding): binary data (a SentencePiece model) inside a JSON string.
#pragma once
#include <string>
#include <string_view>

namespace attnkit::io {

std::string base64_encode(std::string_view bytes);
// The inverse; refuses (attnkit::Error naming `what` and the offset) a character outside the alphabet, a length
// that is not a multiple of 4, padding anywhere but at the end, and non-zero bits in the padding.
std::string base64_decode(std::string_view text, std::string_view what);

}  // namespace attnkit::io
