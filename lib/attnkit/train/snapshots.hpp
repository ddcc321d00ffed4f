// Numbered checkpoints of a run (seq2seq-train --keep-last N; Marian's model.iterN.npz, fairseq's
// checkpoint_N.pt): besides the checkpoint itself, a save at a multiple of --save-every or at the run's last step
// also writes snapshot_path(save, step), "model.json" -> "model.step1000.json" (the extension kept, so the format
// too), and removes the oldest snapshot this run wrote beyond the newest N. models/checkpoint.hpp's
// average_checkpoints averages them.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

namespace attnkit::train {

std::string snapshot_path(const std::string& save_path, int64_t step);

class Snapshots {
 public:
  // keep > 0 and the save of `step` a multiple of save_every (> 0) or the last step: writes its snapshot, an
  // atomic copy of the checkpoint just saved at save_path (with `save`, an atomic write of the whole checkpoint,
  // when save_path is a device or FIFO), then removes this run's snapshots beyond the newest keep.
  void after_save(const std::string& save_path, int64_t step, int64_t save_every, int64_t last_step, int64_t keep,
                  const std::function<void(const std::string&)>& save);

 private:
  std::deque<std::string> written_;
};

}  // namespace attnkit::train
