// Which format a file is in (its extension, or standard input's first bytes), and reading and writing a
// whole file in it: JSON (io/json_parser.hpp), .npy (io/format_npy.cpp), .npz (io/format_npz.cpp) and
// .safetensors (io/format_safetensors.cpp); io/tensor_file.hpp describes them.
#include "attnkit/io/tensor_file.hpp"

#include <cctype>
#include <optional>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/binary_format.hpp"
#include "attnkit/io/record_reader.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

FileFormat file_format(std::string_view path) {
  auto ends_with = [&](std::string_view ext) {
    if (path.size() <= ext.size()) return false;
    for (size_t i = 0; i < ext.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(path[path.size() - ext.size() + i])) != ext[i]) return false;
    return true;
  };
  if (ends_with(".npy")) return FileFormat::Npy;
  if (ends_with(".npz")) return FileFormat::Npz;
  if (ends_with(".safetensors")) return FileFormat::Safetensors;
  return FileFormat::Json;
}

namespace {

constexpr EnumName<FileFormat> kFormatNames[] = {
    {FileFormat::Json, "JSON"}, {FileFormat::Npy, ".npy"}, {FileFormat::Npz, ".npz"}, {FileFormat::Safetensors, ".safetensors"}};

}  // namespace

std::string_view format_name(FileFormat format) { return name_of(kFormatNames, format); }

FileFormat sniff_format(std::string_view b) {
  if (b.size() >= 6 && b.substr(0, 6) == std::string_view("\x93NUMPY", 6)) return FileFormat::Npy;
  if (b.size() >= 4 && (b.substr(0, 4) == std::string_view("PK\x03\x04", 4) || b.substr(0, 4) == std::string_view("PK\x05\x06", 4)))
    return FileFormat::Npz;
  if (b.size() >= 9 && b[8] == '{') {
    const uint64_t header = binary::load64(reinterpret_cast<const unsigned char*>(b.data()), false);
    if (header <= binary::kMaxSafetensorsHeader && header >= 2) return FileFormat::Safetensors;
  }
  return FileFormat::Json;
}

Value read_document(std::string_view bytes, FileFormat format, std::string_view source, const ReadOptions& options) {
  switch (format) {
    case FileFormat::Npy: return read_npy(bytes, source, options);
    case FileFormat::Npz: return read_npz(bytes, source, options);
    case FileFormat::Safetensors: return read_safetensors(bytes, source, options);
    default: return parse_json(bytes, source, options);
  }
}

void refuse_impossible_start(std::string_view so_far, size_t from, FileFormat format, std::string_view source,
                             const ReadOptions& options) {
  if (format == FileFormat::Json) {
    if (json_impossible_at(so_far, from) == std::string_view::npos) return;
  } else {
    if (so_far.size() < sniff_needs() || from >= sniff_needs()) return;
    if (format == FileFormat::Safetensors) {
      const char c = so_far[8];
      const bool blank = c == ' ' || c == '\n' || c == '\r' || c == '\t';
      const uint64_t header = binary::load64(reinterpret_cast<const unsigned char*>(so_far.data()), false);
      if (header <= binary::kMaxSafetensorsHeader && (c == '{' || blank)) return;
    } else if (sniff_format(so_far) == format) {
      return;
    }
  }
  read_document(so_far, format, source, options);  // throws the parser's message for these bytes
  fail("{}: not a {} file", source, format_name(format));
}

Value read_value_file(const std::string& path, const ReadOptions& options) {
  const bool in = path == "-";
  const std::string source = in ? "<stdin>" : path;
  // standard input's format once its first bytes decide (sniff_format), a file's by its name
  std::optional<FileFormat> format;
  if (!in) format = file_format(path);
  const std::string bytes = read_text(path, [&](std::string_view so_far, size_t from) {
    if (!format && so_far.size() >= sniff_needs()) format = sniff_format(so_far), from = 0;
    if (format) refuse_impossible_start(so_far, from, *format, source, options);
  });
  return read_document(bytes, format ? *format : sniff_format(bytes), source, options);
}

void write_value_file(const std::string& path, const Value& value, const WriteOptions& json) {
  switch (file_format(path)) {
    case FileFormat::Npy: return write_file_atomic(path, npy_bytes(value, path));
    case FileFormat::Npz: return write_file_atomic(path, npz_bytes(value, path));
    case FileFormat::Safetensors: return write_file_atomic(path, safetensors_bytes(value, path));
    default: return write_file_atomic(path, to_json(value, json) + "\n");
  }
}

}  // namespace attnkit::io
