// The communicators of train/distributed.hpp: the single process, and MPI's world (the library's only MPI
// code, compiled when CMake's ATTNKIT_MPI defines ATTNKIT_HAVE_MPI).
#include "attnkit/train/distributed.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "attnkit/tensor/error.hpp"

#ifdef ATTNKIT_HAVE_MPI
#include <mpi.h>
#endif

namespace attnkit::train {

namespace {

// out = ((s_0 + s_1) + s_2) + ...: the shards of one rank added in shard order.
void fold_shards(const float* shards, int64_t count, int64_t n, float* out) {
  AK_ASSERT(count >= 1 && n >= 0, "fold_shards: {} shards of {} floats", count, n);
  std::copy(shards, shards + n, out);
  for (int64_t s = 1; s < count; ++s) {
    const float* g = shards + s * n;
    for (int64_t i = 0; i < n; ++i) out[i] += g[i];
  }
}

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void sum_shards(const float* shards, int64_t count, int64_t n, bool, float* out) override {
    fold_shards(shards, count, n, out);
  }
  void allgather(const double* mine, int64_t n, double* all) override { std::copy(mine, mine + n, all); }
  void allgather(const uint64_t* mine, int64_t n, uint64_t* all) override { std::copy(mine, mine + n, all); }
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  bool any(bool mine) override { return mine; }
  void abort(int) override {}
};

#ifdef ATTNKIT_HAVE_MPI

// MPI counts are ints: a message of more is sent as pieces of at most this many elements.
constexpr int64_t kPiece = int64_t{1} << 28;

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiWorld() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void sum_shards(const float* shards, int64_t count, int64_t n, bool deterministic, float* out) override {
    if (!deterministic) {
      fold_shards(shards, count, n, out);
      for (int64_t at = 0; at < n; at += kPiece)
        MPI_Allreduce(MPI_IN_PLACE, out + at, int(std::min(kPiece, n - at)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      return;
    }
    // Rank 0 adds its own shards, then each other rank's in rank order, one shard at a time (a fixed order),
    // and broadcasts the sum.
    if (rank_ == 0) {
      fold_shards(shards, count, n, out);
      std::vector<float> received(static_cast<size_t>(n));
      for (int r = 1; r < size_; ++r)
        for (int64_t s = 0; s < count; ++s) {
          for (int64_t at = 0; at < n; at += kPiece)
            MPI_Recv(received.data() + at, int(std::min(kPiece, n - at)), MPI_FLOAT, r, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
          for (int64_t i = 0; i < n; ++i) out[i] += received[size_t(i)];
        }
    } else {
      for (int64_t s = 0; s < count; ++s)
        for (int64_t at = 0; at < n; at += kPiece)
          MPI_Send(shards + s * n + at, int(std::min(kPiece, n - at)), MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
    }
    for (int64_t at = 0; at < n; at += kPiece)
      MPI_Bcast(out + at, int(std::min(kPiece, n - at)), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  void allgather(const double* mine, int64_t n, double* all) override {
    MPI_Allgather(mine, int(n), MPI_DOUBLE, all, int(n), MPI_DOUBLE, MPI_COMM_WORLD);
  }
  void allgather(const uint64_t* mine, int64_t n, uint64_t* all) override {
    MPI_Allgather(mine, int(n), MPI_UINT64_T, all, int(n), MPI_UINT64_T, MPI_COMM_WORLD);
  }
  std::vector<std::string> allgather(const std::string& mine) override {
    const uint64_t n = mine.size();
    std::vector<uint64_t> sizes(static_cast<size_t>(size_));
    allgather(&n, 1, sizes.data());
    // MPI_Allgatherv counts and offsets are ints: the whole gather must stay below 2^31 bytes
    std::vector<int> counts(sizes.size()), offsets(sizes.size());
    uint64_t total = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      AK_CHECK(total + sizes[r] <= uint64_t(INT32_MAX), "gathering {} bytes from {} processes: more than 2^31 - 1",
               total + sizes[r], size_);
      counts[r] = int(sizes[r]), offsets[r] = int(total);
      total += sizes[r];
    }
    std::string all(total, '\0');
    MPI_Allgatherv(mine.data(), int(n), MPI_CHAR, all.data(), counts.data(), offsets.data(), MPI_CHAR,
                   MPI_COMM_WORLD);
    std::vector<std::string> out;
    for (size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(size_t(offsets[r]), sizes[r]));
    return out;
  }
  bool any(bool mine) override {
    int in = mine ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return out != 0;
  }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  int rank_ = 0, size_ = 1;
};

// An MPI launcher's variables in the environment: Open MPI's, PMI's (MPICH's Hydra, Slurm), PMIx's.
bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

#endif

}  // namespace

bool built_with_mpi() {
#ifdef ATTNKIT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Communicator& world() {
#ifdef ATTNKIT_HAVE_MPI
  if (started_by_mpi_launcher()) {
    static MpiWorld mpi;
    return mpi;
  }
#endif
  return single_process();
}

Communicator& single_process() {
  static SingleProcess single;
  return single;
}

int cores_given() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace attnkit::train
