# Shared by tests/cli/mpi_*.sh (source it first): skips (exit 77) a build without MPI or a machine without
# mpirun, and defines
#   mpi K CMD...   CMD on K processes under mpirun, bounded by a timeout (Open MPI's flags for a root user
#                  and for more processes than cores when mpirun is Open MPI's; MPICH's mpiexec needs none)
#   mpi_openmpi    true when mpirun is Open MPI's
if [[ "${ATTNKIT_MPI:-OFF}" != ON ]]; then echo "skipped: built without MPI (ATTNKIT_MPI=OFF)"; exit 77; fi
if ! command -v mpirun > /dev/null; then echo "skipped: no mpirun on PATH"; exit 77; fi
mpi_flags=()
mpi_openmpi=false
if mpirun --version 2>&1 | grep -q "Open MPI"; then mpi_flags=(--oversubscribe --allow-run-as-root); mpi_openmpi=true; fi
mpi() {
  local k="$1"; shift
  timeout 60 mpirun "${mpi_flags[@]}" -n "$k" "$@"
}
