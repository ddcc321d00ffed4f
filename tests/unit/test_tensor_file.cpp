// .npy / .npz / .safetensors (io/tensor_file.hpp): the files numpy and PyTorch write
// (tests/fixtures/interop, from gen_interop.py) read bit for bit, exact float32 round trips,
// conversions with their precision note, and hostile headers refused with a message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"
#include "test_util.hpp"

using namespace attnkit;
using namespace attnkit::io;
using attnkit::test::error_of;
using attnkit::test::fixture_text;

namespace {

// Same names, shapes and bits (any NaN equals any NaN).
std::string difference(const Value& a, const Value& b, const std::string& at = "") {
  if (a.kind() != b.kind()) return at + ": kinds differ";
  if (a.is_bundle()) {
    if (a.names() != b.names()) return at + ": member names differ";
    for (size_t i = 0; i < a.members().size(); ++i) {
      std::string d = difference(a.members()[i].second, b.members()[i].second, at + "/" + a.members()[i].first);
      if (!d.empty()) return d;
    }
    return "";
  }
  const Tensor &x = a.tensor(), &y = b.tensor();
  if (x.shape() != y.shape()) return at + ": shape " + x.shape_str() + " vs " + y.shape_str();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::memcmp(&x.data()[i], &y.data()[i], 4) != 0) return fmt::format("{}: element {}: {} vs {}", at, i, x[i], y[i]);
  }
  return "";
}

std::vector<std::string> notes;
ReadOptions noting() {
  ReadOptions o;
  o.note = [](const std::string& n) { notes.push_back(n); };
  return o;
}

Value read_bytes(const std::string& bytes, const std::string& name, const ReadOptions& o = {}) {
  switch (file_format(name)) {
    case FileFormat::Npy: return read_npy(bytes, name, o);
    case FileFormat::Npz: return read_npz(bytes, name, o);
    default: return read_safetensors(bytes, name, o);
  }
}

void put64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
// A safetensors file with this header and `data` bytes of data.
std::string safetensors(const std::string& header, size_t data) {
  std::string s(8, '\0');
  put64(s, 0, header.size());
  return s + header + std::string(data, '\0');
}

// `s` as a JSON string (quotes and backslashes escaped; the tests' texts have no control characters).
std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

TEST_CASE("tensor files: numpy and PyTorch files read bit for bit, with a note where float32 rounds") {
  for (const char* name : {"f32.npy", "scalar.npy", "empty.npy", "f16.npy", "f64.npy", "f64_exact.npy", "i64.npy",
                           "i64_big.npy", "bool.npy", "u8.npy", "big_endian.npy", "fortran.npy", "v2.npy", "bundle.npz",
                           "bundle_compressed.npz", "dtypes.safetensors"}) {
    CAPTURE(name);
    const std::string stem = std::string(name).substr(0, std::string(name).find('.'));
    notes.clear();
    const Value got = read_bytes(fixture_text(std::string("interop/") + name), name, noting());
    const Value want = parse_json(fixture_text("interop/" + stem + ".json"), stem + ".json");
    CHECK(difference(got, want) == "");
    const bool note_expected = stem == "f64" || stem == "i64_big";
    CHECK(notes.size() == (note_expected ? 1u : 0u));
  }
  notes.clear();
  read_npy(fixture_text("interop/f64.npy"), "f64.npy", noting());
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "f64.npy: float64 rounded to float32: 2 of 4 values changed (first at [0, 0]: 0.1 -> 0.10000000149011612)");
  notes.clear();
  read_npy(fixture_text("interop/i64_big.npy"), "i.npy", noting());
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "i.npy: int64 rounded to float32: 1 of 2 values changed (first at [1]: 16777217 -> 16777216)");
}

TEST_CASE("tensor files: float32 round trips are exact in every format, and the files read back in numpy's layout") {
  Tensor t({2, 3}, {0.1f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f});
  uint32_t payload = 0x7fc12345;  // a NaN with a payload keeps its bits
  std::memcpy(&t.data()[4], &payload, 4);
  Value bundle = Value::bundle();
  bundle.set("enc", Value::bundle().set("W", t)).set("s", Tensor::scalar(2.5f)).set("e", Tensor({0, 4}));
  const std::string npy = npy_bytes(Value(t), "t.npy");
  CHECK(npy.size() % 64 == 0 + 24);  // numpy's 64-byte aligned header, then 6 floats
  const Value back = read_npy(npy, "t.npy");
  CHECK(difference(back, Value(t)) == "");
  CHECK(std::memcmp(back.tensor().data(), t.data(), 24) == 0);  // the payload too
  // nested names are joined with '.' (state_dict keys): enc.W
  Value flat = Value::bundle();
  flat.set("enc.W", t).set("s", Tensor::scalar(2.5f)).set("e", Tensor({0, 4}));
  CHECK(difference(read_npz(npz_bytes(bundle, "b.npz"), "b.npz"), flat) == "");
  CHECK(difference(read_safetensors(safetensors_bytes(bundle, "b.safetensors"), "b.safetensors"), flat) == "");
  // what each format holds
  CHECK(error_of([&] { npy_bytes(bundle, "b.npy"); }) ==
        "b.npy: .npy holds one tensor, and this is a bundle (has: enc, s, e); write .npz or .safetensors, or pick one with #NAME");
  CHECK(error_of([&] { npz_bytes(Value(t), "t.npz"); }).find("t.npz: .npz holds a bundle of named tensors, and this is one tensor of shape [2, 3]") == 0);
  // a bundle of tensors only is stored without attnkit_meta (what PyTorch users exchange)
  CHECK(safetensors_bytes(bundle, "b.safetensors").find(kMetaName) == std::string::npos);
  CHECK(npz_bytes(bundle, "b.npz").find(kMetaName) == std::string::npos);
  CHECK(file_format("A.SafeTensors") == FileFormat::Safetensors);
  CHECK(file_format("x.json") == FileFormat::Json);
  CHECK(file_format(".npy") == FileFormat::Json);
}

TEST_CASE("tensor files: hostile .npy headers and sizes are refused before allocating") {
  const std::string good = npy_bytes(Value(Tensor({2, 3})), "x.npy");
  auto with_header = [&](std::string dict, size_t data) {
    std::string h = dict;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string s("\x93NUMPY\x01\x00", 8);
    s += static_cast<char>(h.size() & 0xff), s += static_cast<char>(h.size() >> 8);
    return s + h + std::string(data, '\0');
  };
  auto refused = [&](const std::string& bytes) {
    ReadOptions o;
    o.max_elements = 1000;
    return error_of([&] { read_npy(bytes, "x.npy", o); });
  };
  CHECK(refused(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24)) == "");
  CHECK(refused(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }", 0)) ==
        "x.npy: shape [100000, 100000] has more than 1000 elements (see --max-elements)");
  CHECK(refused(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0)) ==
        "x.npy: bad header at byte 69: a size in 'shape' overflows");
  CHECK(refused(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4)).find("more than 8 dimensions") != std::string::npos);
  CHECK(refused(good.substr(0, good.size() - 1)) == "x.npy: truncated: shape [2, 3] of float32 needs 24 bytes of data, the file has 23");
  CHECK(refused(good + "x") == "x.npy: 1 bytes after the data of shape [2, 3] (float32)");
  CHECK(refused(good.substr(0, 40)) == "x.npy: truncated: its header says 118 bytes, the file has 30 after the preamble");
  CHECK(refused("\x93NUMPX") == "x.npy: not a .npy file (no \\x93NUMPY at its start)");
  CHECK(refused(with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8)) ==
        "x.npy: dtype '<c8' is not supported (float16/32/64, (u)int8-64 and bool are)");
  CHECK(refused(with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4)) ==
        "x.npy: header's 'descr' is not a simple dtype (structured arrays are not tensors)");
  CHECK(refused(with_header("{'descr': '<f4', 'shape': (1,), }", 4)) == "x.npy: header lacks 'fortran_order'");
  CHECK(refused(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4)) ==
        "x.npy: bad header at byte 61: unknown key 'x'");
}

TEST_CASE("tensor files: hostile .npz archives are refused") {
  Value b = Value::bundle();
  b.set("a", Tensor({2}, {1, 2})).set("b", Tensor({1}, {3}));
  const std::string good = npz_bytes(b, "b.npz");
  CHECK(error_of([&] { read_npz(good, "b.npz"); }) == "");
  std::string bad_crc = good;
  bad_crc[good.find("NUMPY") + 130] ^= 1;  // a data byte of a.npy
  CHECK(error_of([&] { read_npz(bad_crc, "b.npz"); }).find("b.npz#a.npy: CRC-32") == 0);
  CHECK(error_of([&] { read_npz(good.substr(0, good.size() - 5), "b.npz"); }) == "b.npz: not a .npz file (no zip end record; truncated?)");
  // the second entry made a copy of the first's (CRC, sizes, local header): its data would be a.npy's again
  std::string overlap = good;
  const size_t first_central = overlap.find(std::string("PK\x01\x02", 4));
  const size_t second_central = overlap.rfind(std::string("PK\x01\x02", 4));
  for (size_t i : {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 42, 43, 44, 45})
    overlap[second_central + i] = overlap[first_central + i];
  CHECK(error_of([&] { read_npz(overlap, "b.npz"); }).find("b.npz: zip members overlap at bytes 0 to ") == 0);
  // the first entry's size past the central directory
  std::string past = good;
  past[first_central + 20 + 3] = past[first_central + 24 + 3] = 0x7f;
  CHECK(error_of([&] { read_npz(past, "b.npz"); }).find("b.npz#a.npy: data [") == 0);
  ReadOptions small;
  small.max_elements = 1;
  CHECK(error_of([&] { read_npz(good, "b.npz", small); }) == "b.npz#a.npy: shape [2] has more than 1 elements (see --max-elements)");
}

TEST_CASE("tensor files: hostile .safetensors headers are refused") {
  auto refused = [](const std::string& bytes) {
    ReadOptions o;
    o.max_elements = 1000;
    return error_of([&] { read_safetensors(bytes, "w.safetensors", o); });
  };
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)) == "");
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7)) ==
        "w.safetensors#a: data_offsets [0, 8] lie outside the 7 bytes of data");
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[4000000000,4000000000],"data_offsets":[0,8]}})", 8)) ==
        "w.safetensors#a: shape [4000000000, 4000000000] has more than 1000 elements (see --max-elements)");
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)) ==
        "w.safetensors#a: data_offsets [0, 8] hold 8 bytes; shape [3] of float32 needs 12");
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)) ==
        "w.safetensors#b: data [4, 12) overlaps the tensor before it (which ends at 8)");
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)) ==
        "w.safetensors#a: a hole of 4 bytes before its data at 4 (safetensors data has no holes)");
  CHECK(refused(safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8)) ==
        "w.safetensors: 4 bytes after the last tensor's data");
  CHECK(refused(safetensors(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4)).find("w.safetensors#a: dtype \"Q4\" is not supported") == 0);
  CHECK(refused(safetensors(R"({"a":[[[[1]]]]})", 0)) == "w.safetensors: the header nests deeper than a safetensors header does");
  CHECK(refused(safetensors(R"({"a":)", 0)).find("w.safetensors: the header is not valid JSON") == 0);
  std::string huge = safetensors("{}", 0);
  put64(huge, 0, uint64_t{1} << 62);
  CHECK(refused(huge) == "w.safetensors: header size 4611686018427387904 is more than 100000000 bytes (not a .safetensors file?)");
  put64(huge, 0, 1000);
  CHECK(refused(huge) == "w.safetensors: truncated: its header says 1000 bytes, the file has 2 after the size");
  CHECK(refused("abc") == "w.safetensors: not a .safetensors file (shorter than its 8-byte header size)");
}

TEST_CASE("tensor files: documents (tensors beside other values) round trip through .safetensors and .npz") {
  Tensor w({2, 3}, {1, -2, 3.5f, 0, -0.0f, 1e-30f});
  Value doc = Value::bundle();
  doc.set("format", Value::other("a string", "\"attnkit-seq2seq\""));
  doc.set("encoder", Value::bundle().set("weight_ih_l0", w).set("cell", Value::other("a string", "\"lstm\"")));
  doc.set("optimizer", Value::bundle().set("encoder.weight_ih_l0", Value::bundle().set("exp_avg", w)));
  doc.set("vocab", Value::bundle().set("tokens", Value::other("a list", "[\"<pad>\",\"a\"]")));
  doc.set("empty", Value::bundle());
  doc.set("s", Tensor::scalar(2.5f));
  for (const char* name : {"d.safetensors", "d.npz"}) {
    CAPTURE(name);
    const bool st = file_format(name) == FileFormat::Safetensors;
    const std::string bytes = st ? safetensors_bytes(doc, name) : npz_bytes(doc, name);
    const Value back = st ? read_safetensors(bytes, name) : read_npz(bytes, name);
    CHECK(to_json(back) == to_json(doc));  // names, nesting, order, other values
    CHECK(difference(*back.find("encoder")->find("weight_ih_l0"), Value(w)) == "");
    CHECK(sniff_format(bytes) == file_format(name));
    CHECK(to_json(read_document(bytes, sniff_format(bytes), name)) == to_json(doc));
  }
  // the tensors are stored under their joined names, the rest as JSON text with null in their place
  const std::string st = safetensors_bytes(doc, "d.safetensors");
  CHECK(st.find("\"optimizer.encoder.weight_ih_l0.exp_avg\":{\"dtype\":\"F32\"") != std::string::npos);
  CHECK(st.find("\"__metadata__\":{\"attnkit_meta\":\"{\\\"format\\\":\\\"attnkit-seq2seq\\\"") != std::string::npos);
  // names that collide with the stored metadata
  Value clash = doc;
  clash.set("attnkit_meta", w);
  CHECK(error_of([&] { npz_bytes(clash, "c.npz"); }) ==
        "c.npz: a tensor named \"attnkit_meta\" would collide with the member that holds a document's other values");
  CHECK(error_of([&] { npz_bytes(Value::bundle().set("attnkit_meta", w), "c.npz"); }) ==
        "c.npz: a tensor named \"attnkit_meta\" would collide with the member that holds a document's other values");
  Value with_null = doc;
  with_null.set("n", Value::other("null", "null"));
  CHECK(error_of([&] { safetensors_bytes(with_null, "n.safetensors"); }) ==
        "n.safetensors: member \"n\" is null, which attnkit_meta uses to place tensors (write JSON to keep it)");
  Value clash2 = Value::bundle();
  clash2.set("__metadata__", w);
  CHECK(error_of([&] { safetensors_bytes(clash2, "c.safetensors"); }) ==
        "c.safetensors: a tensor cannot be named \"__metadata__\" in .safetensors");
  Value twice = doc;
  twice.set("encoder.weight_ih_l0", w);
  CHECK(error_of([&] { safetensors_bytes(twice, "t.safetensors"); }) ==
        "t.safetensors: two tensors are named \"encoder.weight_ih_l0\" once nested names are joined with '.'");
  // a document that disagrees with the file's tensors
  auto with_meta = [](const std::string& meta) {
    std::string h = R"({"__metadata__":{"attnkit_meta":)" + json_quote(meta) + R"(},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    return safetensors(h, 4);
  };
  CHECK(error_of([&] { read_safetensors(with_meta(R"({"a":null,"b":{"c":"x"}})"), "m.safetensors"); }) == "");
  CHECK(error_of([&] { read_safetensors(with_meta(R"({"a":null,"b":null})"), "m.safetensors"); }) ==
        "m.safetensors: attnkit_meta places a tensor \"b\" that the file does not hold");
  // a document of tensors only reads as the flat bundle it would be written as
  const Value flat = read_safetensors(with_meta(R"({"x":{"y":1},"e":{},"a":null})"), "m.safetensors");
  CHECK(to_json(flat) == R"({"x.y":1,"a":[0]})");
  CHECK(error_of([&] { read_safetensors(with_meta(R"({"a":null,"x":"s","b.c":1,"b":{"c":2}})"), "m.safetensors"); }) ==
        "m.safetensors: attnkit_meta has two tensors named \"b.c\" once nested names are joined with '.'");
  CHECK(error_of([&] { read_safetensors(with_meta(R"({"a":null,"x":"s","__metadata__":1})"), "m.safetensors"); }) ==
        "m.safetensors: attnkit_meta names a tensor \"__metadata__\", a name the files reserve");
  CHECK(error_of([&] { read_safetensors(with_meta(R"({"x":"y"})"), "m.safetensors"); }) ==
        "m.safetensors#a: a tensor that the document in attnkit_meta does not place");
  CHECK(error_of([&] { read_safetensors(with_meta(R"({"a":null,"a":null})"), "m.safetensors"); }) ==
        "m.safetensors#attnkit_meta: the document is not a JSON object (an object with the key \"a\" twice (line 1, column 11))");
  CHECK(error_of([&] { read_safetensors(with_meta("[1]"), "m.safetensors"); }) ==
        "m.safetensors#attnkit_meta: the document is not a JSON object");
  CHECK(error_of([&] { read_safetensors(with_meta("{"), "m.safetensors"); }).find("m.safetensors#attnkit_meta:1:") == 0);
}

TEST_CASE("tensor files: standard input's format told by its first bytes") {
  CHECK(sniff_format(npy_bytes(Value(Tensor({2})), "x.npy")) == FileFormat::Npy);
  CHECK(sniff_format(std::string("PK\x05\x06", 4)) == FileFormat::Npz);
  CHECK(sniff_format(safetensors("{}", 0)) == FileFormat::Safetensors);
  for (const char* json : {"[1, 2]", "{\"a\": 1}", "  \n[1]", "\"NaN\"", "12345678{", "", "P"}) {
    CAPTURE(json);
    CHECK(sniff_format(json) == FileFormat::Json);
  }
  std::string hostile("\xff\xff\xff\xff\xff\xff\xff\x7f{", 9);  // a header size past 100 MB: not safetensors
  CHECK(sniff_format(hostile) == FileFormat::Json);
}
