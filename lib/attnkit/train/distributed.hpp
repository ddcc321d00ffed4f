// Data-parallel training over processes (docs/distributed.md): the communicator the trainer reduces through.
//
// A Communicator is the set of processes that train one model: `size()` ranks, this one `rank()`. The single-
// process one (size 1) does no communication; the MPI one (train/distributed.cpp, the build's only MPI code)
// is MPI_COMM_WORLD when the process was started by an MPI launcher (mpirun, mpiexec, srun). Every call is
// collective: each rank makes the same calls in the same order, or the job stops (MPI's error handler, or a
// rank that exited, ends the others: no call waits for a process that is gone).
//
// The global batch is cut into `shards` consecutive runs of rows, shard s on rank s / (shards / size); the
// gradient of each shard is computed on its own and the shard gradients are summed:
//   fast            each rank adds its shards' gradients in shard order, then MPI_Allreduce(SUM) over ranks
//                   (the reduction order is MPI's: equal to a single process within float reordering)
//   deterministic   every shard gradient goes to rank 0, which adds them in shard order
//                   ((g_0 + g_1) + g_2) + ..., and broadcasts the sum: the same bits for every process count
//                   that divides the shard count, one process included.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::train {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // `count` shard vectors of n floats each, this rank's shards in shard order, stored back to back in
  // `shards`; `out` (n floats) receives the sum over every rank's shards, on every rank. deterministic: in
  // global shard order (above); otherwise each rank's own sum, then an allreduce.
  virtual void sum_shards(const float* shards, int64_t count, int64_t n, bool deterministic, float* out) = 0;
  // Every rank's `n` values, rank after rank, in `all` (size() * n values) on every rank.
  virtual void allgather(const double* mine, int64_t n, double* all) = 0;
  virtual void allgather(const uint64_t* mine, int64_t n, uint64_t* all) = 0;
  // Every rank's bytes, in rank order, on every rank (of any lengths).
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // True on every rank when `mine` is true on one of them.
  virtual bool any(bool mine) = 0;
  // Ends every process of the job with `code` (a rank that cannot go on while the others wait in a
  // collective); the single process returns and lets the caller exit.
  virtual void abort(int code) = 0;
};

// The process's communicator: MPI's world when the build has MPI and an MPI launcher started this process,
// else the single process. The first call starts MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main
// thread communicates), and MPI is finalized at exit.
Communicator& world();
// A communicator of this process alone (size 1), whatever started it.
Communicator& single_process();

// True when this build can train over MPI (CMake's ATTNKIT_MPI).
bool built_with_mpi();

// The cores this process may run on (its CPU affinity: what mpirun --bind-to gave it), at least 1.
int cores_given();

}  // namespace attnkit::train
