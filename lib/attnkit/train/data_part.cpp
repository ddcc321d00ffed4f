#include "attnkit/train/data_part.hpp"

#include <sys/stat.h>

#include <fstream>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

// Reads up to `n` bytes at the stream's position onto `out`; the bytes read.
int64_t read_some(std::ifstream& in, std::string& out, int64_t n) {
  const size_t old = out.size();
  out.resize(old + static_cast<size_t>(n));
  in.read(out.data() + old, n);
  const int64_t got = in.gcount();
  out.resize(old + static_cast<size_t>(got));
  return got;
}

}  // namespace

FilePart read_file_part(const std::string& path, int64_t part, int64_t parts) {
  AK_CHECK(parts >= 1 && part >= 0 && part < parts, "{}: part {} of {} parts", path, part, parts);
  struct stat st {};
  AK_CHECK(path != "-" && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode),
           "{}: not a regular file (each process reads its part of the training file, so it must be able to seek)",
           path);
  const int64_t size = st.st_size;
  FilePart p;
  p.range_begin = static_cast<int64_t>((static_cast<__int128>(size) * part) / parts);
  p.range_end = static_cast<int64_t>((static_cast<__int128>(size) * (part + 1)) / parts);
  std::ifstream in(path, std::ios::binary);
  AK_CHECK(in.good(), "{}: cannot open", path);
  constexpr int64_t kChunk = 1 << 16;
  std::string buf;
  // The first line starting in the range: at range_begin when the byte before it ends a line.
  int64_t at = p.range_begin;
  if (at > 0) {
    in.seekg(at - 1);
    char c = 0;
    in.read(&c, 1);
    AK_CHECK(in.gcount() == 1, "{}: cannot read byte {}", path, at - 1);
    ++p.bytes_read;
    while (c != '\n' && at < p.range_end) {
      buf.clear();
      const int64_t got = read_some(in, buf, std::min(kChunk, size - at));
      AK_CHECK(got > 0, "{}: cannot read at byte {}", path, at);
      p.bytes_read += got;
      const size_t nl = buf.find('\n');
      if (nl == std::string::npos) {
        at += got;
        continue;
      }
      at += static_cast<int64_t>(nl) + 1;
      c = '\n';
    }
  }
  p.begin = at;
  if (at >= p.range_end) return p;  // the range lies inside a line of an earlier part
  in.clear();
  in.seekg(at);
  // The range, then on to the end of the line it ends inside.
  int64_t want = p.range_end - at;
  while (want > 0) {
    const int64_t got = read_some(in, p.text, std::min(kChunk, want));
    AK_CHECK(got > 0, "{}: cannot read at byte {}", path, at + static_cast<int64_t>(p.text.size()));
    want -= got;
  }
  while (p.text.back() != '\n' && p.begin + static_cast<int64_t>(p.text.size()) < size) {
    const size_t from = p.text.size();
    const int64_t got = read_some(in, p.text, std::min(kChunk, size - p.begin - static_cast<int64_t>(from)));
    AK_CHECK(got > 0, "{}: cannot read at byte {}", path, p.begin + static_cast<int64_t>(from));
    const size_t nl = p.text.find('\n', from);
    if (nl != std::string::npos) p.text.resize(nl + 1);
  }
  p.bytes_read += static_cast<int64_t>(p.text.size());
  const size_t nul = p.text.find('\0');
  AK_CHECK(nul == std::string::npos, "{}: byte {} is a NUL byte: not a text file", path,
           p.begin + static_cast<int64_t>(nul));
  return p;
}

Corpus read_corpus_part(const std::string& path, int64_t part, int64_t parts, const DataOptions& options,
                        std::pair<int64_t, int64_t>* range) {
  const FilePart p = read_file_part(path, part, parts);
  if (range) *range = {p.range_begin, p.range_end};
  DataOptions o = options;
  o.format = data_format(path, options.format);
  o.allow_empty = true;
  if (p.begin > 0) o.first_byte = p.begin;
  return parse_corpus(p.text, path, o);
}

}  // namespace attnkit::train
