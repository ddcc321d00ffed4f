# Shared by tests/cli/mpi_*.sh (source it first): skips (exit 77) a build without MPI or a machine without
# its launcher, and defines
#   mpi K CMD...       CMD on K processes under the launcher, bounded by a timeout (Open MPI's flags for a root
#                      user and for more processes than cores when the launcher is Open MPI's; MPICH's needs none)
#   mpi_openmpi        true when the launcher is Open MPI's
#   signal_launcher SIGNAL TEXT   sends SIGNAL to the launcher whose command line has TEXT (not to the timeout
#                      around it, nor to the processes)
# The launcher is the build's (ctest's ATTNKIT_MPIEXEC: CMake's MPIEXEC_EXECUTABLE, so a build against MPICH
# runs MPICH's mpiexec), else mpirun on PATH.
if [[ "${ATTNKIT_MPI:-OFF}" != ON ]]; then echo "skipped: built without MPI (ATTNKIT_MPI=OFF)"; exit 77; fi
mpi_launcher="${ATTNKIT_MPIEXEC:-mpirun}"
if ! command -v "$mpi_launcher" > /dev/null; then echo "skipped: no $mpi_launcher"; exit 77; fi
mpi_flags=()
mpi_openmpi=false
if "$mpi_launcher" --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
  mpi_flags=(--oversubscribe --allow-run-as-root)
  mpi_openmpi=true
fi
mpi() {
  local k="$1"; shift
  timeout 60 "$mpi_launcher" "${mpi_flags[@]}" -n "$k" "$@"
}
signal_launcher() {
  pkill "-$1" -f -- "^[^ ]*${mpi_launcher##*/} .*$2"
}
