// One record of a JSON-lines file (training data, decode requests), read with nlohmann::json, which keeps the
// last of a repeated key without a word. attnkit's own reader refuses such an object (io/json_parser.cpp); the
// line readers ask this first and refuse it the same way.
#pragma once
#include <string>
#include <string_view>

namespace attnkit::models {

// The first key that an object of `json_text` gives twice, at any depth; "" when there is none, and when the
// text is not JSON (the caller's parser says why).
std::string repeated_key(std::string_view json_text);

}  // namespace attnkit::models
