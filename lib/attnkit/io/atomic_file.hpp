// Writing a file so that a crash or SIGKILL at any moment leaves either the old file or the
// complete new one: write a temporary in the same folder, fsync, rename over the target.
#pragma once
#include <string>
#include <string_view>

namespace attnkit::io {

// Throws attnkit::Error naming the path on any failure (and removes the temporary).
void write_file_atomic(const std::string& path, std::string_view contents);

}  // namespace attnkit::io
