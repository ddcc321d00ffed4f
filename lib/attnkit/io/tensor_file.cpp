// Which format a file is in (its extension, or standard input's first bytes), and reading and writing a
// whole file in it: JSON (io/json_parser.hpp), .npy (io/format_npy.cpp), .npz (io/format_npz.cpp) and
// .safetensors (io/format_safetensors.cpp); io/tensor_file.hpp describes them.
#include "attnkit/io/tensor_file.hpp"

#include <cctype>

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

Value read_value_file(const std::string& path, const ReadOptions& options) {
  const std::string bytes = read_text(path);
  if (path == "-") return read_document(bytes, sniff_format(bytes), "<stdin>", options);
  return read_document(bytes, file_format(path), path, options);
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
