#!/usr/bin/env bash
# shows: real data for a seq2seq model: the CMU dictionary as train/valid/test TSV (needs festlex-cmu)
# Grapheme-to-phoneme data from the CMU Pronouncing Dictionary (Debian's festlex-cmu): prepare.sh turns
# Festival's lexicon into train/valid/test TSV (spelling TAB phonemes), split by word. Read the files with
# the char tokenizer for the spelling and the space tokenizer for the phonemes (train/data.hpp).
# With --check, compares what it prints against expected.txt (a ctest case; skipped, exit 77, when
# festlex-cmu is not installed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! dpkg -L festlex-cmu 2>/dev/null | grep -q '/cmudict-0\.4\.out$'; then
  echo "06-g2p-data: skipped: festlex-cmu is not installed (apt-get install festlex-cmu; scripts/setup.sh installs it)" >&2
  exit 77
fi
source "$here/../lib/common.sh"
cp "$here/../../tests/fixtures/data/cmudict-excerpt.out" "$work/"
cp -r "$here/../../tests/fixtures/data/cmudict-excerpt" "$work/committed-excerpt"
walk() {
  cd "$work"
  export PATH="$here:$PATH" LC_ALL=C
  run "grep -E '^\\(\"(hello|record)\" ' /usr/share/festival/dicts/cmu/cmudict-0.4.out    # Festival's lexicon format"
  run "prepare.sh g2p"
  run "head -n 3 g2p/train.tsv"
  # several pronunciations of a word: all on one side of the split
  run "awk -F'\t' '\$1 == \"a\" || \$1 == \"hello\" || \$1 == \"live\" || \$1 == \"record\"' g2p/*.tsv"
  run "cut -f 1 g2p/train.tsv | sort -u > train-words; cut -f 1 g2p/valid.tsv g2p/test.tsv | sort -u | comm -12 train-words - | wc -l    # words on both sides"
  run "cut -f 2 g2p/*.tsv | tr ' ' '\n' | sort -u | tr '\n' ' '; echo    # the phoneme set"
  # the unit tests' excerpt (tests/fixtures/data) is what prepare.sh writes from its 41 lines
  run "prepare.sh excerpt cmudict-excerpt.out && diff -r excerpt committed-excerpt && echo 'excerpt as committed'"
}
walk_or_check "$@"
