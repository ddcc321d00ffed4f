// .npz: a bundle as a zip of NAME.npy members (io/tensor_file.hpp); read stored (np.savez) or deflated
// (np.savez_compressed, inflated with zlib), written stored as np.savez writes.
#include "attnkit/io/tensor_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <optional>
#include <set>

#include "attnkit/io/binary_format.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

using namespace binary;

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;

struct ZipEntry {
  std::string name;
  uint16_t method = 0, flags = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local = 0;
};

std::string inflate_raw(std::string_view in, uint64_t size, const std::string& what) {
  std::string out(size, '\0');
  z_stream z{};
  AK_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, "{}: zlib: cannot start inflating", what);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(size);
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  AK_CHECK(rc == Z_STREAM_END && produced == size, "{}: deflated data is damaged or does not inflate to its declared {} bytes", what, size);
  return out;
}

Value parse_npz(std::string_view bytes, const std::string& what, const ReadOptions& options) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  AK_CHECK(n >= 22 && (load32(u, false) == kLocalSig || load32(u, false) == kEndSig), "{}: not a .npz file (not a zip archive)", what);
  // end of central directory: the last 22 + up to 65535 (comment) bytes
  size_t end = std::string_view::npos;
  for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
    if (load32(u + i, false) == kEndSig && i + 22 + load16(u + i + 20, false) == n) {
      end = i;
      break;
    }
  AK_CHECK(end != std::string_view::npos, "{}: not a .npz file (no zip end record; truncated?)", what);
  const uint16_t count = load16(u + end + 10, false);
  const uint32_t cd_size = load32(u + end + 12, false), cd_at = load32(u + end + 16, false);
  AK_CHECK(load16(u + end + 4, false) == 0 && load16(u + end + 6, false) == 0 && load16(u + end + 8, false) == count,
           "{}: multi-part zip archives are not supported", what);
  AK_CHECK(cd_at != 0xffffffffu && count != 0xffff, "{}: zip64 archives (over 4 GiB or 65535 members) are not supported", what);
  AK_CHECK(uint64_t{cd_at} + cd_size <= end, "{}: the zip's central directory [{}, {}) lies past its end record at {}", what,
           cd_at, uint64_t{cd_at} + cd_size, end);
  std::vector<ZipEntry> entries;
  size_t p = cd_at;
  for (uint16_t e = 0; e < count; ++e) {
    AK_CHECK(p + 46 <= uint64_t{cd_at} + cd_size && load32(u + p, false) == kCentralSig, "{}: zip central directory entry {} is damaged", what, e + 1);
    ZipEntry z;
    z.flags = load16(u + p + 8, false);
    z.method = load16(u + p + 10, false);
    z.crc = load32(u + p + 16, false);
    z.compressed = load32(u + p + 20, false);
    z.size = load32(u + p + 24, false);
    const size_t name_len = load16(u + p + 28, false), extra_len = load16(u + p + 30, false), comment_len = load16(u + p + 32, false);
    z.local = load32(u + p + 42, false);
    AK_CHECK(p + 46 + name_len + extra_len + comment_len <= uint64_t{cd_at} + cd_size, "{}: zip central directory entry {} is damaged", what, e + 1);
    z.name.assign(bytes.substr(p + 46, name_len));
    // zip64 extra field (id 1): the 64-bit values of the fields saturated at 0xffffffff, in this order
    for (size_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const uint16_t id = load16(u + x, false), len = load16(u + x + 2, false);
      AK_CHECK(x + 4 + len <= p + 46 + name_len + extra_len, "{}: {}: damaged zip extra field", what, z.name);
      if (id == 1) {
        size_t f = x + 4;
        for (uint64_t* field : {&z.size, &z.compressed, &z.local}) {
          if (*field != 0xffffffffu) continue;
          AK_CHECK(f + 8 <= x + 4 + len, "{}: {}: damaged zip64 extra field", what, z.name);
          *field = load64(u + f, false), f += 8;
        }
      }
      x += 4 + len;
    }
    entries.push_back(std::move(z));
    p += 46 + name_len + extra_len + comment_len;
  }
  // every member's local header and data inside the file, before the central directory, and no two
  // overlapping (checked before anything is inflated: overlapping members are a zip bomb's trick)
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<uint64_t> data_at(entries.size());
  for (size_t e = 0; e < entries.size(); ++e) {
    const ZipEntry& z = entries[e];
    const std::string at = what + "#" + z.name;
    AK_CHECK(z.local <= cd_at && cd_at - z.local >= 30 && load32(u + z.local, false) == kLocalSig, "{}: local header at {} is missing or past the central directory", at, z.local);
    data_at[e] = z.local + 30 + load16(u + z.local + 26, false) + load16(u + z.local + 28, false);
    AK_CHECK(data_at[e] <= cd_at && z.compressed <= cd_at - data_at[e], "{}: data [{}, {}) runs past the members' end at {}", at,
             data_at[e], data_at[e] + z.compressed, cd_at);
    spans.emplace_back(z.local, data_at[e] + z.compressed);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    AK_CHECK(spans[i].first >= spans[i - 1].second, "{}: zip members overlap at bytes {} to {}", what, spans[i].first,
             spans[i - 1].second);
  std::vector<std::pair<std::string, Tensor>> items;
  std::set<std::string> names;
  std::optional<std::string> meta;
  for (size_t e = 0; e < entries.size(); ++e) {
    const ZipEntry& z = entries[e];
    const std::string at = what + "#" + z.name;
    AK_CHECK(!(z.flags & 1), "{}: encrypted zip members are not supported", at);
    AK_CHECK(z.method == 0 || z.method == 8, "{}: zip compression method {} is not supported (stored and deflated are)", at, z.method);
    AK_CHECK(z.name.size() > 4 && z.name.compare(z.name.size() - 4, 4, ".npy") == 0, "{}: not a .npy member (a .npz holds NAME.npy arrays)", at);
    const std::string name = z.name.substr(0, z.name.size() - 4);
    AK_CHECK(names.insert(name).second, "{}: member \"{}\" is given twice", what, name);
    // the largest .npy the limit allows: 8-byte elements and a header (64 KiB for version 1)
    const uint64_t largest = static_cast<uint64_t>(options.max_elements) * 8 + (uint64_t{1} << 17);
    AK_CHECK(z.size <= largest, "{}: {} bytes uncompressed, more than a tensor of --max-elements {} can take", at, z.size, options.max_elements);
    if (z.method == 0) AK_CHECK(z.size == z.compressed, "{}: stored member's sizes disagree ({} and {})", at, z.compressed, z.size);
    std::string inflated;
    std::string_view data = bytes.substr(data_at[e], z.compressed);
    if (z.method == 8) {
      AK_CHECK(z.size < 0xffffffffu && z.compressed < 0xffffffffu, "{}: deflated members over 4 GiB are not supported", at);
      inflated = inflate_raw(data, z.size, at), data = inflated;
    }
    const uint32_t crc = static_cast<uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    AK_CHECK(crc == z.crc, "{}: CRC-32 {:08x} of the data is not the zip's {:08x} (damaged file)", at, crc, z.crc);
    if (name == kMetaName) meta = text_of_npy(parse_npy(data, at, options), at);
    else items.emplace_back(name, parse_npy(data, at, options));
  }
  return assemble(std::move(items), meta, what, options);
}

std::string npz_of(const FlatFile& flat, std::string_view target) {
  std::string out, central;
  const auto& members = flat.tensors;
  const size_t count = members.size() + (flat.meta.empty() ? 0 : 1);
  for (size_t m = 0; m < count; ++m) {
    const bool meta = m == members.size();  // the document's other values, last
    const std::string& name = meta ? std::string(kMetaName) : members[m].first;
    const std::string file = name + ".npy";
    AK_CHECK(file.size() < 0xffff, "{}: member name \"{}\" is too long for a zip", target, name);
    const std::string data = meta ? npy_of_text(flat.meta) : npy_of(*members[m].second);
    AK_CHECK(out.size() + data.size() + 30 + file.size() < 0xffffffffu, "{}: more than 4 GiB: write .safetensors instead", target);
    const uint32_t crc = static_cast<uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    // local header: version 2.0, no flags, stored, time/date 1980-01-01 00:00 (as numpy's zipfile does)
    append_le32(out, kLocalSig);
    append_le16(out, 20), append_le16(out, 0), append_le16(out, 0), append_le16(out, 0), append_le16(out, 0x21);
    append_le32(out, crc), append_le32(out, static_cast<uint32_t>(data.size())), append_le32(out, static_cast<uint32_t>(data.size()));
    append_le16(out, static_cast<uint16_t>(file.size())), append_le16(out, 0);
    out += file;
    out += data;
    append_le32(central, kCentralSig);
    append_le16(central, 20), append_le16(central, 20), append_le16(central, 0), append_le16(central, 0);
    append_le16(central, 0), append_le16(central, 0x21);
    append_le32(central, crc), append_le32(central, static_cast<uint32_t>(data.size())), append_le32(central, static_cast<uint32_t>(data.size()));
    append_le16(central, static_cast<uint16_t>(file.size())), append_le16(central, 0), append_le16(central, 0);
    append_le16(central, 0), append_le16(central, 0), append_le32(central, 0x01800000u /* -rw------- */), append_le32(central, offset);
    central += file;
  }
  AK_CHECK(count < 0xffff && out.size() + central.size() < 0xffffffffu, "{}: too large for a zip: write .safetensors instead", target);
  const uint32_t cd_at = static_cast<uint32_t>(out.size());
  out += central;
  append_le32(out, kEndSig);
  append_le16(out, 0), append_le16(out, 0);
  append_le16(out, static_cast<uint16_t>(count)), append_le16(out, static_cast<uint16_t>(count));
  append_le32(out, static_cast<uint32_t>(central.size())), append_le32(out, cd_at), append_le16(out, 0);
  return out;
}

}  // namespace

Value read_npz(std::string_view bytes, std::string_view source, const ReadOptions& options) {
  return parse_npz(bytes, std::string(source), options);
}

std::string npz_bytes(const Value& value, std::string_view target) {
  return npz_of(flat_file(value, target, ".npz"), target);
}

}  // namespace attnkit::io
