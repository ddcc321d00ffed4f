# Shared by the tests/cli scripts (source it after cd-ing into a work folder):
#   fail MESSAGE                      count a failure and say why (the script goes on)
#   expect_error STATUS "part" CMD... CMD must exit STATUS, print nothing on stdout, and say "part"
#                                     on stderr (the tools' error contract)
#   lacks PATTERN MESSAGE CMD...      CMD must exit 0 and print nothing matching PATTERN (below)
#   finish NAME                       exit 1 if anything failed, else say NAME passed
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

expect_error() {
  local want="$1" msg="$2"; shift 2
  local status=0
  "$@" >out.txt 2>err.txt || status=$?
  [[ "$status" == "$want" ]] || fail "$* exited $status, expected $want ($(cat err.txt))"
  [[ ! -s out.txt ]] || fail "$* wrote to stdout on failure: $(head -c 200 out.txt)"
  grep -qF -- "$msg" err.txt || fail "$*: stderr lacks \"$msg\": $(cat err.txt)"
}

finish() {
  if (( fails )); then echo "$fails failure(s)" >&2; exit 1; fi
  echo "$1: all checks passed"
}

# lacks PATTERN MESSAGE CMD...       a negative check that can fail: CMD must exit 0 AND its stdout
#                                    must not match PATTERN (grep -E). `CMD | grep -q X && fail` passes
#                                    when CMD crashes; this does not.
lacks() {
  local pattern="$1" msg="$2"; shift 2
  local status=0
  "$@" >lacks_out.txt 2>lacks_err.txt || status=$?
  if [[ "$status" != 0 ]]; then fail "$msg: $* exited $status ($(head -c 300 lacks_err.txt))"
  elif grep -qE -- "$pattern" lacks_out.txt; then fail "$msg"
  fi
  return 0
}
