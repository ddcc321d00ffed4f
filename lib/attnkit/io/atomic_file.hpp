// Writing a file so that a crash or SIGKILL at any moment leaves either the old file or the
// complete new one: write a temporary in the same folder, fsync, rename over the target, fsync the folder.
// (A SIGKILL between mkstemp and the rename leaves a stray ".NAME.tmp.XXXXXX" beside the file, never a
// half-written NAME.)
#pragma once
#include <string>
#include <string_view>

namespace attnkit::io {

// Throws attnkit::Error naming the path on any failure (and removes the temporary).
void write_file_atomic(const std::string& path, std::string_view contents);

// The bytes of the regular file `from` written to `to` the same way (read piece by piece, never whole). A
// source that is not a regular file (a device, a FIFO: nothing to read back) or cannot be read is refused
// naming it; a destination that cannot be written, naming it; either way nothing is left at `to`.
void copy_file_atomic(const std::string& from, const std::string& to);

// The same, written piece by piece (a stream's records as they are made): nothing is at `path`
// until commit(); destroyed without commit() (an error on the way), the temporary is removed and
// the old file stays. Devices and FIFOs (-o /dev/null, a named pipe) are written to directly.
// Writing after commit() or after a failure, and committing twice, are bugs of the caller (AK_ASSERT).
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(std::string_view text);
  void commit();

 private:
  [[noreturn]] void give_up(const char* what);
  std::string given_, path_, tmp_;  // tmp_ empty: writing in place (a device or FIFO)
  int fd_ = -1;
  bool done_ = false;
};

}  // namespace attnkit::io
