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

namespace {

// Devices and FIFOs (-o /dev/null, -o /dev/stdout, a named pipe) are written to as they are: a
// rename would replace them with a regular file (as root, /dev/null itself).
void write_in_place(const std::string& path, std::string_view contents) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  AK_CHECK(fd >= 0, "{}: cannot open for writing ({})", path, std::strerror(errno));
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      fail("{}: write failed ({})", path, std::strerror(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path_given, std::string_view contents) {
  AK_CHECK(!path_given.empty(), "output file: empty path");
  std::string path = path_given;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A symbolic link: replace the file it points to, and keep the link.
    char* target = realpath(path.c_str(), nullptr);
    if (target) {
      path = target;
      free(target);
    }
  }
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    AK_CHECK(!S_ISDIR(st.st_mode), "{}: is a folder, not a file", path_given);
    write_in_place(path, contents);
    return;
  }
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  AK_CHECK(!base.empty(), "{}: is a folder, not a file", path);
  std::string tmp = (slash == std::string::npos ? std::string() : dir) + "." + base + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  AK_CHECK(fd >= 0, "{}: cannot create a temporary file in {} ({})", path, dir, std::strerror(errno));
  auto give_up = [&](const char* what) {
    int err = errno;
    close(fd);
    unlink(tmp.c_str());
    fail("{}: {} failed ({})", path, what, std::strerror(err));
  };
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up("write");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (fchmod(fd, 0644) != 0) give_up("chmod");
  if (fsync(fd) != 0) give_up("fsync");
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    fail("{}: close failed ({})", path, std::strerror(err));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    fail("{}: cannot rename the temporary into place ({})", path, std::strerror(err));
  }
}

}  // namespace attnkit::io
