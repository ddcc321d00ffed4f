#!/usr/bin/env bash
# examples/walkthrough.sh's mechanics, on stand-in examples (the real ones are ctest cases of their own, and the
# whole walkthrough takes half a minute): each example's "# shows:" line is printed before it runs, the pictures
# it keeps (examples/lib/common.sh keep) are listed from the pictures folder, an example that skips itself (exit
# 77) does not stop the walk, one that fails stops it with its status; `keep` copies nothing under --check.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$(dirname "$0")/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
mkdir -p ex/lib ex/01-draw ex/02-skip ex/03-last
cp "$src/examples/walkthrough.sh" ex/
cp "$src/examples/lib/common.sh" ex/lib/
cat > ex/01-draw/run.sh <<'EOF'
#!/usr/bin/env bash
# shows: a picture
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
walk() {
  cd "$work"
  run "echo '<svg/>' > p.svg && echo drawn"
  keep p.svg
}
walk_or_check "$@"
EOF
printf '$ echo '"'"'<svg/>'"'"' > p.svg && echo drawn\ndrawn\n' > ex/01-draw/expected.txt
printf '#!/usr/bin/env bash\n# shows: nothing here\necho "02-skip: skipped: a reason" >&2\nexit 77\n' > ex/02-skip/run.sh
printf '#!/usr/bin/env bash\n# shows: the last one\necho "last ran"\nexit "${LAST_STATUS:-0}"\n' > ex/03-last/run.sh

status=0
bash ex/walkthrough.sh pics > out.txt 2>&1 || status=$?
[[ $status == 0 ]] || fail "the walkthrough exited $status: $(cat out.txt)"
for want in "=== 01-draw: a picture ===" "drawn" "--- pictures: $work/pics/01-draw/p.svg" "=== 02-skip: nothing here ===" \
            "02-skip: skipped: a reason" "=== 03-last: the last one ===" "last ran" "=== the walkthrough took"; do
  grep -qxF -- "$want" out.txt || grep -qF -- "$want" out.txt || fail "the walkthrough did not print \"$want\": $(cat out.txt)"
done
grep -q -- "--- pictures: .*02-skip" out.txt && fail "a picture listed for an example that kept none"
[[ -f pics/01-draw/p.svg ]] || fail "the picture was not kept in pics/01-draw"
# an example's --check keeps nothing, even with the pictures folder set, and passes on its expected output
rm -rf pics
status=0
ATTNKIT_PICTURES="$work/pics" bash ex/01-draw/run.sh --check > check.txt 2>&1 || status=$?
[[ $status == 0 ]] || fail "01-draw --check exited $status: $(cat check.txt)"
[[ ! -e pics ]] || fail "keep copied a picture under --check"
# a failing example stops the walk with its status
status=0
LAST_STATUS=3 bash ex/walkthrough.sh pics > out.txt 2>&1 || status=$?
[[ $status == 3 ]] || fail "a failing example: the walkthrough exited $status, expected 3"
grep -q "the walkthrough took" out.txt && fail "the walkthrough went on after a failing example"
finish walkthrough
