#!/usr/bin/env bash
# Installs what attnkit needs to build and test, from Debian's packages, if it is missing
# (festlex-cmu: the CMU Pronouncing Dictionary of examples/06-g2p-data; python3: the JSON checks of some
# CLI tests and examples, plain python3, no PyTorch; help2man: the tools' man pages, which the install
# test checks; man-db and bsdextrautils: man and col, with which tests/cli/man_pages.sh renders them).
# As root it runs apt-get; otherwise it prints the apt-get line to run.
# Usage: scripts/setup.sh [--fuzz]   (--fuzz adds clang and its sanitizer runtime for the fuzzers)
set -euo pipefail
packages=(cmake g++ make libcli11-dev libeigen3-dev nlohmann-json3-dev libfmt-dev doctest-dev libfast-float-dev zlib1g-dev ccache festlex-cmu python3 help2man man-db bsdextrautils)
packages+=(libopenmpi-dev openmpi-bin)  # MPI: data-parallel training (docs/distributed.md)
packages+=(bible-kjv bible-kjv-text)  # the King James text (and its reader) of examples/11-language-model
packages+=(libsentencepiece-dev)  # SentencePiece subword tokens (seq2seq-train --tokenizer spm)
if [[ "${1:-}" == "--fuzz" ]]; then packages+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then exit 0; fi
if [[ $(id -u) -eq 0 ]]; then
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
else
  echo "setup: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
