#include "attnkit/train/snapshots.hpp"

#include <filesystem>

#include "attnkit/io/atomic_file.hpp"

namespace attnkit::train {

std::string snapshot_path(const std::string& save_path, int64_t step) {
  const std::filesystem::path p(save_path);
  const std::string ext = p.extension().string();  // ".json", ".safetensors", ".npz" (or none)
  const std::string stem = save_path.substr(0, save_path.size() - ext.size());
  return stem + ".step" + std::to_string(step) + ext;
}

void Snapshots::after_save(const std::string& save_path, int64_t step, int64_t save_every, int64_t last_step,
                           int64_t keep, const std::function<void(const std::string&)>& save) {
  if (keep <= 0 || !(step == last_step || (save_every > 0 && step % save_every == 0))) return;
  const std::string path = snapshot_path(save_path, step);
  // The checkpoint just written, copied: the same bytes as a second save, without serialising it again. A save
  // to a device or FIFO left nothing to read back, so that is saved again.
  if (std::filesystem::is_regular_file(save_path))
    io::copy_file_atomic(save_path, path);
  else
    save(path);
  if (written_.empty() || written_.back() != path) written_.push_back(path);
  while (static_cast<int64_t>(written_.size()) > keep) {
    std::error_code ec;  // already gone (removed by hand): nothing to do
    std::filesystem::remove(written_.front(), ec);
    written_.pop_front();
  }
}

}  // namespace attnkit::train
