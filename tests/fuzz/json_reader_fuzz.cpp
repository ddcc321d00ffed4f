// libFuzzer target: the tensor JSON reader (parse_json, parse_json_stream) and the writer.
// Properties: any input either parses or throws attnkit::Error (never anything else, never a
// crash); whatever parses is written back (nested and flat, compact and pretty) and read again
// to the same value, bit for bit.
#include <string_view>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/tensor/error.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

namespace {

void round_trip(const io::Value& v, const io::ReadOptions& options) {
  for (auto format : {io::TensorFormat::Nested, io::TensorFormat::Flat}) {
    for (bool pretty : {false, true}) {
      io::WriteOptions w;
      w.format = format;
      w.pretty = pretty;
      std::string text = io::to_json(v, w);
      io::Value back;
      try {
        back = io::parse_json(text, "written", options);
      } catch (const Error& e) {
        std::fprintf(stderr, "%s\n%s\n", e.what(), text.substr(0, 2000).c_str());
        fuzz::broken("the writer's output does not read back");
      }
      if (!fuzz::same(v, back, format == io::TensorFormat::Flat)) {
        std::fprintf(stderr, "%s\n", text.substr(0, 2000).c_str());
        fuzz::broken("written and read back, the value changed");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  io::ReadOptions options;
  options.max_elements = 1 << 16;  // keep one input's memory small; the limit itself is tested
  try {
    io::Value v = io::parse_json(text, "fuzz.json", options);
    round_trip(v, options);
  } catch (const Error&) {
  }
  try {
    for (const auto& v : io::parse_json_stream(text, "<stdin>", options)) round_trip(v, options);
  } catch (const Error&) {
  }
  return 0;
}
