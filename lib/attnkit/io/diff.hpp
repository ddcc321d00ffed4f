// Comparing two documents (tensors, or bundles member by member) within a tolerance:
// what `tensor diff` reports and golden-file tests check.
#pragma once
#include <string>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/tensor/compare.hpp"

namespace attnkit::io {

struct MemberDiff {
  std::string name;         // "" for a bare tensor, else the member path "a/b"
  std::string problem;      // shapes disagree, only in one side, not a tensor ("" if compared)
  Shape shape_a, shape_b;
  Comparison comparison;
};

struct DiffReport {
  bool equal = true;
  std::vector<MemberDiff> members;
  Value to_value() const;      // {"equal", "members": {...}} or, for bare tensors, the fields themselves
  std::string summary() const; // one line: the worst member, its largest errors and where
};

// Throws attnkit::Error for a NaN in either side unless allow_nan (then NaN equals NaN).
// name_a / name_b name the sides in problems and errors (the tool passes the references).
DiffReport diff(const Value& a, const Value& b, const Tolerance& tol, bool allow_nan,
                const std::string& name_a = "A", const std::string& name_b = "B");

}  // namespace attnkit::io
