# Sourced by examples/*/run.sh after setting `here` (the example's folder):
# a scratch folder $work (removed on exit), `run` (echo a command line, then run it), and
# `walk_or_check "$@"` (runs the example's `walk`; with --check, compares its output with expected.txt,
# numbers within a tolerance: numbers_match),
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
# numbers_match EXPECTED ACTUAL: the same text, except numbers within 1e-5 (relative) of the expected ones, or,
# for a number printed with k decimals, within one unit of its last decimal (a rounding that fell the other
# way): the last digits of float32 results move with the summation order of the GEMM kernel (AVX2 vs AVX-512,
# threads). Integers (no decimal point) must be equal. Prints the lines that differ.
numbers_match() {
  awk -v tol=1e-5 '
    function num(s) { return s ~ /^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?\.?$/ }
    function decimals(s) { sub(/[eE].*/, "", s); return index(s, ".") ? length(s) - index(s, ".") : -1 }
    NR == FNR { want[FNR] = $0; n = FNR; next }
    { got[FNR] = $0; m = FNR }
    END {
      if (n != m) { print "expected " n " lines, got " m; exit 1 }
      bad = 0
      for (i = 1; i <= n; i++) {
        if (want[i] == got[i]) continue
        na = split(want[i], a, /[][ ,()=]+/); nb = split(got[i], b, /[][ ,()=]+/)
        ok = na == nb
        for (j = 1; ok && j <= na; j++)
          if (a[j] != b[j]) {
            if (!num(a[j]) || !num(b[j])) { ok = 0; continue }
            d = a[j] - b[j]; if (d < 0) d = -d; s = a[j] < 0 ? -a[j] : a[j]
            k = decimals(a[j]); unit = (k >= 1 && a[j] !~ /[eE]/) ? 1.000001 * 10 ^ -k : 0
            if (d > tol * (1 + s) && d > unit) ok = 0
          }
        if (!ok) { print "line " i ":\n- " want[i] "\n+ " got[i]; bad = 1 }
      }
      exit bad
    }' "$1" "$2"
}
# walk_or_check "$@": runs walk; with --check, compares what it prints with expected.txt (numbers_match) and
# shows the differences.
walk_or_check() {
  if [[ "${1:-}" == "--check" ]]; then
    checking=1
    local actual="$work.actual"
    cat <(walk 2>&1) > "$actual"
    if cmp -s "$here/expected.txt" "$actual" || numbers_match "$here/expected.txt" "$actual" > /dev/null; then
      rm -f "$actual"
      return 0
    fi
    diff -u "$here/expected.txt" "$actual"
    numbers_match "$here/expected.txt" "$actual"
    rm -f "$actual"
    return 1
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
