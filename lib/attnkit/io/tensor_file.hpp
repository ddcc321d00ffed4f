// Tensors and bundles in NumPy's and safetensors' binary files, chosen by the file's extension
// (docs/tensor-format.md, "Binary files"):
//   .npy          one tensor (NumPy's format, versions 1 to 3; C or Fortran order)
//   .npz          a bundle: a zip of NAME.npy members; read stored (np.savez) or deflated
//                 (np.savez_compressed, inflated with zlib); written stored, as np.savez writes
//   .safetensors  a bundle: 8-byte little-endian header size, a JSON header
//                 {NAME: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?}, the raw data
//   anything else JSON (json_reader.hpp). Standard output ("-") is JSON; standard input is sniffed when read
//   whole (sniff_format: NumPy's "\x93NUMPY", a zip's "PK\x03\x04", safetensors' header size then '{'), and
//   an NDJSON stream stays JSON.
// Bundles in these files are flat: a nested bundle is written with its names joined by '.'
// ({"enc": {"W": ..}} -> "enc.W", PyTorch's state_dict keys), and read back flat (reference the
// members as FILE#enc.W, or FILE#enc. for the bundle of enc.*).
// Documents: a bundle that holds more than tensors (a seq2seq-train checkpoint: config, vocabularies, counters
// beside its parameters and optimizer state) is written to .safetensors and .npz as its tensors, under their
// names joined by '.', plus the JSON text of the document with each tensor replaced by null, stored
//   .safetensors  in "__metadata__" under "attnkit_meta" (a str -> str map, as the format asks)
//   .npz          as the 1-D uint8 member attnkit_meta.npy (np.load(f)["attnkit_meta"].tobytes().decode())
// and read back as that document (the same names, nesting, order and bits as its JSON form). A file without
// attnkit_meta (a PyTorch state_dict), or whose document holds tensors only, reads as its flat bundle. A
// document that places a tensor the file lacks, places one twice, leaves a tensor of the file unplaced, or
// names two tensors alike once joined is refused; a null member cannot be written (null places tensors).
// Written as little-endian float32 and read back bit for bit (NaN payloads and signed zeros too).
// Read and converted to float32: float16, bfloat16, (u)int8, (u)int16 and bool exactly; float64 and
// (u)int32/64 rounded to the nearest float32. When rounding changed a value
// (a float64 that is not a float32, an integer of magnitude over 2^24 that is not a multiple of its
// spacing there, a float64 past float32's range becoming infinite), ReadOptions::note is told once per
// tensor: "w.npz#b: float64 rounded to float32: 3 of 6 values changed (first at [0, 1]: 0.1 -> 0.100000001)".
// Hostile files are refused with attnkit::Error naming the file and what is wrong, before anything
// is allocated from their header: a shape past ReadOptions::max_elements or 8 dimensions, data offsets
// past the end or overlapping, holes between tensors (safetensors), sizes that disagree with the shape,
// truncated files, bytes after the data, zip entries that overlap or whose CRC-32 is wrong, whose name is not
// UTF-8 or whose local header disagrees with the central directory. A deflated .npz member is inflated in
// bounded steps against its .npy header's byte count, never into a buffer of the size the zip claims.
#pragma once
#include <map>
#include <string>
#include <string_view>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/value.hpp"

namespace attnkit::io {

enum class FileFormat { Json, Npy, Npz, Safetensors };

// By extension (case-insensitive): .npy, .npz, .safetensors; everything else (and "-") is Json.
FileFormat file_format(std::string_view path);
// By the first bytes (standard input, which has no name): "\x93NUMPY" Npy, "PK\x03\x04" or an empty zip's
// "PK\x05\x06" Npz, an 8-byte little-endian header size (2 to 100 MB) followed by '{' Safetensors, else
// Json (JSON text never starts with those bytes: it holds no NUL and never starts with 0x93 or 'P').
// `prefix` may be the first bytes only: sniff_needs() says how many decide.
FileFormat sniff_format(std::string_view prefix);
constexpr size_t sniff_needs() { return 9; }
// Refuses, as soon as they arrive, first bytes that no input in `format` starts with (`from`: where the bytes
// not checked before start), with the format's own message for them: a wrong magic (.npy, .npz), a header
// size past the limit or a header that cannot be JSON (.safetensors), a byte no JSON text holds
// (io::json_impossible_at). So a device or an endless stream is refused at once, not read to its end.
void refuse_impossible_start(std::string_view so_far, size_t from, FileFormat format, std::string_view source,
                             const ReadOptions& options);
// The member of a document file that holds its other values (see Documents above).
inline constexpr const char* kMetaName = "attnkit_meta";
std::string_view format_name(FileFormat format);  // "JSON", ".npy", ".npz", ".safetensors"
inline bool is_binary_format(std::string_view path) { return file_format(path) != FileFormat::Json; }

// The contents of a file in one of the binary formats; `source` names it in messages.
Value read_npy(std::string_view bytes, std::string_view source, const ReadOptions& options = {});
Value read_npz(std::string_view bytes, std::string_view source, const ReadOptions& options = {});
Value read_safetensors(std::string_view bytes, std::string_view source, const ReadOptions& options = {});
// `bytes` in `format` (Json: one document, parse_json); `source` names them in messages.
Value read_document(std::string_view bytes, FileFormat format, std::string_view source, const ReadOptions& options = {});
// A whole file as one document in the format its extension names; "-" reads standard input and sniffs it.
Value read_value_file(const std::string& path, const ReadOptions& options = {});

// The bytes of a file; `target` names it in messages. npy: a tensor; npz and safetensors: a bundle
// of tensors (nested bundles flattened, see above). Anything else is refused with what to do instead.
std::string npy_bytes(const Value& value, std::string_view target);
std::string npz_bytes(const Value& value, std::string_view target);
std::string safetensors_bytes(const Value& value, std::string_view target);
// The same with some tensors stored in another element type, by joined name: "I8" (every value an integer in
// [-128, 127]) or "BF16" (every value a bfloat16: the low 16 bits of its float32 zero); a value the type cannot
// hold exactly, or a name the bundle lacks, is refused naming the tensor. Read back as float32, bit for bit.
std::string safetensors_bytes(const Value& value, std::string_view target,
                              const std::map<std::string, std::string>& dtypes);
// The dtype of every tensor of a .safetensors file ("F32", "I8", ...), by name, from its header (checked as
// read_safetensors checks it: a file it refuses is refused here too).
std::map<std::string, std::string> safetensors_dtypes(std::string_view bytes, std::string_view source);

// Writes `value` to `path` atomically in the format its extension names (JSON: `json` options, a newline
// after the document).
void write_value_file(const std::string& path, const Value& value, const WriteOptions& json = {});

}  // namespace attnkit::io
