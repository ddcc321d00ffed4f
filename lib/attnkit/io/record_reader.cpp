#include "attnkit/io/record_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

int open_input(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  AK_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    close(fd);
    fail("{}: is a folder, not a file", path);
  }
  return fd;
}

}  // namespace

RecordReader::RecordReader(const std::string& path, const ReadOptions& options)
    : source_(path == "-" ? "<stdin>" : path), options_(options) {
  fd_ = path == "-" ? 0 : open_input(path);
  binary_ = path != "-" && file_format(path) != FileFormat::Json;
  format_ = static_cast<int>(file_format(path));
}

RecordReader::~RecordReader() {
  if (fd_ > 0) close(fd_);
}

bool RecordReader::fill() {
  if (eof_) return false;
  if (start_ > 0 && (start_ >= used_ / 2 || used_ == buf_.size())) {  // drop what was consumed
    buf_.erase(0, start_);
    used_ -= start_;
    scan_ -= start_;
    start_ = 0;
  }
  constexpr size_t kChunk = size_t{1} << 20;
  if (buf_.size() - used_ < kChunk / 2) buf_.resize(std::max(buf_.size() * 2, used_ + kChunk));
  for (;;) {
    ssize_t n = read(fd_, buf_.data() + used_, buf_.size() - used_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: read error ({})", source_, std::strerror(errno));
    if (n == 0) {
      eof_ = true;
      return false;
    }
    used_ += static_cast<size_t>(n);
    return true;
  }
}

bool RecordReader::next(Value& out) {
  if (fd_ == 0 && records_ == 0 && !binary_ && !sniffed_) {
    // Standard input: a binary file (io/tensor_file.hpp's sniff_format) is one document; anything else NDJSON.
    // Read until its first bytes decide: sniff_needs() of them, or sooner when a byte at 4..8 is not NUL and
    // the first is not a binary magic's (a safetensors header size below 100 MB has NUL bytes there, JSON none).
    auto decided = [&] {
      if (used_ >= sniff_needs()) return true;
      const unsigned char first = used_ ? static_cast<unsigned char>(buf_[0]) : 0;
      if (used_ == 0 || first == 0x93 || first == 'P') return false;
      for (size_t i = 4; i < used_; ++i)
        if (buf_[i] != '\0') return true;
      return false;
    };
    while (!decided() && fill()) {
    }
    sniffed_ = true;
    const FileFormat f = sniff_format(std::string_view(buf_.data(), used_));
    if (f != FileFormat::Json) binary_ = true, format_ = static_cast<int>(f);
  }
  if (binary_) {  // .npy, .npz, .safetensors (io/tensor_file.hpp): one document, the whole file
    if (records_ > 0) return false;
    for (size_t from = 0; fill(); from = used_)
      refuse_impossible_start(std::string_view(buf_.data(), used_), from, static_cast<FileFormat>(format_), source_, options_);
    out = read_document(std::string_view(buf_.data(), used_), static_cast<FileFormat>(format_), source_, options_);
    std::string().swap(buf_);
    ++records_;
    return true;
  }
  // Find the newline that ends the record at start_: one at bracket depth 0 outside strings, after
  // something that is not whitespace (blank lines between records are skipped). The parser
  // checks the record itself; this scan only finds where it ends.
  for (;;) {
    const char* b = buf_.data();
    size_t i = scan_, end_at = std::string::npos;
    if (!started_) {
      while (i < used_ && is_ws(b[i])) {
        if (b[i] == '\n') start_ = i + 1, ++line_;
        ++i;
      }
      if (i < used_) {
        started_ = true;
        // no JSON value starts so: the parser says so from what has arrived, without reading on
        if (!json_value_can_start(b[i])) end_at = used_, i = used_;
      }
    }
    if (started_) {
      for (; i < used_ && end_at == std::string::npos; ++i) {
        char c = b[i];
        if (static_cast<unsigned char>(c) < 0x20 && !is_ws(c)) {  // in no JSON text: the record ends here
          end_at = i + 1;
          break;
        }
        if (in_string_) {
          if (c == '\\') {  // skip the escaped character (once it has arrived)
            if (i + 1 >= used_) break;
            ++i;
            continue;
          }
          if (c == '"' || c == '\n') in_string_ = false;  // a newline in a string ends it: invalid anyway
          if (c != '\n') continue;
        }
        if (c == '"') in_string_ = true;
        else if (c == '[' || c == '{') ++depth_;
        else if (c == ']' || c == '}') --depth_;
        if (c == '\n') {
          if (depth_ <= 0) {
            end_at = i;
            break;
          }
          ++newlines_;
        }
      }
    }
    scan_ = i;
    if (end_at == std::string::npos && fill()) continue;
    if (end_at == std::string::npos) end_at = used_;  // the end of the input
    if (!started_) {
      if (records_ == 0) {  // nothing but whitespace: "empty input" at its end
        parse_json_record(std::string_view(buf_.data() + start_, used_ - start_), source_, options_, line_);
      }
      return false;
    }
    std::string_view text(buf_.data() + start_, end_at - start_);
    out = parse_json_record(text, source_, options_, line_);
    ++records_;
    line_ += newlines_ + 1;
    start_ = scan_ = std::min(end_at + 1, used_);
    depth_ = newlines_ = 0;
    in_string_ = started_ = false;
    return true;
  }
}

bool json_value_can_start(char c) {
  return c == '[' || c == '{' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n';
}

size_t json_impossible_at(std::string_view text, size_t from) {
  size_t first = 0;
  while (first < text.size() && is_ws(text[first])) ++first;
  if (first < text.size() && first >= from && !json_value_can_start(text[first])) return first;
  for (size_t i = from; i < text.size(); ++i)
    if (static_cast<unsigned char>(text[i]) < 0x20 && !is_ws(text[i])) return i;
  return std::string_view::npos;
}

std::string read_text(const std::string& path, const std::function<void(std::string_view, size_t)>& check) {
  const bool in = path == "-";
  const int fd = in ? 0 : open_input(path);
  struct stat st {};
  fstat(fd, &st);
  // Regular files are read in one go; pipes, FIFOs and devices (<(...), /dev/stdin) until their end.
  std::string text;
  size_t size = S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) : 0;
  text.resize(std::max<size_t>(size + 1, 1 << 16));
  size_t used = 0;
  auto done = [&] {
    if (!in) close(fd);
  };
  for (;;) {
    if (used == text.size()) text.resize(text.size() * 2);
    ssize_t n = read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      done();
      fail("{}: read error ({})", in ? "<stdin>" : path, std::strerror(err));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
    if (check) {
      try {
        check(std::string_view(text.data(), used), used - static_cast<size_t>(n));
      } catch (...) {
        done();
        throw;
      }
    }
  }
  done();
  text.resize(used);
  return text;
}

std::string read_plain_text(const std::string& path) {
  const std::string name = path == "-" ? "<stdin>" : path;
  return read_text(path, [&](std::string_view so_far, size_t from) {
    const size_t nul = so_far.find('\0', from);
    AK_CHECK(nul == std::string_view::npos, "{}: byte {} is a NUL byte: not a text file", name, nul);
  });
}

std::string read_json_text(const std::string& path) {
  const std::string name = path == "-" ? "<stdin>" : path;
  return read_text(path, [&](std::string_view so_far, size_t from) {
    const size_t at = json_impossible_at(so_far, from);
    if (at == std::string_view::npos) return;
    (void)parse_json(so_far.substr(0, at + 1), name);  // the parser's message for it
    fail("{}: byte {} cannot be part of a JSON document", name, at);
  });
}

}  // namespace attnkit::io
