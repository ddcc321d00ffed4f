# Sourced by examples/*/run.sh after setting `here` (the example's folder):
# a scratch folder $work (removed on exit), `run` (echo a command line, then run it), and
# `walk_or_check "$@"` (runs the example's `walk`; with --check, diffs its output against expected.txt),
# and `keep FILE...` (pictures: the walkthrough sets ATTNKIT_PICTURES, a folder they are copied to).
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
run() {
  echo "\$ $*"
  bash -c "$*"
}
# run_figures CMD: like run, but with --check its output is left out of the comparison (figures of a
# training run, whose last bits depend on the processor's GEMM kernel; a `run` after it states the claim).
checking=""
run_figures() {
  echo "\$ $*"
  if [[ -n "$checking" ]]; then bash -c "$*" > /dev/null; else bash -c "$*"; fi
}
walk_or_check() {
  if [[ "${1:-}" == "--check" ]]; then
    checking=1
    diff -u "$here/expected.txt" <(walk 2>&1)
  else
    walk
  fi
}
# keep FILE...: copies pictures the example made into $ATTNKIT_PICTURES (when set, and not with --check),
# where the walkthrough lists them; prints nothing, so the checked output is the same either way.
keep() {
  [[ -z "$checking" && -n "${ATTNKIT_PICTURES:-}" ]] || return 0
  mkdir -p "$ATTNKIT_PICTURES" && cp "$@" "$ATTNKIT_PICTURES/"
}
