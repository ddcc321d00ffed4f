#!/usr/bin/env bash
# Install test (.ci/run calls it after the release build): `cmake --install BUILD --prefix P` into a
# temporary prefix, then checks what a user of the library gets:
#   - libattnkit.so.X.Y.Z with SONAME libattnkit.so.X (0.Y while X is 0) and the links, the one version of
#     version.hpp, the library and the CMake package; the public headers and no internal
#     one, every tool of BUILD/bin (runnable from P/bin, its RUNPATH finding P/lib), the man pages and the
#     bash completion of every tool when they were built (cmake/docs.cmake), the manuals of docs/ in
#     share/doc/attnkit;
#   - find_package(attnkit X.Y) found, find_package(attnkit X.Y+1) refused, and without fmt's CMake package (the
#     public headers' one dependency) refused with a message naming the package to install;
#   - examples/consumer built against P with find_package(attnkit CONFIG) and with pkg-config, and run;
#   - the programs of examples/cpp (docs/library.md) built against P (one CMake configure) and run: PyTorch's
#     outputs and gradients matched, the training loop's loss falling, a checkpoint of P/bin/seq2seq-train
#     decoded as P/bin/transformer-decode decodes it, every tensor format read back bit for bit.
# The header check (each public header compiled alone, without Eigen or OpenMP) is the build target
# attnkit_header_check (cmake/install.cmake), built with BUILD.
# Usage: tests/install/run.sh [BUILD]   (default: build, the release build of scripts/build.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
fail() { echo "install test: $*" >&2; exit 1; }

cmake --build "$build" -j2 >/dev/null  # up to date: the tools, the header check, the man pages
cmake --install "$build" --prefix "$prefix" >/dev/null
lib="$(find "$prefix" -name libattnkit.so | head -n 1)"
[[ -n "$lib" ]] || fail "no libattnkit.so under $prefix"
libdir="$(dirname "$lib")"
[[ -e "$libdir/libattnkit.so" ]] || fail "no libattnkit.so under $prefix"
real="$(readlink -f "$libdir/libattnkit.so")"
[[ "$real" =~ libattnkit\.so\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "libattnkit.so is not a link to a versioned library ($real)"
soname="$(objdump -p "$real" | awk '$1 == "SONAME" { print $2 }')"
[[ -n "$soname" && -e "$libdir/$soname" ]] || fail "SONAME '$soname' missing or not installed"
# one version everywhere (semantic versioning, docs/library.md "Versions"): version.hpp, the .so's name and
# SONAME (libattnkit.so.0.MINOR while MAJOR is 0), the CMake package's version
version="$(sed -n 's/^#define ATTNKIT_VERSION "\([0-9]*\.[0-9]*\.[0-9]*\)"$/\1/p' "$prefix/include/attnkit/version.hpp")"
[[ -n "$version" ]] || fail "no ATTNKIT_VERSION \"X.Y.Z\" in $prefix/include/attnkit/version.hpp"
IFS=. read -r major minor patch <<<"$version"
grep -q "^#define ATTNKIT_VERSION_MAJOR $major\$" "$prefix/include/attnkit/version.hpp" \
  && grep -q "^#define ATTNKIT_VERSION_MINOR $minor\$" "$prefix/include/attnkit/version.hpp" \
  && grep -q "^#define ATTNKIT_VERSION_PATCH $patch\$" "$prefix/include/attnkit/version.hpp" || fail "version.hpp's numbers are not $version"
[[ "$real" == */libattnkit.so.$version ]] || fail "the library $real is not libattnkit.so.$version"
if [[ "$major" == 0 ]]; then want_soname="libattnkit.so.0.$minor"; else want_soname="libattnkit.so.$major"; fi
[[ "$soname" == "$want_soname" ]] || fail "SONAME $soname, expected $want_soname for version $version"
grep -q "set(PACKAGE_VERSION \"$version\")" "$libdir/cmake/attnkit/attnkitConfigVersion.cmake" \
  || fail "the CMake package's version is not $version"

# headers: the public ones (every lib/attnkit/**/*.hpp whose first line does not say internal), no other
expected="$(cd "$root/lib" && for h in $(find attnkit -name '*.hpp' | sort); do head -n 1 "$h" | grep -qiE 'internal' || echo "$h"; done; echo attnkit/version.hpp)"
got="$(cd "$prefix/include" && find attnkit -name '*.hpp' | sort)"
[[ "$(sort <<<"$expected")" == "$got" ]] || fail "installed headers differ from the public ones: $(diff <(sort <<<"$expected") <(echo "$got") | grep '^[<>]' | head -n 5 | tr '\n' ' ')"
if grep -lE '#include [<"](Eigen|omp\.h|nlohmann|CLI/)' -r "$prefix/include" >/dev/null; then
  fail "an installed header includes a private dependency: $(grep -lE '#include [<"](Eigen|omp\.h|nlohmann|CLI/)' -r "$prefix/include" | head -n 3)"
fi

# tools: every one built, each runs from the prefix
tools=()
for t in "$build"/bin/*; do
  case "$(basename "$t")" in unit_tests|replay_*|bench_*|*.*) continue ;; esac
  [[ -x "$t" && -f "$t" ]] && tools+=("$(basename "$t")")
done
[[ ${#tools[@]} -ge 4 ]] || fail "found only ${#tools[@]} tools in $build/bin"
for t in "${tools[@]}"; do
  [[ -x "$prefix/bin/$t" ]] || fail "tool $t not installed"
  loaded="$(ldd "$prefix/bin/$t" | awk '/libattnkit/ { print $3 }')"
  [[ "$(readlink -f "$loaded")" == "$real" ]] || fail "$t does not load $libdir's libattnkit: $(ldd "$prefix/bin/$t" | grep attnkit)"
  "$prefix/bin/$t" --version | grep -q '^attnkit ' || fail "$t --version"
done
if [[ -d "$build/man" ]]; then
  for t in "${tools[@]}"; do
    [[ -s "$prefix/share/man/man1/$t.1" ]] || fail "no man page for $t"
    [[ -s "$prefix/share/bash-completion/completions/$t" ]] || fail "no bash completion for $t"
  done
fi
# the manuals the man pages' SEE ALSO names: docs/ in share/doc/attnkit, one per tool
for t in "${tools[@]}"; do
  [[ -s "$prefix/share/doc/attnkit/$t.md" ]] || fail "no manual share/doc/attnkit/$t.md"
done

# consumers: CMake package, then pkg-config
expect_output() {
  local out="$1" how="$2"
  grep -qE '^attnkit [0-9.]+: \{"weights":\[\[[^]]+\]\],"context":\[\[[^]]+\]\]\}$' <<<"$out" || fail "$how consumer printed: $out"
  grep -q '^refused: attention' <<<"$out" || fail "$how consumer: no refusal: $out"
}
cmake -S "$root/examples/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null \
  || fail "configuring examples/consumer against $prefix"
cmake --build "$work/cmake-build" >/dev/null || fail "building examples/consumer with CMake"
expect_output "$("$work/cmake-build/consumer")" CMake
# the package's version and dependencies: another minor version is refused; without fmt's CMake package (the
# one dependency the public headers have) find_package(attnkit) fails naming the package to install
mkdir "$work/probe"
probe() {  # probe VERSION [CMAKE ARGS...]: configure a project whose only line is find_package(attnkit VERSION)
  local v="$1"; shift
  printf 'cmake_minimum_required(VERSION 3.18)\nproject(probe LANGUAGES CXX)\nfind_package(attnkit %s CONFIG REQUIRED)\n' "$v" \
    > "$work/probe/CMakeLists.txt"
  rm -rf "$work/probe/build"
  cmake -S "$work/probe" -B "$work/probe/build" -DCMAKE_PREFIX_PATH="$prefix" "$@" 2>&1
}
probe "$major.$minor" >/dev/null || fail "find_package(attnkit $major.$minor) failed"
if out="$(probe "$major.$((minor + 1))")"; then fail "find_package(attnkit $major.$((minor + 1))) accepted version $version"; fi
grep -q "attnkitConfig.cmake, version: $version" <<<"$out" || fail "find_package(attnkit $major.$((minor + 1))): $out"
if out="$(probe "$major.$minor" -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON)"; then fail "find_package(attnkit) passed without fmt"; fi
grep -q "libfmt-dev" <<<"$out" || fail "find_package(attnkit) without fmt does not name libfmt-dev: $out"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists attnkit || fail "pkg-config does not find attnkit in $PKG_CONFIG_PATH"
[[ "$(pkg-config --variable=prefix attnkit)" -ef "$prefix" ]] || fail "attnkit.pc's prefix $(pkg-config --variable=prefix attnkit) is not $prefix"
# shellcheck disable=SC2046
c++ -std=c++17 -O1 "$root/examples/consumer/main.cpp" -o "$work/consumer-pc" $(pkg-config --cflags --libs attnkit) \
  -Wl,-rpath,"$libdir" || fail "building examples/consumer with pkg-config"
expect_output "$("$work/consumer-pc")" pkg-config

# the C++ examples of docs/library.md
cmake -S "$root/examples/cpp" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null \
  || fail "configuring examples/cpp against $prefix"
cmake --build "$work/examples" -j2 >/dev/null || fail "building examples/cpp"
ex="$work/examples"
# each "max |attnkit - torch| = E" at most 2e-6; `want` lines of them
within() {
  local out="$1" want="$2" how="$3"
  [[ "$(grep -c 'max |attnkit - torch| = ' <<<"$out")" == "$want" ]] || fail "$how printed: $out"
  awk -F'= ' '/max \|attnkit - torch\|/ { if ($2 + 0 > 2e-6) bad = 1 } END { exit bad }' <<<"$out" || fail "$how: $out"
}
data="$root/examples/cpp/data/pytorch.safetensors"
within "$("$ex/layers" "$data")" 8 "examples/cpp/layers"
out="$("$ex/backward" "$data")" || fail "examples/cpp/backward: $out"
within "$out" 2 "examples/cpp/backward"
grep -q '^forward with and without the tape: equal$' <<<"$out" || fail "examples/cpp/backward: $out"
out="$("$ex/train")" || fail "examples/cpp/train: $out"
awk '/validation loss/ { if (!first) first = $NF; last = $NF } END { exit !(NR == 7 && last < first / 10) }' <<<"$out" \
  || fail "examples/cpp/train: the loss did not fall tenfold: $out"
mkdir "$work/files"
out="$("$ex/tensor_files" "$work/files")" || fail "examples/cpp/tensor_files: $out"
[[ "$(grep -c 'read back bit for bit' <<<"$out")" == 4 ]] || fail "examples/cpp/tensor_files: $out"
"$prefix/bin/seq2seq-train" --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 \
  --model transformer --layers 1 --d-model 16 --heads 2 --ff 32 --steps 100 --batch 16 --threads 1 \
  --save "$work/reverse.json" >/dev/null || fail "seq2seq-train for examples/cpp/decode"
out="$("$ex/decode" "$work/reverse.json" "1 2 3" "4 0 5 1")" || fail "examples/cpp/decode: $out"
for strategy in greedy beam; do
  for src in "1 2 3" "4 0 5 1"; do
    text="$("$prefix/bin/transformer-decode" "$work/reverse.json" --threads 1 --strategy "$strategy" --src "$src" \
      | sed -E 's/.*"text":"([^"]*)".*/\1/')"
    grep -qxE "$strategy +$src -> $text  \(log p -?[0-9.]+\)" <<<"$out" \
      || fail "examples/cpp/decode ($strategy, $src) differs from transformer-decode's \"$text\": $out"
  done
done
echo "install test: ok (${#tools[@]} tools, $(wc -l <<<"$got") headers, $soname; consumers built with CMake and pkg-config; examples/cpp built and run)"
