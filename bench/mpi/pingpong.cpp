// MPI ping-pong between ranks 0 and 1 (docs/distributed.md, "Cost model"): the one-way time of a message
// of n floats, half a round trip, median of `reps` round trips, for n = 1, 4, ..., 4^k up to --max-floats.
// A line of JSON per size on rank 0: {"bytes", "seconds"}; a straight-line fit seconds = latency + bytes /
// bandwidth over these points gives the link's two figures (bench/mpi_scaling.sh fits them).
// Usage: mpirun -n 2 build/bench/mpi_pingpong [--reps R] [--max-floats N]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long reps = 200, max_floats = 1 << 24;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atol(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-floats") == 0) max_floats = std::atol(argv[i + 1]);
  }
  if (size != 2 || reps < 1 || max_floats < 1) {
    if (rank == 0) std::fprintf(stderr, "mpi_pingpong: run on 2 processes, --reps >= 1, --max-floats >= 1\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<float> buffer(static_cast<size_t>(max_floats), 1.0f);
  for (long n = 1; n <= max_floats; n *= 4) {
    std::vector<double> times;
    const long r = n >= (1 << 20) ? std::max(3L, reps / 20) : reps;
    for (long k = 0; k < r; ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buffer.data(), int(n), MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buffer.data(), int(n), MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buffer.data(), int(n), MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buffer.data(), int(n), MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
      }
      times.push_back((MPI_Wtime() - t0) / 2);
    }
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    if (rank == 0) std::printf("{\"bytes\": %ld, \"seconds\": %.9g}\n", n * 4, times[times.size() / 2]);
  }
  MPI_Finalize();
  return 0;
}
