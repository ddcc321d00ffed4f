// libFuzzer target: the .npy, .npz and .safetensors readers (io/tensor_file.hpp), every input
// through all three (each refuses the others' files at once).
// Properties: only attnkit::Error is thrown; what a reader accepts, written back in its format,
// reads back the same (names, shapes, bits), documents too (tensors beside other values, placed by the
// JSON text in attnkit_meta: corpus/document.*).
#include "attnkit/io/tensor_file.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  io::ReadOptions options;
  options.max_elements = 1 << 16;
  options.note = [](const std::string& note) {
    if (note.empty()) fuzz::broken("an empty precision note");
  };
  using Reader = io::Value (*)(std::string_view, std::string_view, const io::ReadOptions&);
  using Writer = std::string (*)(const io::Value&, std::string_view);
  const struct {
    Reader read;
    Writer write;
    const char* name;
  } formats[] = {{io::read_npy, io::npy_bytes, "x.npy"},
                 {io::read_npz, io::npz_bytes, "x.npz"},
                 {io::read_safetensors, io::safetensors_bytes, "x.safetensors"}};
  for (const auto& f : formats) {
    io::Value v;
    try {
      v = f.read(bytes, f.name, options);
    } catch (const Error&) {
      continue;
    }
    std::string again;
    try {
      again = f.write(v, f.name);
    } catch (const Error&) {
      fuzz::broken("what a reader accepted cannot be written back");  // bundles of tensors, or documents
    }
    io::Value back;
    try {
      back = f.read(again, f.name, options);
    } catch (const Error&) {
      fuzz::broken("a written file is refused by its reader");
    }
    if (!fuzz::same(v, back, true)) fuzz::broken("written back, the file reads differently");
  }
  return 0;
}
