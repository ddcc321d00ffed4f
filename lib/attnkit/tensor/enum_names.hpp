// The names of an enum's values in one table, for printing and for parsing them back:
//   inline constexpr EnumName<Layer> kLayerNames[] = {{Layer::Conv, "conv"}, {Layer::Rnn, "rnn"}};
//   name_of(kLayerNames, Layer::Rnn) -> "rnn"; parse_name(kLayerNames, "rnn") -> Layer::Rnn;
//   names_of(kLayerNames) -> "conv, rnn" and names_or(kLayerNames) -> "conv or rnn" (for messages
//   listing what is accepted).
// The table holds every value of the enum: a value without a name is a bug (AK_ASSERT).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "attnkit/tensor/error.hpp"

namespace attnkit {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, size_t N>
const char* name_of(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  AK_ASSERT(false, "enum value {} has no name", static_cast<long long>(value));
  return "";
}

// The value named `text` (exactly), or nothing.
template <typename E, size_t N>
std::optional<E> parse_name(const EnumName<E> (&table)[N], std::string_view text) {
  for (const EnumName<E>& e : table)
    if (text == e.name) return e.value;
  return std::nullopt;
}

// The names in table order, joined by `separator`.
template <typename E, size_t N>
std::string names_of(const EnumName<E> (&table)[N], std::string_view separator = ", ") {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i) out += separator;
    out += table[i].name;
  }
  return out;
}

// The names in table order as alternatives: "a", "a or b", "a, b or c".
template <typename E, size_t N>
std::string names_or(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

}  // namespace attnkit
