#include "attnkit/io/atomic_file.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter file(path);
  file.write(contents);
  file.commit();
}

void copy_file_atomic(const std::string& from, const std::string& to) {
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO does not hang open
  AK_CHECK(in >= 0, "{}: cannot open ({})", from, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{in};
  struct stat st {};
  AK_CHECK(fstat(in, &st) == 0, "{}: cannot stat ({})", from, std::strerror(errno));
  AK_CHECK(S_ISREG(st.st_mode), "{}: is not a regular file, nothing to copy", from);
  AtomicFileWriter out(to);
  std::string buffer(size_t{1} << 20, '\0');
  for (;;) {
    const ssize_t n = read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    AK_CHECK(n >= 0, "{}: read failed ({})", from, std::strerror(errno));
    if (n == 0) break;
    out.write(std::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  out.commit();
}

AtomicFileWriter::AtomicFileWriter(const std::string& path_given) : given_(path_given), path_(path_given) {
  AK_CHECK(!given_.empty(), "output file: empty path");
  struct stat st {};
  if (lstat(path_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A symbolic link: replace the file it points to, and keep the link.
    char* target = realpath(path_.c_str(), nullptr);
    if (target) {
      path_ = target;
      free(target);
    }
  }
  if (stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // Devices and FIFOs (-o /dev/null, -o /dev/stdout, a named pipe) are written to as they are: a
    // rename would replace them with a regular file (as root, /dev/null itself).
    AK_CHECK(!S_ISDIR(st.st_mode), "{}: is a folder, not a file", given_);
    fd_ = open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    AK_CHECK(fd_ >= 0, "{}: cannot open for writing ({})", path_, std::strerror(errno));
    return;
  }
  size_t slash = path_.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  AK_CHECK(!base.empty(), "{}: is a folder, not a file", path_);
  tmp_ = (slash == std::string::npos ? std::string() : dir) + "." + base + ".tmp.XXXXXX";
  fd_ = mkstemp(tmp_.data());
  AK_CHECK(fd_ >= 0, "{}: cannot create a temporary file in {} ({})", path_, dir, std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (done_) return;
  if (fd_ >= 0) close(fd_);
  if (!tmp_.empty()) unlink(tmp_.c_str());
}

void AtomicFileWriter::give_up(const char* what) {
  int err = errno;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) unlink(tmp_.c_str());
  done_ = true;
  fail("{}: {} failed ({})", path_, what, std::strerror(err));
}

void AtomicFileWriter::write(std::string_view text) {
  AK_ASSERT(!done_ && fd_ >= 0, "{}: written after it was closed", path_);
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up("write");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  AK_ASSERT(!done_ && fd_ >= 0, "{}: committed twice", path_);
  if (tmp_.empty()) {  // a device or FIFO
    close(fd_);
    fd_ = -1;
    done_ = true;
    return;
  }
  if (fchmod(fd_, 0644) != 0) give_up("chmod");
  if (fsync(fd_) != 0) give_up("fsync");
  int closed = close(fd_);
  fd_ = -1;
  if (closed != 0) give_up("close");
  if (rename(tmp_.c_str(), path_.c_str()) != 0) give_up("rename of the temporary into place");
  done_ = true;
  // The rename is an entry of the folder: sync the folder too, or a power cut could still lose the new name.
  // Best effort: the file is in place and complete either way, and some file systems refuse a folder's fsync.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
}

}  // namespace attnkit::io
