// tensor/enum_names.hpp: one table of an enum's names, read both ways.
#include <doctest/doctest.h>

#include "attnkit/tensor/enum_names.hpp"

using namespace attnkit;

namespace {
enum class Fruit { Apple, Pear, Fig };
constexpr EnumName<Fruit> kFruitNames[] = {{Fruit::Apple, "apple"}, {Fruit::Pear, "pear"}, {Fruit::Fig, "fig"}};
}  // namespace

TEST_CASE("enum names: name_of, parse_name and names_of read one table") {
  CHECK(std::string(name_of(kFruitNames, Fruit::Apple)) == "apple");
  CHECK(std::string(name_of(kFruitNames, Fruit::Fig)) == "fig");
  for (const auto& e : kFruitNames) CHECK(parse_name(kFruitNames, name_of(kFruitNames, e.value)) == e.value);
  CHECK(parse_name(kFruitNames, "pear") == Fruit::Pear);
  CHECK_FALSE(parse_name(kFruitNames, "Pear").has_value());  // exact, as the tools' keywords
  CHECK_FALSE(parse_name(kFruitNames, "").has_value());
  CHECK_FALSE(parse_name(kFruitNames, "pea").has_value());
  CHECK(names_of(kFruitNames) == "apple, pear, fig");
  CHECK(names_of(kFruitNames, "|") == "apple|pear|fig");
}

namespace {
enum class Side { Left, Right };
constexpr EnumName<Side> kSideNames[] = {{Side::Left, "left"}, {Side::Right, "right"}};
enum class One { Only };
constexpr EnumName<One> kOneNames[] = {{One::Only, "only"}};
}  // namespace

TEST_CASE("enum names: names_or lists the alternatives as a message says them") {
  CHECK(names_or(kFruitNames) == "apple, pear or fig");
  CHECK(names_or(kSideNames) == "left or right");
  CHECK(names_or(kOneNames) == "only");
}
