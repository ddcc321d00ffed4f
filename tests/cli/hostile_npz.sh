#!/usr/bin/env bash
# Hostile .npz files (io/format_npz.cpp): a member's sizes in the zip and in its .npy header are claims,
# not facts. A member is inflated in bounded chunks against its .npy header's byte count, so a small file
# that claims gigabytes, or a stream that inflates to gigabytes, is refused (exit 1, the file and member
# named, nothing on stdout) without the memory it claims. Names must be UTF-8; a central directory that
# disagrees with a member's local header is refused. The files are made here (python3, no numpy).
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
command -v python3 >/dev/null || { echo "hostile_npz: python3 missing" >&2; exit 77; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'EOF'
import struct, zlib

def npy(shape, data=b""):
    s = "(" + "".join(f"{d}, " for d in shape).rstrip(" ") + ")"
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % s
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data

def deflate(*chunks, flush_each=False):
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join(co.compress(c) for c in chunks) + co.flush()

def zipfile_bytes(members, local_names=None):
    """members: (name bytes, method, crc, compressed bytes, declared size); local_names overrides the
    names in the local headers (the central directory keeps members' names)."""
    out, central = b"", b""
    for i, (name, method, crc, data, size) in enumerate(members):
        local_name = local_names[i] if local_names else name
        at = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, method, 0, 0x21, crc, len(data), size, len(local_name), 0)
        out += local_name + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 20, 20, 0, method, 0, 0x21, crc, len(data), size,
                               len(name), 0, 0, 0, 0, 0x01800000, at) + name
    cd_at = len(out)
    return out + central + struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, len(members), len(members), len(central), cd_at, 0)

def write(path, b):
    open(path, "wb").write(b)

small = npy((4,), struct.pack("<4f", 1, 2, 3, 4))
crc = zlib.crc32(small)
# a tiny file whose zip entry claims 4 GB uncompressed
write("claims_4gb.npz", zipfile_bytes([(b"x.npy", 8, crc, deflate(small), 0xfffffffe)]))
# a tiny file whose zip entry and .npy header both claim 1 GiB of float32 data: the stream ends at once
big = npy((1 << 28,))
write("claims_1gib.npz", zipfile_bytes([(b"x.npy", 8, 0, deflate(big, b"\0" * 512), len(big) + (1 << 30))]))
# about 2 MB that inflates to 2 GiB: a 16-byte tensor's header, then zeros. Blocks ended by a full flush
# are byte-aligned and self-contained, so one compressed MiB of zeros is repeated.
co = zlib.compressobj(9, zlib.DEFLATED, -15)
head = co.compress(small) + co.flush(zlib.Z_FULL_FLUSH)
co = zlib.compressobj(9, zlib.DEFLATED, -15)
mib = co.compress(b"\0" * (1 << 20)) + co.flush(zlib.Z_FULL_FLUSH)
tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
bomb = head + mib * 2048 + tail
write("bomb_declared.npz", zipfile_bytes([(b"x.npy", 8, 0, bomb, min(len(small) + (2 << 30), 0xfffffffe))]))
write("bomb_hidden.npz", zipfile_bytes([(b"x.npy", 8, crc, bomb, len(small))]))
# more data than the .npy header says, stored and deflated
write("extra_stored.npz", zipfile_bytes([(b"x.npy", 0, zlib.crc32(small + b"\0"), small + b"\0", len(small) + 1)]))
write("extra_deflated.npz", zipfile_bytes([(b"x.npy", 8, zlib.crc32(small + b"\0"), deflate(small + b"\0"), len(small) + 1)]))
# names: not UTF-8; the local header names another member than the central directory
write("latin1.npz", zipfile_bytes([(b"caf\xe9.npy", 0, crc, small, len(small))]))
write("renamed.npz", zipfile_bytes([(b"x.npy", 0, crc, small, len(small))], local_names=[b"y.npy"]))
# the same two files, well made: read
write("good.npz", zipfile_bytes([(b"x.npy", 8, crc, deflate(small), len(small))]))
write("good_utf8.npz", zipfile_bytes([("café.npy".encode(), 0, crc, small, len(small))]))
EOF
[[ -s bomb_declared.npz ]] || { fail "python3 could not make the files"; finish hostile_npz; }
(( $(stat -c %s bomb_declared.npz) < 3000000 )) || fail "the bomb is not small"

# expect_bounded STATUS "part" CMD...: expect_error, and the command's peak memory under 200 MB
expect_bounded() {
  local want="$1" msg="$2"; shift 2
  expect_error "$want" "$msg" /usr/bin/time -v -o time.txt "$@"
  local kb; kb="$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' time.txt)"
  [[ -n "$kb" ]] || { fail "$*: no peak memory from /usr/bin/time"; return; }
  (( kb < 200000 )) || fail "$*: peak memory $((kb / 1024)) MB for a refused file"
}
tensor randn --shape 3,2 --seed 1 > x_in.json
if [[ -x /usr/bin/time ]]; then
  expect_bounded 1 "claims_4gb.npz#x.npy: the zip says 4294967294 bytes uncompressed, its .npy header 144" tensor show claims_4gb.npz
  expect_bounded 1 "claims_1gib.npz#x.npy: truncated: deflated data ends after" tensor show claims_1gib.npz
  expect_bounded 1 "bomb_declared.npz#x.npy: the zip says 2147483792 bytes uncompressed, its .npy header 144" tensor show bomb_declared.npz
  expect_bounded 1 "bomb_hidden.npz#x.npy: inflates to more than the 144 bytes its .npy header says" tensor show bomb_hidden.npz
  expect_bounded 1 "claims_1gib.npz#x.npy" lstm-run x_in.json --weights claims_1gib.npz
else
  echo "hostile_npz: no /usr/bin/time: memory not measured" >&2
  expect_error 1 "claims_4gb.npz#x.npy" tensor show claims_4gb.npz
  expect_error 1 "bomb_hidden.npz#x.npy" tensor show bomb_hidden.npz
fi
expect_error 1 "extra_stored.npz#x.npy: 1 bytes after the data of shape [4]" tensor show extra_stored.npz
expect_error 1 "extra_deflated.npz#x.npy: the zip says 145 bytes uncompressed, its .npy header 144" tensor show extra_deflated.npz
expect_error 1 "latin1.npz: zip member name caf\\xe9.npy is not valid UTF-8" tensor show latin1.npz
expect_error 1 "renamed.npz#x.npy: the local header names y.npy, the central directory x.npy" tensor show renamed.npz
tensor get good.npz#x > x.json || fail "a well-made deflated member is refused: $(cat err.txt)"
[[ "$(cat x.json)" == "[1,2,3,4]" ]] || fail "good.npz#x reads as $(cat x.json)"
tensor get 'good_utf8.npz#café' > /dev/null || fail "a UTF-8 member name is refused"

finish hostile_npz
