// JSON tensors on the wire (docs/tensor-format.md): exact round trips, shortest
// output, bundles, references, NDJSON, limits, and every error message with its position.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <charconv>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/reference.hpp"
#include "attnkit/tensor/error.hpp"
#include "test_util.hpp"

using namespace attnkit;
using attnkit::test::error_of;
using attnkit::test::fixture_text;
using namespace attnkit::io;

namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

std::string parse_error(const std::string& text, const std::string& source = "x.json", ReadOptions o = {}) {
  return error_of([&] { parse_json(text, source, o); });
}

Value parse(const std::string& text) { return parse_json(text, "t.json"); }

// Reason a document is not a tensor.
std::string why_not(const std::string& text) {
  Value v = parse(text);
  REQUIRE(v.kind() == Value::Kind::Other);
  return v.why();
}

// nested -> text -> flat -> text -> nested: every value keeps its bits (NaN stays NaN).
void check_round_trip(const Tensor& t) {
  std::string nested = to_json(t);
  Value a = parse_json(nested, "nested.json");
  REQUIRE(a.is_tensor());
  std::string flat = to_json(a, {TensorFormat::Flat, false});
  Value b = parse_json(flat, "flat.json");
  REQUIRE(b.is_tensor());
  std::string nested_again = to_json(b);
  CHECK(nested_again == nested);
  const Tensor& r = b.tensor();
  REQUIRE(r.shape() == t.shape());
  int64_t bad = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    bool same = std::isnan(t[i]) ? std::isnan(r[i]) : bits(t[i]) == bits(r[i]);
    if (!same && ++bad <= 5) FAIL_CHECK("value " << i << " bits " << std::hex << bits(t[i]) << " came back as " << bits(r[i]));
  }
  CHECK(bad == 0);
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/attnkit-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string file(const std::string& name, const std::string& text) const {
    std::string p = path + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
};

// Standard input replaced by `text` while alive.
// Standard input (file descriptor 0, which the readers read) replaced by `text` for a scope.
struct FakeStdin {
  int saved = dup(0);
  explicit FakeStdin(const std::string& text) {
    char path[] = "/tmp/attnkit-stdin-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    lseek(fd, 0, SEEK_SET);
    unlink(path);
    dup2(fd, 0);
    close(fd);
  }
  ~FakeStdin() {
    dup2(saved, 0);
    close(saved);
  }
};

}  // namespace

TEST_CASE("round trip: every float32 class keeps its bits through nested, flat and nested again") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {
      0.0f, -0.0f,
      std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
      from_bits(0x007fffff), from_bits(0x807fffff),  // largest subnormals
      std::numeric_limits<float>::min(), -std::numeric_limits<float>::min(),  // smallest normals
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      from_bits(0x00000002), from_bits(0x00400000),  // more subnormals
      1.0f, -1.0f, 0.1f, 1.0f / 3.0f, 16777216.0f, 16777217.0f, 1e10f, 1e-10f, 3.0e38f,
      inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  // The first and last 8 mantissas of every exponent, both signs.
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t e = 0; e < 255; ++e)
      for (uint32_t m : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 0x7ffff8u, 0x7ffff9u, 0x7ffffau, 0x7ffffbu, 0x7ffffcu, 0x7ffffdu, 0x7ffffeu, 0x7fffffu})
        special.push_back(from_bits(sign << 31 | e << 23 | m));
  Tensor t(Shape{static_cast<int64_t>(special.size())}, special);
  check_round_trip(t);
  check_round_trip(t.reshaped({-1, 4}));  // nested rows too
  check_round_trip(Tensor::scalar(-0.0f));
  check_round_trip(Tensor::scalar(std::numeric_limits<float>::denorm_min()));

  SUBCASE("signs of zero survive") {
    Value v = parse("[-0.0, 0, -0, 0e5, -0e-3]");
    for (int i = 0; i < 5; ++i) CHECK(std::signbit(v.tensor()[i]) == (i == 0 || i == 2 || i == 4));
    CHECK(to_json(v) == "[-0,0,-0,0,-0]");
  }
}

TEST_CASE("round trip: three million random bit patterns") {
  std::mt19937 gen(12345);
  const int64_t n = 3 * 1000 * 1000;
  std::vector<float> values(static_cast<size_t>(n));
  for (auto& v : values) v = from_bits(static_cast<uint32_t>(gen()));  // includes NaNs and infinities
  check_round_trip(Tensor(Shape{n / 1000, 10, 100}, std::move(values)));
}

TEST_CASE("writer: shortest text that reads back to the same float32") {
  auto text = [](float x) {
    std::string s;
    append_float(s, x);
    return s;
  };
  CHECK(text(0.1f) == "0.1");
  CHECK(text(0.3f) == "0.3");
  CHECK(text(1.0f) == "1");
  CHECK(text(-2.5f) == "-2.5");
  CHECK(text(1.0f / 3.0f) == "0.33333334");
  CHECK(text(16777216.0f) == "16777216");
  CHECK(text(1e10f) == "1e+10");
  CHECK(text(1e-45f) == "1e-45");
  CHECK(text(std::numeric_limits<float>::max()) == "3.4028235e+38");
  CHECK(text(std::numeric_limits<float>::min()) == "1.1754944e-38");
  CHECK(text(-0.0f) == "-0");
  CHECK(text(std::numeric_limits<float>::quiet_NaN()) == "\"NaN\"");
  CHECK(text(std::numeric_limits<float>::infinity()) == "\"Infinity\"");
  CHECK(text(-std::numeric_limits<float>::infinity()) == "\"-Infinity\"");

  CHECK(text(9028231168.0f) == "9028231168");  // exact integer: fewer characters than 9.028231e+09

  // Shortest: the text is never longer than the shortest scientific form, whose digits cannot lose
  // one more (one significant digit fewer, correctly rounded, reads back to another float).
  std::mt19937 gen(7);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    float x = from_bits(static_cast<uint32_t>(gen()));
    if (!std::isfinite(x) || x == 0) continue;
    std::string s = text(x);
    char sci[64];
    auto end = std::to_chars(sci, sci + sizeof sci, x, std::chars_format::scientific).ptr;
    std::string mantissa(sci, std::find(sci, end, 'e'));
    int digits = 0;
    for (char c : mantissa) digits += c >= '0' && c <= '9';
    CHECK(s.size() <= static_cast<size_t>(end - sci));
    if (digits <= 1) continue;
    char shorter[64];
    std::snprintf(shorter, sizeof shorter, "%.*e", digits - 2, static_cast<double>(x));
    CHECK_MESSAGE(std::strtof(shorter, nullptr) != x, s << " could be " << shorter);
    ++checked;
  }
  CHECK(checked > 100000);
}

TEST_CASE("writer: the same text as std::to_chars (bench/float_text_exhaustive checks all 2^32)") {
  auto same = [](uint32_t u) {
    float x = from_bits(u);
    if (!std::isfinite(x)) return true;
    std::string ours;
    append_float(ours, x);
    char want[64];
    char* end = std::to_chars(want, want + sizeof want, x).ptr;
    if (ours == std::string(want, end)) return true;
    FAIL_CHECK(std::hex << u << ": " << ours << " vs std::to_chars " << std::string(want, end));
    return false;
  };
  int bad = 0;
  for (uint32_t u = 0; u < (1u << 23) && bad < 5; u += 7) bad += !same(u) + !same(u | 0x80000000u);  // subnormals
  for (uint32_t u = 0; u < 16 && bad < 5; ++u) bad += !same(u);                                       // the tiniest
  for (uint32_t e = 1; e < 255; ++e)  // both ends of every binade, and around powers of ten
    for (uint32_t m : {0u, 1u, 2u, 0x7ffffeu, 0x7fffffu}) bad += !same(e << 23 | m);
  for (float p = 1e-38f; p < 1e38f; p *= 10) {
    uint32_t u;
    std::memcpy(&u, &p, 4);
    for (uint32_t d = u - 3; d <= u + 3; ++d) bad += !same(d);
  }
  for (uint32_t i = 1; i <= (1u << 25); i += 3) {  // integers, where to_chars writes exact digits
    float x = static_cast<float>(i) * 64.0f;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (!same(u) && ++bad > 5) break;
  }
  std::mt19937 gen(99);
  for (int i = 0; i < 4000000 && bad < 5; ++i) bad += !same(static_cast<uint32_t>(gen()));
  CHECK(bad == 0);
}

TEST_CASE("writer: nested, flat, pretty, bundles") {
  Tensor t(Shape{2, 3}, {1, 2, 3, 4, 5, 6.5f});
  CHECK(to_json(t) == "[[1,2,3],[4,5,6.5]]");
  CHECK(to_json(t, {TensorFormat::Flat, false}) == R"({"shape":[2,3],"data":[1,2,3,4,5,6.5]})");
  CHECK(to_json(t, {TensorFormat::Flat, true}) == R"({"shape": [2, 3], "data": [1, 2, 3, 4, 5, 6.5]})");
  CHECK(to_json(t, {TensorFormat::Nested, true}) == "[[1, 2, 3],\n [4, 5, 6.5]]");
  CHECK(to_json(Tensor::scalar(2)) == "2");
  CHECK(to_json(Tensor(Shape{0})) == "[]");
  CHECK(to_json(Tensor(Shape{2, 0})) == R"({"shape":[2,0],"data":[]})");  // a size 0 of rank >= 2: flat
  CHECK(to_json(Tensor(Shape{1, 2, 2}, {1, 2, 3, 4}), {TensorFormat::Nested, true}) == "[[[1, 2],\n  [3, 4]]]");
  CHECK(to_json(Tensor(Shape{2, 1, 2}, {1, 2, 3, 4}), {TensorFormat::Nested, true}) == "[[[1, 2]],\n\n [[3, 4]]]");

  Value b = Value::bundle();
  b.set("output", t);
  b.set_path({"state", "h_n"}, Tensor::scalar(1));
  b.set("cell", Value::other("lstm \"x\"\n"));
  b.set("ok", Value::boolean(true));
  CHECK(to_json(b) == R"({"output":[[1,2,3],[4,5,6.5]],"state":{"h_n":1},"cell":"lstm \"x\"\n","ok":true})");
  CHECK(to_json(b, {TensorFormat::Nested, true}) ==
        "{\n  \"output\": [[1, 2, 3],\n             [4, 5, 6.5]],\n  \"state\": {\n    \"h_n\": 1\n  },\n"
        "  \"cell\": \"lstm \\\"x\\\"\\n\",\n  \"ok\": true\n}");
  CHECK(to_json(Value::bundle()) == "{}");
  // what the writer writes, the reader reads (strings stay "not a tensor")
  Value again = parse(to_json(b, {TensorFormat::Flat, true}));
  CHECK(again.names() == std::vector<std::string>{"output", "state", "cell", "ok"});
  CHECK(again.find("output")->tensor().values() == t.values());
  CHECK(again.find("state")->find("h_n")->tensor().rank() == 0);
}

TEST_CASE("reader: nested arrays, scalars, flat form with dtype, non-finite strings") {
  Value v = parse(" [[1, 2.5e0, -3E+1],\r\n\t[4, 5, 6]] ");
  REQUIRE(v.is_tensor());
  CHECK(v.tensor().shape() == Shape{2, 3});
  CHECK(v.tensor().values() == std::vector<float>{1, 2.5f, -30, 4, 5, 6});
  CHECK(parse("7").tensor().rank() == 0);
  CHECK(parse("[]").tensor().shape() == Shape{0});
  CHECK(parse("[[], []]").tensor().shape() == Shape{2, 0});
  CHECK(parse("[[[]]]").tensor().shape() == Shape{1, 1, 0});
  CHECK(parse("1e-50").tensor()[0] == 0.0f);  // underflow rounds to zero, like any float parser

  Value f = parse(R"({"shape": [2, 2], "data": [1, 2, 3, 4], "dtype": "float32"})");
  REQUIRE(f.is_tensor());
  CHECK(f.tensor().shape() == Shape{2, 2});
  CHECK(parse(R"({"data": [5], "shape": []})").tensor().rank() == 0);
  CHECK(parse(R"({"shape": [0, 3], "data": []})").tensor().shape() == Shape{0, 3});

  Value nf = parse(R"(["NaN", "Infinity", "-Infinity", 1])");
  REQUIRE(nf.is_tensor());
  CHECK(std::isnan(nf.tensor()[0]));
  CHECK(nf.tensor()[1] == std::numeric_limits<float>::infinity());
  CHECK(nf.tensor()[2] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(parse(R"("NaN")").tensor()[0]));
  CHECK(parse(R"({"shape": [2], "data": ["Infinity", 0]})").is_tensor());
}

TEST_CASE("reader: bundles nest, keep their order, and hold non-tensors with the reason") {
  Value b = parse(R"({"output": [[1, 2]], "state": {"h_n": [1], "c_n": [2]}, "cell": "lstm", "n": null})");
  REQUIRE(b.is_bundle());
  CHECK(b.names() == std::vector<std::string>{"output", "state", "cell", "n"});
  CHECK(b.find("state")->is_bundle());
  CHECK(b.find("state")->find("c_n")->tensor()[0] == 2);
  CHECK(b.find("cell")->why() == "a string (line 1, column 65)");
  CHECK(b.find("n")->why() == "null (line 1, column 78)");
  CHECK(b.find("missing") == nullptr);
  // an object with "shape" and "data" plus other keys is a bundle, not a flat tensor
  CHECK(parse(R"({"shape": [1], "data": [1], "name": [2]})").is_bundle());
  CHECK(parse("{}").is_bundle());
}

TEST_CASE("reader: what is not a tensor, and why") {
  CHECK(why_not("[[1, 2, 3, 4], [5, 6, 7]]") == "ragged array: row 2 has 3 values, row 1 has 4 (line 1, column 16)");
  CHECK(why_not("[[1, 2],\n [3, 4],\n [5]]") == "ragged array: row 3 has 1 values, row 1 has 2 (line 3, column 2)");
  CHECK(why_not("[[[1], [2]], [[3]]]") == "ragged array: row 2 has 1 values, row 1 has 2 (line 1, column 14)");
  CHECK(why_not("[[1], []]") == "ragged array: row 2 has 0 values, row 1 has 1 (line 1, column 7)");
  CHECK(why_not("[[], [1]]") == "ragged array: row 2 has 1 values, row 1 has 0 (line 1, column 6)");
  CHECK(why_not("[1, [2]]") == "an array that mixes numbers and arrays (line 1, column 5)");
  CHECK(why_not("[[2], 1]") == "an array that mixes numbers and arrays (line 1, column 7)");
  CHECK(why_not(R"([1, "x"])") == "an array holding a string (line 1, column 5)");
  CHECK(why_not("[1, true]") == "an array holding a boolean (write true and false as 1 and 0) (line 1, column 5)");
  CHECK(why_not("[null]") == "an array holding null (line 1, column 2)");
  CHECK(why_not(R"([{"a": 1}])") == "an array holding an object (line 1, column 2)");
  const Value hello = parse(R"("hello")");
  REQUIRE(hello.is_string());
  CHECK(hello.str() == "hello");
  CHECK(hello.why() == "a string (line 1, column 1)");
  CHECK(why_not("[[[[[[[[[1]]]]]]]]]") == "an array nested deeper than 8 dimensions (line 1, column 9)");
  CHECK(why_not(R"({"a": 1, "a": 2})") == "an object with the key \"a\" twice (line 1, column 10)");
  CHECK(why_not(R"({"shape": [2], "data": [1, 2, 3]})") == "a flat tensor of shape [2] needs 2 values in \"data\", has 3 (line 1, column 1)");
  CHECK(why_not(R"({"shape": [1.5], "data": [1]})") ==
        "a flat tensor whose \"shape\" holds 1.5 (sizes are non-negative integers) (line 1, column 1)");
  CHECK(why_not(R"({"shape": [-1], "data": [1]})") ==
        "a flat tensor whose \"shape\" holds -1 (sizes are non-negative integers) (line 1, column 1)");
  CHECK(why_not(R"({"shape": 2, "data": [1, 2]})") == "a flat tensor whose \"shape\" is not a list of sizes (line 1, column 1)");
  CHECK(why_not(R"({"shape": [2], "data": [[1, 2]]})") == "a flat tensor whose \"data\" is not a list of numbers (line 1, column 1)");
  CHECK(why_not(R"({"shape": [2], "data": [1, 2], "dtype": 32})") == "a flat tensor whose \"dtype\" is not a string (line 1, column 1)");
  // the rest of the document is still read strictly after the problem
  CHECK(parse_error(R"([1, "x", 2,])") == "x.json:1:12: trailing comma in an array");
}

TEST_CASE("reader: syntax errors say where (source:line:column)") {
  CHECK(parse_error("[[1, 2],\n [3, 4],\n [5, 6, 7, 8, 9,x]]") == "x.json:3:17: expected a number, found 'x'");
  CHECK(parse_error("") == "x.json:1:1: empty input, expected a JSON value");
  CHECK(parse_error("  \n ") == "x.json:2:2: empty input, expected a JSON value");
  CHECK(parse_error("[1, 2") == "x.json:1:1: unterminated array");
  CHECK(parse_error("[1 2]") == "x.json:1:4: expected ',' or ']' in an array, found '2'");
  CHECK(parse_error("[1, 2,]") == "x.json:1:7: trailing comma in an array");
  CHECK(parse_error("[,]") == "x.json:1:2: expected a JSON value, found ','");
  CHECK(parse_error("[1, NaN]") == "x.json:1:5: expected a number, found NaN (JSON has no NaN: write the string \"NaN\")");
  CHECK(parse_error("[-Infinity]") ==
        "x.json:1:2: expected a number, found -Infinity (JSON has no -Infinity: write the string \"-Infinity\")");
  CHECK(parse_error("[1, -Infinity]") ==
        "x.json:1:5: expected a number, found -Infinity (JSON has no -Infinity: write the string \"-Infinity\")");
  CHECK(parse_error("Infinity") ==
        "x.json:1:1: expected a JSON value, found Infinity (JSON has no Infinity: write the string \"Infinity\")");
  CHECK(parse_error("[01]") == "x.json:1:3: a number may not have a leading zero");
  CHECK(parse_error("[1.]") == "x.json:1:4: expected a digit after the decimal point");
  CHECK(parse_error("[.5]") == "x.json:1:2: expected a JSON value, found '.'");
  CHECK(parse_error("[-]") == "x.json:1:3: expected a digit in a number");
  CHECK(parse_error("[+1]") == "x.json:1:2: expected a JSON value, found '+'");
  CHECK(parse_error("[1e]") == "x.json:1:4: expected a digit in the exponent");
  CHECK(parse_error("[1e+]") == "x.json:1:5: expected a digit in the exponent");
  CHECK(parse_error("[0x10]") == "x.json:1:3: expected ',' or ']' in an array, found 'x'");
  // valid JSON, but not a float32: "not a tensor" with the position (JSONTestSuite y_number.json)
  CHECK(parse_error("[1e39]").empty());
  CHECK(io::parse_json("[1e39]", "x.json").why() == "number 1e39 is out of the float32 range (write \"Infinity\" for infinity) (line 1, column 2)");
  CHECK(io::parse_json("-3.5e38", "x.json").why() == "number -3.5e38 is out of the float32 range (write \"Infinity\" for infinity) (line 1, column 1)");
  CHECK(parse_error("[1] 2") == "x.json:1:5: unexpected text after the JSON value");
  CHECK(parse_error("[1]\n[2]") == "x.json:2:1: unexpected text after the JSON value");
  CHECK(parse_error(R"({"a" 1})") == "x.json:1:6: expected ':' after an object key, found '1'");
  CHECK(parse_error(R"({a: 1})") == "x.json:1:2: expected a string key in an object, found 'a'");
  CHECK(parse_error(R"({"a": 1,})") == "x.json:1:9: trailing comma in an object");
  CHECK(parse_error(R"({"a": 1 "b": 2})") == "x.json:1:9: expected ',' or '}' in an object, found '\"'");
  CHECK(parse_error(R"({"a": 1)") == "x.json:1:1: unterminated object");
  CHECK(parse_error(R"(["abc)") == "x.json:1:2: unterminated string");
  CHECK(parse_error("[\"a\x01\"]") == "x.json:1:4: control character in a string (escape it)");
  CHECK(parse_error(R"(["\x"])") == "x.json:1:4: invalid escape in a string");
  CHECK(parse_error(R"(["\u12G4"])") == "x.json:1:7: expected a hex digit in a \\u escape");
  CHECK(parse_error(R"(["\ud800"])") == "x.json:1:3: lone UTF-16 surrogate in a \\u escape");
  CHECK(parse_error(R"(["\udc00"])") == "x.json:1:3: lone UTF-16 surrogate in a \\u escape");
  CHECK(parse_error(R"(["\ud800\u0041"])") == "x.json:1:3: invalid UTF-16 surrogate pair in a \\u escape");
  CHECK(parse_error("[\"\xff\"]") == "x.json:1:3: invalid UTF-8 in a string");
  CHECK(parse_error("[\"\xc0\xaf\"]") == "x.json:1:3: invalid UTF-8 in a string");  // overlong '/'
  CHECK(parse_error("[\"\xed\xa0\x80\"]") == "x.json:1:3: invalid UTF-8 in a string");  // surrogate
  CHECK(parse_error("[\"\xe2\x82\"]") == "x.json:1:3: invalid UTF-8 in a string");
  CHECK(parse_error("[tru]") == "x.json:1:2: expected a JSON value, found 't'");
  CHECK(parse_error("[1]\x01") == "x.json:1:4: unexpected text after the JSON value");
  CHECK(parse_error("\xef\xbb\xbf[1]") == "x.json:1:1: expected a JSON value, found byte 0xef");  // no BOM
  // Strings that are fine
  Value s = parse(R"({"k\u00e9\ud83d\ude00\n\"\/": "caf\u00e9 \u65e5"})");
  CHECK(s.names()[0] == "k\xc3\xa9\xf0\x9f\x98\x80\n\"/");
  // The position is counted in bytes, lines by '\n'
  CHECK(parse_error("{\"\xc3\xa9\": [1,\n  2, ?]}") == "x.json:2:6: expected a number, found '?'");
  CHECK(parse_error("[1, 2, ?]", "<stdin>") == "<stdin>:1:8: expected a number, found '?'");
}

TEST_CASE("reader: positions stay right and fast with many non-tensor members") {
  // An object of 20000 string members asks for 20000 positions: each must not rescan the text.
  std::string text = "{";
  for (int i = 0; i < 20000; ++i) text += (i ? ",\n\"k" : "\"k") + std::to_string(i) + "\": \"v\"";
  text += "}";
  Value v = parse(text);
  CHECK(v.members().size() == 20000);
  CHECK(v.find("k19999")->why() == "a string (line 20000, column 11)");
  CHECK(v.find("k0")->why() == "a string (line 1, column 8)");
}

TEST_CASE("reader: limits are checked before allocation, nesting never overflows the stack") {
  ReadOptions small;
  small.max_elements = 5;
  CHECK(parse_error("[1, 2, 3, 4, 5, 6]", "x.json", small) == "x.json:1:17: tensor has more than 5 elements (see --max-elements)");
  CHECK(parse_error("[[1, 2, 3], [4, 5, 6]]", "x.json", small) == "x.json:1:20: tensor has more than 5 elements (see --max-elements)");
  CHECK(parse_json("[1, 2, 3, 4, 5]", "x.json", small).is_tensor());
  CHECK(parse_error(R"({"shape": [2, 3], "data": []})", "x.json", small) ==
        "x.json:1:1: flat tensor of shape [2, 3] has more than 5 elements (see --max-elements)");
  // the default limit: 2^30 elements; a declared [1e6, 1e6, 1e6] fails at once
  CHECK(parse_error(R"({"shape": [1000000, 1000000, 1000000], "data": []})") ==
        "x.json:1:1: flat tensor of shape [1000000, 1000000, 1000000] has more than 1073741824 elements (see --max-elements)");
  // a product past int64 is refused, not wrapped around
  CHECK(parse_error(R"({"shape": [4294967296, 4294967296, 4294967296], "data": []})").find("has more than") != std::string::npos);

  std::string deep(100000, '[');
  CHECK(parse_error(deep) == "x.json:1:65: nesting deeper than 64 levels");
  std::string deep_objects;
  for (int i = 0; i < 100000; ++i) deep_objects += "{\"a\":";
  CHECK(parse_error(deep_objects) == "x.json:1:321: nesting deeper than 64 levels");
  // inside a value that is skipped (an array holding an object)
  CHECK(parse_error("[{\"a\": " + deep + "]") == "x.json:1:70: nesting deeper than 64 levels");
  std::string ok_depth = std::string(64, '[') + std::string(64, ']');
  CHECK(parse(ok_depth).kind() == Value::Kind::Other);  // 64 levels read fine (more than 8 dims: not a tensor)
  CHECK(parse_error(std::string(65, '[') + std::string(65, ']')) == "x.json:1:65: nesting deeper than 64 levels");
  ReadOptions shallow;
  shallow.max_depth = 2;
  CHECK(parse_error("[[[1]]]", "x.json", shallow) == "x.json:1:3: nesting deeper than 2 levels");
}

TEST_CASE("NDJSON streams: one document per line") {
  auto docs = parse_json_stream("[1, 2]\n{\"a\": [3]}\n\n  7  \n[[1],\n [2]]\n", "s.ndjson");
  REQUIRE(docs.size() == 4);
  CHECK(docs[0].tensor().shape() == Shape{2});
  CHECK(docs[1].find("a")->tensor()[0] == 3);
  CHECK(docs[2].tensor()[0] == 7);
  CHECK(docs[3].tensor().shape() == Shape{2, 1});  // a document may span lines
  CHECK(parse_json_stream("", "s").empty());
  CHECK(parse_json_stream(" \n\n", "s").empty());
  CHECK(parse_json_stream("[1]\r\n[2]", "s").size() == 2);
  CHECK(error_of([] { parse_json_stream("[1] [2]\n", "s.ndjson"); }) == "s.ndjson:1:5: expected the end of the line after a JSON document");
  CHECK(error_of([] { parse_json_stream("[1]\n[2,]\n", "s.ndjson"); }) == "s.ndjson:2:4: trailing comma in an array");
}

TEST_CASE("references: PATH, PATH#NAME, PATH#a/b, and - read once") {
  Reference r = parse_reference("run.json#enc/layers/W");
  CHECK(r.path == "run.json");
  CHECK(r.names == std::vector<std::string>{"enc", "layers", "W"});
  CHECK(r.text() == "run.json#enc/layers/W");
  CHECK(parse_reference("-").path == "-");
  CHECK(parse_reference("-#output").names == std::vector<std::string>{"output"});
  CHECK(parse_reference("x.json").names.empty());
  CHECK(error_of([] { parse_reference("#a"); }) == "reference \"#a\": no file before '#' (use - for standard input)");
  CHECK(error_of([] { parse_reference("x.json#"); }) == "reference \"x.json#\": no name after '#'");
  CHECK(error_of([] { parse_reference("x.json#a//b"); }) == "reference \"x.json#a//b\": empty name between '/'");

  TempDir dir;
  std::string bundle = dir.file("bundle.json", R"({"output": [[1, 2]], "c_n": [3], "enc": {"W": [[1]], "cell": "gru"}, "bad": [1, "NaN"]})");
  Sources sources;
  CHECK(sources.tensor(bundle + "#output").shape() == Shape{1, 2});
  CHECK(sources.tensor(bundle + "#enc/W").shape() == Shape{1, 1});
  CHECK(sources.value(bundle).is_bundle());
  CHECK(error_of([&] { sources.tensor(bundle + "#h_n"); }) == bundle + ": no tensor named \"h_n\" (has: output, c_n, enc, bad)");
  CHECK(error_of([&] { sources.tensor(bundle + "#enc/U"); }) == bundle + "#enc: no tensor named \"U\" (has: W, cell)");
  CHECK(error_of([&] { sources.tensor(bundle + "#output/x"); }) ==
        bundle + "#output: is a tensor of shape [1, 2], not a bundle; cannot take \"x\"");
  CHECK(error_of([&] { sources.tensor(bundle + "#enc/cell/x"); }) ==
        bundle + "#enc/cell: cannot take \"x\" from a string (line 1, column 62)");
  CHECK(error_of([&] { sources.tensor(bundle + "#enc/cell", "weights"); }) ==
        "weights (" + bundle + "#enc/cell): not a tensor: a string (line 1, column 62)");
  CHECK(error_of([&] { sources.tensor(bundle + "#enc"); }) == bundle + "#enc: is a bundle, not a tensor (has: W, cell); pick one with #NAME");
  CHECK(error_of([&] { sources.tensor(bundle + "#bad", "query"); }) ==
        "query (" + bundle + "#bad): tensor of shape [2] has NaN at [1] (pass --allow-nan to accept it)");
  CHECK(std::isnan(sources.tensor(bundle + "#bad", "query", true)[1]));
  CHECK(error_of([&] { sources.tensor(dir.path + "/missing.json"); }) ==
        dir.path + "/missing.json: cannot open (No such file or directory)");
  std::string ragged = dir.file("ragged.json", "[[1, 2, 3, 4],\n [5, 6, 7]]");
  CHECK(error_of([&] { sources.tensor(ragged); }) ==
        ragged + ": not a tensor: ragged array: row 2 has 3 values, row 1 has 4 (line 2, column 2)");
  std::string broken = dir.file("broken.json", "{\"a\": [1,\n 2,\n 3 4]}");
  CHECK(error_of([&] { sources.tensor(broken + "#a"); }) == broken + ":3:4: expected ',' or ']' in an array, found '4'");
  // documents are cached: a file changed after its first read is not read again
  dir.file("bundle.json", "[]");
  CHECK(sources.tensor(bundle + "#c_n")[0] == 3);

  SUBCASE("standard input is read once and referenced many times") {
    FakeStdin in(R"({"output": [1, 2], "h_n": [3]})");
    Sources s;
    CHECK(s.tensor("-#output").numel() == 2);
    CHECK(s.tensor("-#h_n")[0] == 3);
    CHECK(s.value("-").is_bundle());
    CHECK(error_of([&] { s.tensor("-#c_n"); }) == "<stdin>: no tensor named \"c_n\" (has: output, h_n)");
  }
  SUBCASE("standard input as an NDJSON stream") {
    FakeStdin in("[1]\n[2, 3]\n{\"a\": [4]}\n");
    Sources s;
    CHECK(s.tensor("-").numel() == 1);
    CHECK(s.record_index() == 0);
    CHECK(s.next_record());
    CHECK(s.streaming());
    CHECK(s.tensor("-").numel() == 2);
    CHECK(s.next_record());
    CHECK(s.tensor("-#a")[0] == 4);
    CHECK(!s.next_record());
    CHECK(s.record_index() == 2);
  }
  SUBCASE("empty standard input") {
    FakeStdin in("");
    Sources s;
    CHECK(error_of([&] { s.tensor("-"); }) == "<stdin>:1:1: empty input, expected a JSON value");
  }
  SUBCASE("syntax errors on standard input") {
    FakeStdin in("[1,\n x]");
    Sources s;
    CHECK(error_of([&] { s.tensor("-"); }) == "<stdin>:2:2: expected a number, found 'x'");
  }
}

TEST_CASE("Value: set_path builds nested bundles and refuses clashes") {
  Value b = Value::bundle();
  b.set_path({"enc", "W"}, Tensor::scalar(1));
  b.set_path({"enc", "U"}, Tensor::scalar(2));
  b.set_path({"dec"}, Tensor::scalar(3));
  CHECK(b.names() == std::vector<std::string>{"enc", "dec"});
  CHECK(b.find("enc")->names() == std::vector<std::string>{"W", "U"});
  CHECK(error_of([&] { b.set_path({"enc", "W"}, Tensor::scalar(4)); }) == "bundle: the name \"enc/W\" is given twice");
  CHECK(error_of([&] { b.set_path({"dec", "x"}, Tensor::scalar(4)); }) == "bundle: \"dec\" is a tensor, it cannot hold \"x\"");
  CHECK(error_of([&] { b.set_path({"enc", "W", "x", "y"}, Tensor::scalar(4)); }) == "bundle: \"W\" is a tensor, it cannot hold \"x\"");
  b.set("dec", Tensor::scalar(5));  // set replaces
  CHECK(b.find("dec")->tensor()[0] == 5);
}

TEST_CASE("write_file_atomic: replaces whole, leaves nothing behind on failure") {
  TempDir dir;
  std::string path = dir.path + "/out.json";
  write_file_atomic(path, "[1]\n");
  write_file_atomic(path, "[2]\n");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "[2]\n");
  CHECK(error_of([&] { write_file_atomic(dir.path + "/no/such/dir/x.json", "1"); }).find("cannot create a temporary file") !=
        std::string::npos);
  CHECK(error_of([&] { write_file_atomic(dir.path + "/", "1"); }) == dir.path + "/: is a folder, not a file");
  // no temporary left
  std::string listing;
  FILE* p = popen(("ls -A '" + dir.path + "'").c_str(), "r");
  char buf[256];
  while (fgets(buf, sizeof buf, p)) listing += buf;
  pclose(p);
  CHECK(listing == "out.json\n");
}

TEST_CASE("copy_file_atomic: the same bytes, nothing left behind, failures name the path") {
  TempDir dir;
  std::string bytes(3 << 20, '\0');  // more than one piece of the copy, with every byte value
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7 + i / 4096) & 0xff);
  const std::string from = dir.file("from.bin", bytes);
  const std::string to = dir.path + "/to.bin";
  dir.file("to.bin", "old");
  copy_file_atomic(from, to);
  std::ifstream in(to, std::ios::binary);
  CHECK((std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()) == bytes));
  const std::string empty = dir.file("empty.bin", "");
  copy_file_atomic(empty, dir.path + "/empty_copy.bin");
  CHECK(std::ifstream(dir.path + "/empty_copy.bin", std::ios::binary).peek() == EOF);
  const std::string missing_dir = dir.path + "/no/such/dir/x.bin";
  CHECK(error_of([&] { copy_file_atomic(from, missing_dir); }) ==
        missing_dir + ": cannot create a temporary file in " + dir.path + "/no/such/dir/ (No such file or directory)");
  CHECK(error_of([&] { copy_file_atomic(dir.path + "/none", dir.path + "/x.bin"); }) ==
        dir.path + "/none: cannot open (No such file or directory)");
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of([&] { copy_file_atomic(fifo, dir.path + "/x.bin"); }) ==
        fifo + ": is not a regular file, nothing to copy");
  CHECK(error_of([&] { copy_file_atomic(dir.path, dir.path + "/x.bin"); }) ==
        dir.path + ": is not a regular file, nothing to copy");
  // no temporary and no partial copy left
  std::string listing;
  FILE* p = popen(("ls -A '" + dir.path + "'").c_str(), "r");
  char buf[256];
  while (fgets(buf, sizeof buf, p)) listing += buf;
  pclose(p);
  CHECK(listing == "empty.bin\nempty_copy.bin\nfifo\nfrom.bin\nto.bin\n");
}

TEST_CASE("non-tensor members are written back as they were read (metadata survives get and pack)") {
  std::string text = "{\"output\": [[1, 2]],\n \"meta\": {\"cell\":  \"lstm\", \"n\": [1, \"x\"], \"ok\": true,\n"
                     "  \"esc\": \"a\\\" b\\\\ \\u00e9\", \"none\": null},\n \"dup\": {\"a\": 1, \"a\": 2},\n"
                     " \"ragged\": [[1], [2, 3]], \"flat\": {\"shape\": [3], \"data\": [1]}}";
  Value v = parse(text);
  CHECK(v.find("meta")->find("cell")->json() == "\"lstm\"");
  CHECK(v.find("meta")->find("n")->json() == "[1,\"x\"]");
  CHECK(v.find("meta")->find("n")->why() == "an array holding a string (line 2, column 37)");
  const std::string compact =
      R"({"output":[[1,2]],"meta":{"cell":"lstm","n":[1,"x"],"ok":true,"esc":"a\" b\\ \u00e9","none":null},)"
      R"("dup":{"a":1,"a":2},"ragged":[[1],[2,3]],"flat":{"shape":[3],"data":[1]}})";
  CHECK(to_json(v) == compact);
  CHECK(to_json(parse(to_json(v, {TensorFormat::Flat, true}))) == compact);  // and again, through pretty flat
  CHECK(Value::other("made here").json().empty());
  CHECK(to_json(Value::other("made here")) == "\"made here\"");
}

TEST_CASE("read_text: files, folders, pipes") {
  TempDir dir;
  std::string f = dir.file("a.json", "[1, 2]");
  CHECK(read_text(f) == "[1, 2]");
  CHECK(read_text(dir.file("empty.json", "")).empty());
  std::string big(300000, ' ');
  big[299999] = '1';
  CHECK(read_text(dir.file("big.json", big)) == big);
  CHECK(error_of([&] { read_text(dir.path); }) == dir.path + ": is a folder, not a file");
  CHECK(error_of([&] { read_text(dir.path + "/none"); }) == dir.path + "/none: cannot open (No such file or directory)");
  // a FIFO (what the shell's <(...) gives) is read to its end
  std::string fifo = dir.path + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  std::string cmd = "(printf '[3]' > '" + fifo + "') &";
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(read_text(fifo) == "[3]");
}

TEST_CASE("shapes survive the wire: every shape reads back unchanged, in both formats") {
  // every shape of rank 0..4 with sizes 0..2, then sizes past float32's exact integers
  std::vector<Shape> shapes;
  for (int rank = 0; rank <= 4; ++rank) {
    int count = 1;
    for (int i = 0; i < rank; ++i) count *= 3;
    for (int code = 0; code < count; ++code) {
      Shape s;
      for (int i = 0, c = code; i < rank; ++i, c /= 3) s.push_back(c % 3);
      shapes.push_back(s);
    }
  }
  for (int64_t big : {int64_t{16777217}, int64_t{1} << 31, (int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max()}) {
    shapes.push_back({big, 0});
    shapes.push_back({0, big});
    shapes.push_back({2, 0, big});
  }
  shapes.push_back({16777217});  // 16777217 values: past float32's exact integers, within the limit
  int checked = 0;
  for (const Shape& s : shapes) {
    Tensor t(s);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = static_cast<float>(i % 7);
    for (TensorFormat format : {TensorFormat::Nested, TensorFormat::Flat}) {
      WriteOptions w;
      w.format = format;
      std::string text = to_json(t, w);
      Value back = parse_json(text, "t.json");
      REQUIRE_MESSAGE(back.is_tensor(), shape_str(s) << " wrote " << text.substr(0, 80) << ": " << back.why());
      CHECK_MESSAGE(back.tensor().shape() == s, shape_str(s) << " wrote " << text.substr(0, 80) << ", read "
                                                             << back.tensor().shape_str());
      CHECK(back.tensor().values() == t.values());
      ++checked;
    }
  }
  CHECK(checked == 2 * static_cast<int>(shapes.size()));
  // the default (nested) writes a tensor of rank >= 2 with a size 0 in the flat form
  CHECK(to_json(Tensor({2, 0, 4})) == R"({"shape":[2,0,4],"data":[]})");
  CHECK(to_json(Tensor({0, 3})) == R"({"shape":[0,3],"data":[]})");
  CHECK(to_json(Tensor({3, 0})) == R"({"shape":[3,0],"data":[]})");
  CHECK(to_json(Tensor({0})) == "[]");
}

TEST_CASE("flat form: shape sizes are exact integers, not float32") {
  CHECK(parse(R"({"shape": [16777217, 0], "data": []})").tensor().shape() == Shape{16777217, 0});
  CHECK(parse(R"({"shape": [9223372036854775807, 0], "data": []})").tensor().shape() == Shape{INT64_MAX, 0});
  CHECK(parse(R"({"shape": [3.0, 1e0], "data": [1, 2, 3]})").tensor().shape() == Shape{3, 1});
  CHECK(parse(R"({"shape": [ 2 ,
   2 ], "data": [1, 2, 3, 4]})").tensor().shape() == Shape{2, 2});
  // 16777217 values is one past float32's exact integers: refused for the limit, not misread
  ReadOptions small;
  small.max_elements = 16777216;
  CHECK(parse_error(R"({"shape": [16777217], "data": []})", "x.json", small) ==
        "x.json:1:1: flat tensor of shape [16777217] has more than 16777216 elements (see --max-elements)");
  CHECK(why_not(R"({"shape": [9223372036854775808, 0], "data": []})") ==
        "a flat tensor whose \"shape\" holds 9223372036854775808 (sizes are non-negative integers) (line 1, column 1)");
  CHECK(why_not(R"({"shape": [1e17, 0], "data": []})") ==
        "a flat tensor whose \"shape\" holds 1e17 (sizes are non-negative integers) (line 1, column 1)");
  CHECK(why_not(R"({"shape": ["NaN"], "data": []})") ==
        "a flat tensor whose \"shape\" holds \"NaN\" (sizes are non-negative integers) (line 1, column 1)");
}

TEST_CASE("RecordReader: a stream read record by record, with positions in the whole input") {
  TempDir dir;
  auto records = [&](const std::string& text) {
    RecordReader r(dir.file("s.ndjson", text));
    std::vector<std::string> out;
    Value v;
    while (r.next(v)) out.push_back(to_json(v));
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(records("[1, 2]\n{\"a\": [3]}\n\n  7  \n[[1],\n [2]]\n") == V{"[1,2]", "{\"a\":[3]}", "7", "[[1],[2]]"});
  CHECK(records("[1]\r\n[2]") == V{"[1]", "[2]"});  // no newline after the last
  CHECK(records("\n\n[1]\n\n") == V{"[1]"});
  // brackets and newlines inside strings do not end or open a record
  CHECK(records("{\"s\": \"]]}\\n[\", \"t\": [1]}\n[2]\n") == V{"{\"s\":\"]]}\\n[\",\"t\":[1]}", "[2]"});
  CHECK(records("{\"s\": \"\\\\\", \"t\": [1]}\n[2]\n") == V{"{\"s\":\"\\\\\",\"t\":[1]}", "[2]"});
  // a record past the read buffer (1 MiB), with escapes across its boundary
  std::string big = "{\"s\": \"";
  for (int i = 0; i < 400000; ++i) big += "\\\"]";
  big += "\", \"x\": [1, 2]}";
  CHECK(records(big + "\n" + big + "\n[3]\n").size() == 3);
  // messages give the line in the whole input
  CHECK(error_of([&] { records("[1]\n\n[2,\n 3]\n[4, x]\n"); }) == dir.path + "/s.ndjson:5:5: expected a number, found 'x'");
  CHECK(error_of([&] { records("[1]\n[2] [3]\n"); }) == dir.path + "/s.ndjson:2:5: expected the end of the line after a JSON document");
  CHECK(error_of([&] { records("[1]\n[2,\n"); }) == dir.path + "/s.ndjson:2:1: unterminated array");
  CHECK(error_of([&] { records("\n  "); }) == dir.path + "/s.ndjson:2:3: empty input, expected a JSON value");
  CHECK(error_of([&] { RecordReader r(dir.path + "/none.json"); }) == dir.path + "/none.json: cannot open (No such file or directory)");
}

TEST_CASE("Sources: streams are paired record by record, one document goes with every record") {
  TempDir dir;
  std::string a = dir.file("a.ndjson", "[1]\n[2]\n[3]\n");
  std::string b = dir.file("b.ndjson", "[10]\n[20]\n[30]\n");
  std::string one = dir.file("one.json", "[100]");
  std::string short_ = dir.file("short.ndjson", "[1]\n[2]\n");
  {
    Sources s;
    std::vector<float> seen;
    do seen.push_back(s.tensor(a)[0] + s.tensor(b)[0] + s.tensor(one)[0]);
    while (s.next_record());
    CHECK(seen == std::vector<float>{111, 122, 133});
    CHECK(s.streaming());
  }
  {
    Sources s;
    CHECK(s.tensor(one)[0] == 100);
    CHECK(!s.next_record());  // one document: one record
    CHECK(!s.streaming());
  }
  {
    Sources s;
    auto run = [&] {
      do (void)(s.tensor(short_)[0] + s.tensor(a)[0]);
      while (s.next_record());
    };
    CHECK(error_of(run) == short_ + " ends after 2 records, " + a +
                               " has more: streams are paired record by record and must hold as many");
  }
  {
    Sources s;
    CHECK(error_of([&] { s.single_value(a + "#x", "weights"); }) == a + ": holds more than one record; weights take one document");
    CHECK(s.single_value(one, "weights").tensor()[0] == 100);
  }
}
