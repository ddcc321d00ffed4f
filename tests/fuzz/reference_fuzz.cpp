// libFuzzer target: references (parse_reference, PATH#a/b) and Sources lookups.
// The input is "REFERENCE\nDOCUMENT": the reference text is parsed as given, then looked up
// (as value and as tensor, NaN refused and allowed) in the document, written to a file.
// Properties: only attnkit::Error is thrown; a parsed reference prints back to itself.
#include <unistd.h>

#include <fstream>
#include <string>

#include "attnkit/io/reference.hpp"
#include "attnkit/tensor/error.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

namespace {
const std::string& document_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/attnkit-fuzz-reference-" + std::to_string(getpid()) + ".json";
  }();
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  size_t newline = input.find('\n');
  std::string ref_text = input.substr(0, newline);
  std::string document = newline == std::string::npos ? "" : input.substr(newline + 1);

  try {
    io::Reference r = io::parse_reference(ref_text);
    if (r.text() != ref_text) fuzz::broken("parse_reference(text).text() != text");
    if (r.path.empty()) fuzz::broken("a reference with an empty path");
    for (const auto& n : r.names)
      if (n.empty()) fuzz::broken("a reference with an empty name");
  } catch (const Error&) {
  }

  {
    std::ofstream out(document_path(), std::ios::binary | std::ios::trunc);
    out << document;
  }
  // The names part of the fuzzed reference, looked up in the fuzzed document.
  size_t hash = ref_text.find('#');
  std::string ref = document_path() + (hash == std::string::npos ? "" : ref_text.substr(hash));
  io::ReadOptions options;
  options.max_elements = 1 << 16;
  for (bool allow_nan : {false, true}) {
    io::Sources sources(options);
    try {
      (void)sources.value(ref);
    } catch (const Error&) {
    }
    try {
      Tensor t = sources.tensor(ref, "fuzz", allow_nan);
      if (!allow_nan && io::find_nan(t) >= 0) fuzz::broken("a NaN passed without allow_nan");
    } catch (const Error&) {
    }
  }
  return 0;
}
