// Hostile input to the JSON reader and the references (docs/hardening.md): every refusal is an
// attnkit::Error with a clear message, nothing crashes, nothing is allocated for a declared size
// past the limit, no stack overflow, no quadratic time.
#include <doctest/doctest.h>

#include <string>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/reference.hpp"
#include "attnkit/tensor/error.hpp"
#include "test_util.hpp"

using namespace attnkit;
using namespace attnkit::io;

namespace {

std::string error_of(const std::string& text, const ReadOptions& options = {}) {
  return test::error_of([&] { parse_json(text, "x.json", options); });
}

std::string why_of(const std::string& text) {
  Value v = parse_json(text, "x.json");
  REQUIRE(v.kind() == Value::Kind::Other);
  return v.why();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("hostile: deep nesting is refused with a position, not a stack overflow") {
  std::string arrays(100000, '[');
  std::string e = error_of(arrays);
  CHECK(contains(e, "x.json:1:65: nesting deeper than 64 levels"));
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  CHECK(contains(error_of(objects), "nesting deeper than 64 levels"));
  std::string mixed;
  for (int i = 0; i < 50000; ++i) mixed += "[{\"a\":";
  CHECK(contains(error_of(mixed), "nesting deeper than 64 levels"));
}

TEST_CASE("hostile: declared shapes that overflow or pass --max-elements are refused") {
  CHECK(contains(error_of(R"({"shape": [4294967296, 4294967296, 4294967296], "data": []})"),
                 "x.json:1:1: flat tensor of shape [4294967296, 4294967296, 4294967296] has more than"));
  CHECK(contains(error_of(R"({"shape": [3037000500, 3037000500], "data": [1]})"), "has more than"));
  ReadOptions small;
  small.max_elements = 5;
  CHECK(contains(error_of(R"({"shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]})", small), "more than 5 elements"));
  CHECK(contains(error_of("[[1, 2, 3], [4, 5, 6]]", small), "x.json:1:20: tensor has more than 5 elements"));
  CHECK(parse_json("[1, 2, 3, 4, 5]", "x.json", small).tensor().numel() == 5);
  // sizes that are not non-negative integers
  CHECK(contains(why_of(R"({"shape": [-1], "data": []})"), "sizes are non-negative integers"));
  CHECK(contains(why_of(R"({"shape": [1.5], "data": [1]})"), "sizes are non-negative integers"));
  CHECK(contains(why_of(R"({"shape": [1e30], "data": [1]})"), "sizes are non-negative integers"));
  CHECK(contains(why_of(R"({"shape": [2, 2], "data": [1, 2, 3]})"), "needs 4 values in \"data\", has 3"));
}

TEST_CASE("hostile: numbers out of the float32 range are not tensors, with their position") {
  CHECK(contains(why_of("[123e65]"), "number 123e65 is out of the float32 range"));
  CHECK(contains(why_of("[1, -1e39]"), "(line 1, column 5)"));
  CHECK(contains(why_of("1e400"), "out of the float32 range"));
  // tiny values round to zero; "Infinity" strings are the way to write infinity
  CHECK(parse_json("[1e-50]", "x.json").tensor()[0] == 0.0f);
  CHECK(std::isinf(parse_json(R"(["-Infinity"])", "x.json").tensor()[0]));
}

TEST_CASE("hostile: empty tensors, scalars, odd members") {
  CHECK(parse_json("[]", "x.json").tensor().shape() == Shape{0});
  CHECK(parse_json("[[], []]", "x.json").tensor().shape() == Shape{2, 0});
  CHECK(parse_json("7", "x.json").tensor().rank() == 0);
  CHECK(contains(why_of("[[1, 2], []]"), "ragged array"));
  CHECK(contains(why_of("[[], [1]]"), "ragged array"));
  CHECK(contains(why_of("[1, [2]]"), "mixes numbers and arrays"));
  CHECK(contains(why_of(R"([1, "two"])"), "an array holding a string (line 1, column 5)"));
  CHECK(contains(why_of("[1, null]"), "an array holding null"));
  CHECK(contains(why_of(R"([{"a": 1}])"), "an array holding an object"));
  CHECK(contains(error_of("[1, 2,]"), "x.json:1:7: trailing comma in an array"));
  CHECK(contains(error_of(""), "x.json:1:1: empty input"));
  CHECK(contains(error_of("[1, 2] x"), "x.json:1:8: unexpected text after the JSON value"));
}

TEST_CASE("hostile: duplicate bundle keys are refused, in small and large objects") {
  CHECK(contains(why_of(R"({"a": 1, "a": 2})"), "the key \"a\" twice (line 1, column 10)"));
  // past 16 members the reader checks with a hash set: same answer
  std::string big = "{";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  CHECK(parse_json(big + "\"last\": 0}", "x.json").names().size() == 41);
  CHECK(contains(why_of(big + "\"k30\": 1}"), "the key \"k30\" twice"));
  CHECK(contains(why_of(big + "\"k3\": 1}"), "the key \"k3\" twice"));
}

TEST_CASE("hostile: positions stay right after many earlier lookups") {
  // 200 000 string members: each asks for its position (linear overall, see line_col)
  std::string many = "{";
  for (int i = 0; i < 200000; ++i) many += "\"k" + std::to_string(i) + "\": \"v\",\n";
  Value v = parse_json(many + "\"end\": 1}", "x.json");
  CHECK(v.names().size() == 200001);
  CHECK(v.find("k199999")->why() == "a string (line 200000, column 12)");
  // an error before the last asked position is still placed right
  CHECK(contains(error_of("{\"a\": \"s\", \"b\": [[1], [2, 3]], \"c\": \"t\",\n \"d\": [1,}"), "x.json:2:10: expected a number"));
  CHECK(contains(error_of("[[1], [2, 3], \"x\"\n"), "x.json:1:1: unterminated array"));
}

TEST_CASE("hostile: NaN is refused with its position unless allowed") {
  // Sources reads files; parse the text the same way through a stream with one record.
  auto records = parse_json_stream(R"([[1, 2], [3, "NaN"]])", "x.json");
  REQUIRE(records.size() == 1);
  CHECK(find_nan(records[0].tensor()) == 3);
}

TEST_CASE("hostile: references with empty parts are refused") {
  CHECK_THROWS_WITH_AS(parse_reference(""), doctest::Contains("no file before '#'"), Error);
  CHECK_THROWS_WITH_AS(parse_reference("#a"), doctest::Contains("no file before '#'"), Error);
  CHECK_THROWS_WITH_AS(parse_reference("x.json#"), doctest::Contains("no name after '#'"), Error);
  CHECK_THROWS_WITH_AS(parse_reference("x.json#a//b"), doctest::Contains("empty name between '/'"), Error);
  CHECK(parse_reference("x.json#a/b").names == std::vector<std::string>{"a", "b"});
}
