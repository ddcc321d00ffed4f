#!/usr/bin/env bash
# Grapheme-to-phoneme data from the CMU Pronouncing Dictionary as Debian ships it for Festival
# (package festlex-cmu: cmudict-0.4.out, about 106,000 entries in Festival's Lisp lexicon format):
#
#   ("hello" nil (((hh ax) 0) ((l ow) 1)))    ->    hello<TAB>hh ax l ow
#
# - spelling: lower-cased ("AWOL" -> awol); only words of the letters a-z are kept (all of 0.4's are);
# - phonemes: Festival's CMU phone set (40: CMU's 39 and ax, Festival's unstressed ah), space-separated; the
#   syllable brackets and each syllable's stress digit are dropped;
# - a word may have several pronunciations (the lexicon's entries for different parts of speech, e.g.
#   record n/v); each distinct one is a line, and identical lines are written once;
# - the split is by word, fixed, and independent of the dictionary's order: a hash of the spelling,
#   h = 0; h = (131 h + letter's index 1-26) mod (2^31 - 1) for each letter; h = 48271 h mod (2^31 - 1);
#   h mod 100 in 0-89 -> train.tsv, 90-94 -> valid.tsv, 95-99 -> test.tsv, so every pronunciation of a word
#   is on the same side (a prediction is scored against all of them).
#
# Usage: prepare.sh OUTDIR [DICT]   (DICT: default the cmudict-0.4.out that `dpkg -L festlex-cmu` lists)
# Writes OUTDIR/train.tsv, OUTDIR/valid.tsv, OUTDIR/test.tsv (in the dictionary's order) and prints one
# line of counts per file. Exit status 77 (a skip for ctest) when festlex-cmu is not installed.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 || "$1" == -* ]]; then
  echo "usage: prepare.sh OUTDIR [DICT]" >&2
  exit 2
fi
out="$1"
dict="${2:-}"
if [[ -z "$dict" ]]; then
  dict="$(dpkg -L festlex-cmu 2>/dev/null | grep '/cmudict-0\.4\.out$' || true)"
  if [[ -z "$dict" || ! -r "$dict" ]]; then
    echo "prepare.sh: festlex-cmu is not installed (apt-get install festlex-cmu; scripts/setup.sh installs it)" >&2
    exit 77
  fi
fi
[[ -r "$dict" ]] || { echo "prepare.sh: cannot read $dict" >&2; exit 1; }
mkdir -p "$out"
LC_ALL=C awk -v out="$out" -v dict="$dict" '
  BEGIN { letters = "abcdefghijklmnopqrstuvwxyz"; split("train valid test", names, " ") }
  # Festival lexicon entries: ("word" pos (((ph ph) stress) ((ph) stress) ...)); the first line is MNCL.
  !/^\("/ { next }
  {
    q = index(substr($0, 3), "\"")
    word = tolower(substr($0, 3, q - 1))
    if (word !~ /^[a-z]+$/) { dropped++; next }
    rest = substr($0, q + 4)        # after the closing quote and its space
    sub(/^[^ ]* /, "", rest)                 # the part of speech
    gsub(/[()]/, " ", rest)                  # syllable brackets
    n = split(rest, f, " ")
    phones = ""
    for (i = 1; i <= n; i++) if (f[i] !~ /^[0-9]+$/) phones = phones (phones == "" ? "" : " ") f[i]   # stress
    if (phones == "") { dropped++; next }
    line = word "\t" phones
    if (line in seen) next
    seen[line] = 1
    h = 0
    for (i = 1; i <= length(word); i++) h = (h * 131 + index(letters, substr(word, i, 1))) % 2147483647
    h = (h * 48271) % 2147483647 % 100
    s = h < 90 ? 1 : (h < 95 ? 2 : 3)
    print line > (out "/" names[s] ".tsv")
    lines[s]++
    if (!((s, word) in has)) { has[s, word] = 1; words[s]++ }
  }
  END {
    for (s = 1; s <= 3; s++) {
      if (lines[s] == 0) printf "" > (out "/" names[s] ".tsv")
      printf "%s.tsv: %d lines, %d words\n", names[s], lines[s], words[s]
    }
    if (dropped > 0) printf "dropped %d entries that are not words of a-z\n", dropped
  }' "$dict"
