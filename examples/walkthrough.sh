#!/usr/bin/env bash
# The worked-example walkthrough: runs every examples/*/run.sh in order (the documents' order: the LSTM step,
# attention over an encoder's states, self-attention, recurrent seq2seq, the Transformer, the comparison) and
# shows what each prints. Each example says what it shows (its "# shows:" line) and the pictures it drew
# (SVG, kept in the folder given as the first argument, default build/walkthrough; a browser shows them).
# Needs the tools built into build/bin (see README). About half a minute of CPU.
# docs/examples.md maps the examples to the documents' sections.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$here/../build/bin:$PATH"
pictures="${1:-$here/../build/walkthrough}"
mkdir -p "$pictures"
pictures="$(cd "$pictures" && pwd)"
start=$SECONDS
for script in "$here"/*/run.sh; do
  name="$(basename "$(dirname "$script")")"
  echo "=== $name: $(sed -n 's/^# shows: //p' "$script") ==="
  rm -rf "${pictures:?}/$name"
  t0=$SECONDS
  rc=0
  ATTNKIT_PICTURES="$pictures/$name" bash "$script" || rc=$?
  [[ $rc == 0 || $rc == 77 ]] || exit "$rc"  # 77: the example skipped itself (it says why)
  if compgen -G "$pictures/$name/*" > /dev/null; then
    echo "--- pictures: $(ls "$pictures/$name"/* | paste -sd' ')"
  fi
  echo "--- $name: $((SECONDS - t0)) s"
  echo
done
echo "=== the walkthrough took $((SECONDS - start)) s; its pictures are in $pictures"
