// Pieces shared by the binary formats of io/tensor_file.hpp (internal: include from .cpp files only):
// element types and their conversion to float32, flat bundles (names joined by '.'), documents (a bundle
// that holds more than tensors, stored beside them as attnkit_meta), little-endian writing, and the
// .npy arrays that a .npz holds.
// Every size read from a file is checked against the bytes that are there and against
// ReadOptions::max_elements before anything is allocated.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/io/json_parser.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::io::binary {

// ---------------------------------------------------------------------------------------------
// Element types (io/binary_format.cpp converts them to float32)

enum class DType { F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool };

struct DTypeInfo {
  DType type;
  int size;
  const char* name;  // numpy's name, for messages
};

inline uint16_t load16(const unsigned char* p, bool swap) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return swap ? static_cast<uint16_t>(__builtin_bswap16(v)) : v;
}
inline uint32_t load32(const unsigned char* p, bool swap) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return swap ? __builtin_bswap32(v) : v;
}
inline uint64_t load64(const unsigned char* p, bool swap) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return swap ? __builtin_bswap64(v) : v;
}

// numel of a shape from a file: each size and the product checked (overflow, max_elements).
int64_t checked_numel(const Shape& shape, const std::string& what, const ReadOptions& options);
// n elements of type dt at `data` as a float32 tensor of `shape`; tells options.note (once) when a value
// changed; `what` names the tensor in that note.
Tensor make_tensor(const unsigned char* data, const DTypeInfo& dt, bool swap, const Shape& shape, int64_t n,
                   const std::string& what, const ReadOptions& options);

// ---------------------------------------------------------------------------------------------
// Flat bundles and documents (io/tensor_file.hpp, "Documents")

// Names joined by '.', tensors only: the members a flat file holds.
void flatten(const Value& v, const std::string& prefix, std::vector<std::pair<std::string, const Tensor*>>& out,
             std::string_view target, std::string_view format);

// What a binary bundle file holds: the tensors by joined name and, for a document with other values, its
// JSON text with the tensors replaced by null ("" for a bundle of tensors only: nothing is stored beside them).
struct FlatFile {
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  std::string meta;
};
FlatFile flat_file(const Value& value, std::string_view target, std::string_view format);

// The bundle a binary file reads as: its tensors in file order, or with `meta` the document it describes.
Value assemble(std::vector<std::pair<std::string, Tensor>> items, const std::optional<std::string>& meta,
               const std::string& what, const ReadOptions& options);

// ---------------------------------------------------------------------------------------------
// Writing little-endian

void append_le32(std::string& s, uint32_t v);
void append_le16(std::string& s, uint16_t v);
void append_floats(std::string& s, const Tensor& t);  // the tensor's float32 data

// ---------------------------------------------------------------------------------------------
// .npy arrays (io/format_npy.cpp), also the members of a .npz

Tensor parse_npy(std::string_view bytes, const std::string& what, const ReadOptions& options);
std::string npy_of(const Tensor& t);
// A document's JSON text as a 1-D uint8 array (np.load(f)["attnkit_meta"].tobytes().decode()), and back.
std::string npy_of_text(std::string_view text);
std::string text_of_npy(const Tensor& t, const std::string& what);

// ---------------------------------------------------------------------------------------------
// .safetensors

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // as the reference implementation

}  // namespace attnkit::io::binary
