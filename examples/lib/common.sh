# Sourced by examples/*/run.sh after setting `here` (the example's folder):
# a scratch folder $work (removed on exit), `run` (echo a command line, then run it), and
# `walk_or_check "$@"` (runs the example's `walk`; with --check, diffs its output against expected.txt).
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
run() {
  echo "\$ $*"
  bash -c "$*"
}
walk_or_check() {
  if [[ "${1:-}" == "--check" ]]; then
    diff -u "$here/expected.txt" <(walk 2>&1)
  else
    walk
  fi
}
